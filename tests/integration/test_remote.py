"""The object-storage tier on real mounts (SPEC section 4), on file:// and on s3rver.

Uploads of closed files, the commit object written last, `persisted`, objects at natural
keys readable by awscli, cold mounts (byte-identical), two mounts of one remote, eviction
and re-fetch, ENOSPC when the cache is full of unpersisted data, remote deletion by
retention, and the faults: s3rver stopped mid-upload and restarted, kill -9 of the daemon
mid-upload, an unreachable remote or wrong credentials at mount (local data still served,
the error reported, no secret in any log).
"""
import json
import os
import time

import pytest

from ckptfs_testlib import expect_errno, read_file, tree_digest, write_file, sha256_file
from s3rver_fixture import S3rver, s3rver_available, ACCESS_KEY, SECRET_KEY

MiB = 1 << 20


def payload(n, seed):
    block = bytes((seed * 31 + i * 7) & 0xFF for i in range(4096))
    return (block * (n // 4096 + 1))[:n]


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def wait_persisted(m, step, timeout=60):
    def persisted():
        return m.xattr(step, "user.ckptfs.persisted") == "true"
    try:
        wait_for(persisted, timeout, f"{step} to be persisted")
    except AssertionError:
        raise AssertionError(f"{step} not persisted; status: {json.dumps(m.status().get('remote'))}")


def write_step(m, step, files):
    os.makedirs(m.path(step), exist_ok=True)
    for name, data in files.items():
        p = m.path(step, name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        write_file(p, data)


@pytest.fixture
def remote_dir(tmp_path):
    d = tmp_path / "remote"
    d.mkdir()
    return str(d)


@pytest.fixture
def s3(monkeypatch):
    if not s3rver_available():
        if os.environ.get("CI"):
            pytest.fail("s3rver is not installed (packaging/install-deps.sh installs it)")
        pytest.skip("s3rver is not installed: run packaging/install-deps.sh")
    server = S3rver().start()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    yield server
    server.close()


def s3_args(server, prefix="team/exp"):
    return ["--remote", f"s3://{server.bucket}/{prefix}", "--s3-endpoint", server.endpoint]


# ----------------------------------------------------------------------------- file://

@pytest.mark.timeout_s(120)
def test_file_remote_persists_and_a_cold_mount_shows_it_byte_identical(make_ckptfs, remote_dir):
    a = make_ckptfs("--remote", f"file://{remote_dir}")
    files = {"__0_0.distcp": payload(20 * MiB + 3, 1), "__1_0.distcp": payload(5 * MiB, 2),
             "sub/extra.bin": b"", "notes.txt": b"meta"}
    write_step(a, "run/step10", files)
    assert a.commit("run/step10").returncode == 0
    wait_persisted(a, "run/step10")
    st = a.step_status("run/step10")
    assert st["persisted"] is True
    assert st["upload"]["bytes_done"] == st["upload"]["bytes_total"] == sum(map(len, files.values()))
    # Natural keys: plain files under the remote directory.
    for name, data in files.items():
        assert read_file(os.path.join(remote_dir, "run/step10", name)) == data
    commit = json.load(open(os.path.join(remote_dir, "run/step10/.ckptfs-commit.json")))
    assert commit["step"] == 10
    assert sorted(f["path"] for f in commit["files"]) == sorted(files)
    digest = tree_digest(a.path("run/step10"))
    a.umount()

    b = make_ckptfs("--remote", f"file://{remote_dir}")
    assert os.listdir(b.cache) is not None
    assert b.state("run/step10") == "committed"
    assert b.xattr("run/step10", "user.ckptfs.persisted") == "true"
    assert b.latest("run") == "step10"
    assert tree_digest(b.path("run/step10")) == digest
    expect_errno(30, open, b.path("run/step10/__0_0.distcp"), "r+b")  # EROFS: committed


@pytest.mark.timeout_s(120)
def test_cache_size_evicts_persisted_data_and_reads_fetch_it_back(make_ckptfs, remote_dir):
    m = make_ckptfs("--remote", f"file://{remote_dir}", "--cache-size", "12M")
    datas = {}
    for s in range(1, 4):
        datas[s] = payload(6 * MiB + s, s)
        write_step(m, f"step{s}", {"w.bin": datas[s]})
        assert m.commit(f"step{s}").returncode == 0
        wait_persisted(m, f"step{s}")
    wait_for(lambda: m.status()["cache"]["bytes_used"] <= 12 * MiB, 30, "eviction")
    assert m.status()["cache"]["evictions"] >= 1
    for s in range(1, 4):
        assert read_file(m.path(f"step{s}/w.bin")) == datas[s]


@pytest.mark.timeout_s(120)
def test_a_cache_full_of_unpersisted_data_gives_enospc_and_keeps_what_was_written(
        make_ckptfs, monkeypatch):
    # The remote does not answer: nothing can be uploaded, so nothing can be evicted.
    from s3rver_fixture import free_port
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    m = make_ckptfs("--remote", "s3://ckpt/p", "--s3-endpoint", f"http://127.0.0.1:{free_port()}",
                    "--cache-size", "4M", "--cache-full-wait", "0.5")
    os.makedirs(m.path("step1"))
    first = payload(3 * MiB, 9)
    write_file(m.path("step1/a"), first)

    def write_more():
        with open(m.path("step1/b"), "wb") as f:
            f.write(payload(4 * MiB, 3))
            f.flush()
    expect_errno(28, write_more)  # ENOSPC
    assert read_file(m.path("step1/a")) == first
    assert any("cache full" in e.get("error", "") for e in m.events())


@pytest.mark.timeout_s(120)
def test_retention_and_rm_delete_remote_objects(make_ckptfs, remote_dir):
    m = make_ckptfs("--remote", f"file://{remote_dir}", "--keep-last", "1")
    write_step(m, "r/step1", {"x": b"1" * 1000})
    assert m.commit("r/step1").returncode == 0
    wait_persisted(m, "r/step1")
    write_step(m, "r/step2", {"x": b"2" * 1000})
    assert m.commit("r/step2").returncode == 0
    wait_persisted(m, "r/step2")
    wait_for(lambda: not os.path.exists(os.path.join(remote_dir, "r/step1/x")), 30,
             "the pruned step's objects to go")
    assert not os.path.exists(os.path.join(remote_dir, "r/step1/.ckptfs-commit.json"))
    # rm -rf of a persisted step deletes its remote copy too.
    import shutil
    shutil.rmtree(m.path("r/step2"))
    wait_for(lambda: not os.path.exists(os.path.join(remote_dir, "r/step2/x")), 30,
             "the removed step's objects to go")
    assert not os.path.exists(os.path.join(remote_dir, "r/step2/.ckptfs-commit.json"))


# ----------------------------------------------------------------------------- s3rver

@pytest.mark.timeout_s(180)
def test_s3_upload_natural_keys_readable_by_awscli(make_ckptfs, s3):
    m = make_ckptfs(*s3_args(s3))
    files = {"rank0.bin": payload(17 * MiB + 5, 4), "rank1.bin": payload(MiB, 5),
             "nested/dir/small.json": b'{"a": 1}'}
    write_step(m, "run1/step200", files)
    # Closed files go up before the commit.
    wait_for(lambda: "team/exp/run1/step200/rank1.bin" in s3.keys("team/exp/run1/step200"), 60,
             "an upload before commit")
    assert "team/exp/run1/step200/.ckptfs-commit.json" not in s3.keys("team/exp/")
    assert m.xattr("run1/step200", "user.ckptfs.persisted") == "false"
    assert m.commit("run1/step200").returncode == 0
    wait_persisted(m, "run1/step200")
    keys = s3.keys("team/exp/run1/step200/")
    assert keys == sorted(["team/exp/run1/step200/" + k for k in files] +
                          ["team/exp/run1/step200/.ckptfs-commit.json"])
    for name, data in files.items():
        assert s3.get("team/exp/run1/step200/" + name) == data
    remote = m.status()["remote"]
    assert remote["healthy"] is True
    assert remote["url"].startswith("s3://ckpt/team/exp")
    assert any(e["event"] == "persisted" for e in m.events())


@pytest.mark.timeout_s(240)
def test_s3_two_mounts_and_a_cold_mount_see_persisted_steps(make_ckptfs, s3):
    a = make_ckptfs(*s3_args(s3))
    files = {"model.safetensors": payload(9 * MiB + 1, 6), "metadata.json": b"{}"}
    write_step(a, "step-42", {"model.safetensors": files["model.safetensors"]})
    write_file(a.path("step-42/metadata.json"), files["metadata.json"])  # marker
    a.wait_state("step-42", "committed")
    wait_persisted(a, "step-42")
    digest = tree_digest(a.path("step-42"))
    # A second machine's mount (its own empty cache) while the first is still mounted.
    b = make_ckptfs(*s3_args(s3))
    assert b.state("step-42") == "committed"
    assert b.xattr("step-42", "user.ckptfs.persisted") == "true"
    assert tree_digest(b.path("step-42")) == digest
    # Reads at an offset fetch just that range.
    with open(b.path("step-42/model.safetensors"), "rb") as f:
        f.seek(8 * MiB)
        assert f.read(100) == files["model.safetensors"][8 * MiB:8 * MiB + 100]


@pytest.mark.timeout_s(300)
def test_s3rver_stopped_mid_upload_then_restarted_loses_nothing(make_ckptfs, s3):
    m = make_ckptfs(*s3_args(s3))
    s3.stop()
    files = {f"shard{i}": payload(8 * MiB + i, 10 + i) for i in range(3)}
    write_step(m, "step1", files)
    assert m.commit("step1").returncode == 0  # commit does not wait for the remote
    wait_for(lambda: m.status()["remote"]["healthy"] is False, 60, "the remote to be reported down")
    assert m.status()["remote"]["last_error"]
    assert m.xattr("step1", "user.ckptfs.persisted") == "false"
    s3.start()
    wait_persisted(m, "step1", timeout=120)
    for name, data in files.items():
        assert s3.get(f"team/exp/step1/{name}") == data
    assert any(e["event"] == "remote_error" for e in m.events())


@pytest.mark.timeout_s(300)
def test_kill9_mid_upload_resumes_and_never_shows_an_incomplete_commit_object(make_ckptfs, s3):
    m = make_ckptfs(*s3_args(s3))
    files = {f"big{i}": payload(40 * MiB + i, 20 + i) for i in range(3)}
    write_step(m, "step9", files)
    assert m.commit("step9").returncode == 0
    m.kill9()
    keys = s3.keys("team/exp/step9/")
    if "team/exp/step9/.ckptfs-commit.json" in keys:
        # Written last: if it is there, everything it lists is complete.
        commit = json.loads(s3.get("team/exp/step9/.ckptfs-commit.json"))
        for f in commit["files"]:
            assert s3.get("team/exp/step9/" + f["path"]) == files[f["path"]]
    m.start()
    wait_persisted(m, "step9", timeout=180)
    for name, data in files.items():
        assert s3.get(f"team/exp/step9/{name}") == data


@pytest.mark.timeout_s(180)
def test_unreachable_remote_at_mount_serves_local_data_and_reports_it(make_ckptfs, s3, monkeypatch):
    secret = "VerySecretValue-do-not-log-1234567890"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    port = s3.port
    s3.stop()  # nothing listens there now
    m = make_ckptfs("--remote", "s3://ckpt/p", "--s3-endpoint", f"http://127.0.0.1:{port}")
    write_step(m, "step1", {"f": b"local data"})
    assert m.commit("step1").returncode == 0
    assert read_file(m.path("step1/f")) == b"local data"
    wait_for(lambda: m.status()["remote"]["healthy"] is False, 60, "the error in status.json")
    status_text = open(m.path(".ckptfs/status.json")).read()
    events_text = open(m.path(".ckptfs/events")).read()
    assert "127.0.0.1" in m.status()["remote"]["last_error"]
    m.umount()
    logs = m.daemon_log(tail=10 ** 7)
    for text in (status_text, events_text, logs):
        assert secret not in text


@pytest.mark.timeout_s(180)
def test_wrong_credentials_are_reported_without_the_secret(make_ckptfs, s3, monkeypatch):
    # s3rver knows one key id (S3RVER) and does not check secrets: a wrong key id it is.
    secret = "WrongSecret-never-in-logs-0987654321"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGKEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    m = make_ckptfs(*s3_args(s3))
    write_step(m, "step1", {"f": b"x" * 100})
    assert m.commit("step1").returncode == 0
    wait_for(lambda: m.status()["remote"]["healthy"] is False, 90, "the credential error")
    err = m.status()["remote"]["last_error"]
    assert "InvalidAccessKeyId" in err or "403" in err, err
    assert m.xattr("step1", "user.ckptfs.persisted") == "false"
    texts = [open(m.path(".ckptfs/status.json")).read(), open(m.path(".ckptfs/events")).read()]
    m.umount()
    texts.append(m.daemon_log(tail=10 ** 7))
    for text in texts:
        assert secret not in text


def test_bad_remote_options_are_refused_before_mounting(make_ckptfs):
    for args, needle in [
        (["--remote", "ftp://x"], "s3://"),
        (["--remote", "s3://Bad_Bucket/x"], "bucket"),
        (["--remote", "file://relative"], "absolute"),
        (["--s3-endpoint", "http://127.0.0.1:1"], "--remote"),
        (["--cache-size", "1G"], "--remote"),
        (["--remote", "file:///tmp", "--cache-size", "lots"], "--cache-size"),
    ]:
        m = make_ckptfs(*args, start=False)
        with pytest.raises(Exception) as e:
            m.start()
        assert needle in str(e.value), (args, str(e.value))
        assert not m.mounted


@pytest.mark.timeout_s(120)
def test_metrics_show_uploads_and_cache(make_ckptfs, remote_dir):
    from test_lifecycle import parse_metrics
    m = make_ckptfs("--remote", f"file://{remote_dir}", "--cache-size", "1G")
    write_step(m, "step1", {"a": payload(3 * MiB, 1)})
    assert m.commit("step1").returncode == 0
    wait_persisted(m, "step1")
    text = read_file(m.path(".ckptfs/metrics")).decode()
    metrics = parse_metrics(text)
    assert metrics[("ckptfs_upload_bytes_total", frozenset())] == 3 * MiB
    assert metrics[("ckptfs_remote_healthy", frozenset())] == 1
    assert metrics[("ckptfs_steps_persisted", frozenset())] == 1
    assert metrics[("ckptfs_cache_limit_bytes", frozenset())] == 1 << 30
    assert metrics[("ckptfs_file_bytes", frozenset({("state", '"persisted"')}))] == 3 * MiB


# ----------------------------------------------------------------------------- run-level files
# A trainer's own index beside its steps (DeepSpeed's `latest`, RecIS's `checkpoint`) travels
# with the bucket, so a trainer resuming on a new machine finds what it wrote; the remote copy
# never names a step the remote does not hold.

def deepspeed_save(m, run, step, data):
    """DeepSpeed's save_checkpoint: global_step<N>/ files, then `latest` via open("latest", "w")."""
    tag = f"global_step{step}"
    d = m.path(run, tag)
    os.makedirs(d, exist_ok=True)
    write_file(os.path.join(d, "mp_rank_00_model_states.pt"), data)
    write_file(os.path.join(d, "zero_pp_rank_0_mp_rank_00_optim_states.pt"), data[::-1])
    with open(m.path(run, "latest"), "w") as f:
        f.write(tag)
    return tag


def deepspeed_load(m, run):
    """DeepSpeed's load_checkpoint(tag=None): the tag from `latest`, then its states file."""
    with open(m.path(run, "latest")) as f:
        tag = f.read().strip()
    return tag, read_file(m.path(run, tag, "mp_rank_00_model_states.pt"))


def recis_save(m, run, step, data):
    """RecIS Saver.save: ckpt_<N>/ files, then the id appended to the run's `checkpoint` ("a+")."""
    ckpt = f"ckpt_{step}"
    d = m.path(run, ckpt)
    os.makedirs(d, exist_ok=True)
    write_file(os.path.join(d, "model.pt"), data)
    write_file(os.path.join(d, "extra.pt"), b"extra" + str(step).encode())
    write_file(os.path.join(d, "io_state_0.pt"), b"io")
    with open(m.path(run, "checkpoint"), "a+") as f:
        f.write(ckpt + "\n")
    return ckpt


def s3_object(s3, key):
    """The object's bytes, or None when there is none."""
    return s3.get(key) if key in s3.keys(key) else None


def assert_index_names_persisted_steps(read_object, run_key, index):
    """The remote index names only steps whose commit object is in the remote."""
    body = read_object(f"{run_key}/{index}")
    if body is None:
        return
    for name in body.decode().split():
        assert read_object(f"{run_key}/{name}/.ckptfs-commit.json") is not None, \
            f"remote {index} names {name}, which is not persisted in the remote"


def wait_remote_object(read_object, key, expected, timeout=60, check=None):
    def ready():
        if check:
            check()
        return read_object(key) == expected
    wait_for(ready, timeout, f"{key} = {expected!r} in the remote")


@pytest.mark.timeout_s(300)
def test_s3_deepspeed_latest_travels_with_the_bucket(make_ckptfs, s3):
    a = make_ckptfs(*s3_args(s3))
    obj = lambda key: s3_object(s3, key)
    check = lambda: assert_index_names_persisted_steps(obj, "team/exp/ds", "latest")
    shards = {}
    for step in (100, 200):
        shards[step] = payload(12 * MiB + step, step)
        tag = deepspeed_save(a, "ds", step, shards[step])
        check()
        assert a.commit(f"ds/{tag}").returncode == 0
        wait_persisted(a, f"ds/{tag}")
        wait_remote_object(obj, "team/exp/ds/latest", tag.encode(), check=check)
    a.umount()

    # A new machine: an empty cache on the same bucket finds the same `latest` and the step.
    b = make_ckptfs(*s3_args(s3))
    assert os.path.isfile(b.path("ds/latest")) and not os.path.islink(b.path("ds/latest"))
    assert deepspeed_load(b, "ds") == ("global_step200", shards[200])
    assert b.state("ds/global_step200") == "committed"
    # It resumes and saves the next step: `latest` is rewritten in place ("w").
    shards[300] = payload(3 * MiB, 3)
    tag = deepspeed_save(b, "ds", 300, shards[300])
    assert b.commit(f"ds/{tag}").returncode == 0
    wait_persisted(b, f"ds/{tag}")
    wait_remote_object(obj, "team/exp/ds/latest", b"global_step300", check=check)
    # Removing it removes the object.
    os.unlink(b.path("ds/latest"))
    wait_for(lambda: obj("team/exp/ds/latest") is None, 60, "the remote latest to be deleted")
    assert obj("team/exp/ds/global_step300/.ckptfs-commit.json") is not None


@pytest.mark.timeout_s(300)
def test_s3_recis_checkpoint_index_travels_with_the_bucket(make_ckptfs, s3):
    a = make_ckptfs(*s3_args(s3))
    obj = lambda key: s3_object(s3, key)
    check = lambda: assert_index_names_persisted_steps(obj, "team/exp/recis", "checkpoint")
    models = {}
    for step in (5, 10):
        models[step] = payload(4 * MiB + step, step)
        ckpt = recis_save(a, "recis", step, models[step])
        check()
        assert a.commit(f"recis/{ckpt}").returncode == 0
        wait_persisted(a, f"recis/{ckpt}")
    wait_remote_object(obj, "team/exp/recis/checkpoint", b"ckpt_5\nckpt_10\n", check=check)
    a.umount()

    b = make_ckptfs(*s3_args(s3))
    lines = read_file(b.path("recis/checkpoint")).decode().split()
    assert lines == ["ckpt_5", "ckpt_10"]
    assert read_file(b.path("recis", lines[-1], "model.pt")) == models[10]
    # The resumed trainer appends its next save to the index it found.
    models[15] = payload(MiB, 15)
    ckpt = recis_save(b, "recis", 15, models[15])
    assert b.commit(f"recis/{ckpt}").returncode == 0
    wait_persisted(b, f"recis/{ckpt}")
    wait_remote_object(obj, "team/exp/recis/checkpoint", b"ckpt_5\nckpt_10\nckpt_15\n", check=check)
    # max_keep=2: RecIS removes the oldest step, then rewrites the index without it.
    import shutil
    shutil.rmtree(b.path("recis/ckpt_5"))
    with open(b.path("recis/checkpoint"), "w") as f:
        f.write("ckpt_10\nckpt_15\n")
    wait_remote_object(obj, "team/exp/recis/checkpoint", b"ckpt_10\nckpt_15\n", check=check)
    wait_for(lambda: s3.keys("team/exp/recis/ckpt_5/") == [], 60, "ckpt_5's objects to be deleted")


@pytest.mark.timeout_s(180)
def test_file_remote_latest_renamed_into_place_and_files_before_the_first_step(make_ckptfs, remote_dir):
    a = make_ckptfs("--remote", f"file://{remote_dir}")
    obj = lambda key: read_file(os.path.join(remote_dir, key)) if os.path.isfile(os.path.join(remote_dir, key)) else None
    check = lambda: assert_index_names_persisted_steps(obj, "run", "latest")
    os.makedirs(a.path("run"))
    write_file(a.path("run/config.yaml"), b"lr: 0.1\n")  # before any step: not a run yet
    for step in (1, 2):
        tag = f"global_step{step}"
        write_step(a, f"run/{tag}", {"model.pt": payload(2 * MiB, step)})
        # The tmp + rename idiom (torch.save to latest.tmp, os.replace onto latest).
        with open(a.path("run/latest.tmp"), "w") as f:
            f.write(tag)
        os.replace(a.path("run/latest.tmp"), a.path("run/latest"))
        check()
        assert a.commit(f"run/{tag}").returncode == 0
        wait_persisted(a, f"run/{tag}")
        wait_remote_object(obj, "run/latest", tag.encode(), check=check)
    wait_remote_object(obj, "run/config.yaml", b"lr: 0.1\n")
    wait_for(lambda: obj("run/latest.tmp") is None, 30, "the temporary file's object to go")
    a.umount()

    b = make_ckptfs("--remote", f"file://{remote_dir}")
    assert read_file(b.path("run/latest")) == b"global_step2"
    assert read_file(b.path("run/config.yaml")) == b"lr: 0.1\n"
    assert read_file(b.path("run/global_step2/model.pt")) == payload(2 * MiB, 2)
    assert sorted(os.listdir(b.path("run"))) == sorted(["config.yaml", "global_step1", "global_step2", "latest"])
