"""Checkpoint lifecycle through a real mount: step recognition, the commit triggers,
`latest`, sealing, step xattrs, .ckptfs/status.json and events, and the CLI contract."""
import errno
import json
import os
import shutil
import signal
import struct
import subprocess
import threading
import time

import pytest

from ckptfs_testlib import (expect_errno, CKPTFS_BIN, REPO, _pid_alive, _wait_pid_gone,
                            daemon_pids_for, mounted_in_proc, read_file, run_cli, tree_digest,
                            write_file)

READ_ONLY_ERRNOS = (errno.EROFS, errno.EPERM, errno.EACCES)


def make_step(m, rel, files=None, marker=None, marker_data=b'{"ephemeral": null, "version": "2.0.0"}'):
    """Create step directory `rel` with `files` ({relpath: bytes}); optionally close a
    marker last.  Returns {relpath: bytes} of everything written."""
    files = files if files is not None else {
        "model.pt": os.urandom(100_000), "optim.pt": os.urandom(50_000), "sub/extra.bin": b"x" * 10}
    d = m.path(rel)
    os.makedirs(d, exist_ok=True)
    written = {}
    for name, data in files.items():
        p = os.path.join(d, name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        write_file(p, data)
        written[name] = data
    if marker:
        write_file(os.path.join(d, marker), marker_data)
        written[marker] = marker_data
    return written


def assert_contents(m, rel, written):
    for name, data in written.items():
        assert read_file(m.path(rel, name)) == data, f"{rel}/{name} differs"


def commit_ok(m, rel):
    r = m.commit(rel)
    assert r.returncode == 0, f"ckptfs commit {rel}: rc={r.returncode} {r.stderr.strip()}"
    assert m.state(rel) == "committed", "ckptfs commit returned before the step was committed"


def safetensors_bytes(tensors):
    """Minimal safetensors writer: {name: (dtype_code, shape, raw bytes)}."""
    header, off, blobs = {}, 0, []
    for name, (dt, shape, raw) in tensors.items():
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def olmo_safetensors_step_files():
    """A complete OLMo-core safetensors-format checkpoint: metadata.json + rank_0/1."""
    w = struct.pack("<8f", *range(8))
    files = {
        "rank_0.safetensors": safetensors_bytes({"w": ("F32", [4], w[:16])}),
        "rank_1.safetensors": safetensors_bytes({"w": ("F32", [4], w[16:])}),
    }
    meta = {"tensors": {"w": {"shape": [8], "is_sharded": True, "dtype": "F32",
                              "shard_spec_per_file": {
                                  "rank_0.safetensors": {"flattened_offsets": [[0, 4]],
                                                         "local_shape": None, "global_offset": None},
                                  "rank_1.safetensors": {"flattened_offsets": [[4, 8]],
                                                         "local_shape": None, "global_offset": None}}}}}
    return files, json.dumps(meta).encode()


# --------------------------------------------------------------------------- step recognition

@pytest.mark.parametrize("name", ["step100", "step-100", "step_100", "ckpt_100", "checkpoint-100",
                                  "global_step100", "iter_0000100"])
def test_default_step_names(ckptfs, name):
    make_step(ckptfs, f"run1/{name}", {"a.bin": b"a"})
    assert ckptfs.state(f"run1/{name}") == "writing"
    assert ckptfs.xattr(f"run1/{name}", "user.ckptfs.step") == "100"
    commit_ok(ckptfs, f"run1/{name}")
    if name.startswith("global_step"):
        # DeepSpeed's runs keep their own `latest` file: no virtual link there.
        assert not os.path.lexists(ckptfs.path("run1", "latest"))
    else:
        assert ckptfs.latest("run1") == name


@pytest.mark.parametrize("name", ["step100-tmp", "mystep100", "step", "step100.bak", "steps100",
                                  "tmp-checkpoint-100", "run1"])
def test_non_step_names(ckptfs, name):
    os.makedirs(ckptfs.path("r", name))
    write_file(ckptfs.path("r", name, ".metadata.json"), b"{}")
    time.sleep(0.3)
    assert ckptfs.state(f"r/{name}") is None
    assert "user.ckptfs.state" not in os.listxattr(ckptfs.path("r", name))
    assert not os.path.lexists(ckptfs.path("r", "latest"))
    r = ckptfs.commit(f"r/{name}")
    assert r.returncode != 0 and r.stderr.strip(), "commit of a non-step directory must fail"


def test_step_is_writing_before_commit(ckptfs):
    make_step(ckptfs, "run1/step100")
    assert ckptfs.state("run1/step100") == "writing"
    assert ckptfs.xattr("run1/step100", "user.ckptfs.step") == "100"
    assert not os.path.lexists(ckptfs.path("run1", "latest"))
    assert "latest" not in os.listdir(ckptfs.path("run1"))
    s = ckptfs.step_status("run1/step100")
    assert s is not None, ckptfs.status()
    assert s["state"] == "writing" and s["step"] == 100 and s["committed_at"] is None
    # files in a writing step are writable
    with open(ckptfs.path("run1", "step100", "model.pt"), "ab") as f:
        f.write(b"more")


def test_custom_step_pattern(make_ckptfs):
    m = make_ckptfs("--step-pattern", r"ep(\d+)")
    make_step(m, "run/ep7", {"f": b"f"})
    make_step(m, "run/step100", {"f": b"f"})
    assert m.state("run/ep7") == "writing"
    assert m.xattr("run/ep7", "user.ckptfs.step") == "7"
    assert m.state("run/step100") is None
    commit_ok(m, "run/ep7")
    assert m.latest("run") == "ep7"


# --------------------------------------------------------------------------- commit triggers

def test_marker_commit_olmo_core_trainer_layout(ckptfs, dcp_reference):
    """OLMo-core trainer: train/rank*.pt, model_and_optim/ (DCP), config.json, and
    .metadata.json written last by rank 0."""
    d = ckptfs.path("run1", "step100")
    os.makedirs(os.path.join(d, "train"))
    write_file(os.path.join(d, "train", "rank0.pt"), os.urandom(5000))
    write_file(os.path.join(d, "train", "rank1.pt"), os.urandom(5000))
    shutil.copytree(dcp_reference, os.path.join(d, "model_and_optim"))
    write_file(os.path.join(d, "config.json"), b'{"model": "tiny"}')
    time.sleep(0.5)
    assert ckptfs.state("run1/step100") == "writing"
    write_file(os.path.join(d, ".metadata.json"), b'{"ephemeral": null, "version": "2.0.0"}')
    ckptfs.wait_state("run1/step100", "committed", timeout=30)
    assert ckptfs.latest("run1") == "step100"
    assert tree_digest(os.path.join(d, "model_and_optim")) == tree_digest(dcp_reference)


def test_marker_commit_metadata_json_plain_step(ckptfs):
    """`.metadata.json` is a default marker (spec section 3): closing it in a step that
    holds plain files commits the step.  (Its content is not OLMo-core's
    CheckpointMetadata, which would make the step wait for model_and_optim/: see
    test_olmo_trainer_metadata_json_waits_for_model_and_optim.)"""
    t0 = time.time()
    written = make_step(ckptfs, "run1/step100", marker=".metadata.json", marker_data=b'{"saved_by": "my trainer"}')
    ckptfs.wait_state("run1/step100", "committed", timeout=30)
    t1 = time.time()
    assert ckptfs.latest("run1") == "step100"
    assert_contents(ckptfs, "run1/step100", written)
    assert ckptfs.xattr("run1/step100", "user.ckptfs.bytes") == str(sum(map(len, written.values())))
    assert ckptfs.xattr("run1/step100", "user.ckptfs.files") == str(len(written))
    ts = float(ckptfs.xattr("run1/step100", "user.ckptfs.committed_at"))
    assert t0 - 1 <= ts <= t1 + 1
    assert ckptfs.xattr("run1/step100", "user.ckptfs.error") in (None, "")


def test_olmo_trainer_metadata_json_waits_for_model_and_optim(ckptfs):
    """OLMo-core's trainer writes .metadata.json ({"ephemeral", "version"}) last; a step
    whose model_and_optim/ DCP is not there yet is not complete (cp -r in any order)."""
    make_step(ckptfs, "run1/step100", {"train/rank0.pt": b"t" * 100}, marker=".metadata.json")
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        assert ckptfs.state("run1/step100") == "writing"
        time.sleep(0.2)
    assert "model_and_optim/.metadata" in ckptfs.xattr("run1/step100", "user.ckptfs.error")
    # A real torch 1.13 DCP save (the repository's fixture), .metadata written last.
    shared = os.path.join(REPO, "tests", "fixtures", "dcp", "torch-1.13", "ckpt113")
    os.makedirs(ckptfs.path("run1", "step100", "model_and_optim"))
    for name in sorted(os.listdir(shared), key=lambda n: n == ".metadata"):  # .metadata last
        if os.path.isfile(os.path.join(shared, name)):
            write_file(ckptfs.path("run1", "step100", "model_and_optim", name),
                       read_file(os.path.join(shared, name)))
    ckptfs.wait_state("run1/step100", "committed", timeout=30)
    assert ckptfs.latest("run1") == "step100"


def test_marker_commit_olmo_safetensors_metadata_json(ckptfs):
    files, meta = olmo_safetensors_step_files()
    written = make_step(ckptfs, "run1/step100", files, marker="metadata.json", marker_data=meta)
    ckptfs.wait_state("run1/step100", "committed", timeout=30)
    assert ckptfs.latest("run1") == "step100"
    assert_contents(ckptfs, "run1/step100", written)


def test_marker_commit_dcp_metadata(ckptfs, dcp_reference):
    """A real DCP checkpoint copied in with the .metadata marker closed last."""
    dst = ckptfs.path("run1", "step100")
    os.makedirs(dst)
    names = sorted(os.listdir(dcp_reference))
    for n in [n for n in names if n != ".metadata"] + [".metadata"]:
        shutil.copyfile(os.path.join(dcp_reference, n), os.path.join(dst, n))
    ckptfs.wait_state("run1/step100", "committed", timeout=30)
    assert ckptfs.latest("run1") == "step100"
    assert tree_digest(dst) == tree_digest(dcp_reference)


def test_dcp_marker_first_waits_for_all_shards(ckptfs, dcp_reference):
    """cp of a DCP checkpoint with .metadata first: the step commits only once the last
    shard named in .metadata is closed (spec section 3, completeness check)."""
    dst = ckptfs.path("run1", "step100")
    os.makedirs(dst)
    shards = sorted(n for n in os.listdir(dcp_reference) if n != ".metadata")
    shutil.copyfile(os.path.join(dcp_reference, ".metadata"), os.path.join(dst, ".metadata"))
    for n in shards[:-1]:
        shutil.copyfile(os.path.join(dcp_reference, n), os.path.join(dst, n))
    time.sleep(1.0)
    assert ckptfs.state("run1/step100") == "writing"
    err = ckptfs.xattr("run1/step100", "user.ckptfs.error") or ""
    assert shards[-1] in err, f"user.ckptfs.error should name the missing file, got {err!r}"
    assert not os.path.lexists(ckptfs.path("run1", "latest"))
    shutil.copyfile(os.path.join(dcp_reference, shards[-1]), os.path.join(dst, shards[-1]))
    ckptfs.wait_state("run1/step100", "committed", timeout=30)
    assert tree_digest(dst) == tree_digest(dcp_reference)


def test_cli_commit_waits_for_missing_shards(ckptfs, dcp_reference):
    """`ckptfs commit` on a step still waiting for a shard waits for the outcome
    (it used to answer EBUSY within seconds)."""
    dst = ckptfs.path("run1", "step100")
    os.makedirs(dst)
    shards = sorted(n for n in os.listdir(dcp_reference) if n != ".metadata")
    for n in [".metadata"] + shards[:-1]:
        shutil.copyfile(os.path.join(dcp_reference, n), os.path.join(dst, n))
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("r", ckptfs.commit("run1/step100")))
    t.start()
    t.join(3.0)
    assert t.is_alive(), f"ckptfs commit returned while a shard was missing: {result}"
    shutil.copyfile(os.path.join(dcp_reference, shards[-1]), os.path.join(dst, shards[-1]))
    t.join(60)
    assert not t.is_alive()
    assert result["r"].returncode == 0, result["r"].stderr
    assert ckptfs.state("run1/step100") == "committed"


def test_unparseable_dcp_metadata_is_broken(ckptfs):
    make_step(ckptfs, "run1/step100", {"__0_0.distcp": b"x" * 100})
    commit_ok(ckptfs, "run1/step100")  # a good step first: latest must stay on it
    make_step(ckptfs, "run1/step200", {"__0_0.distcp": b"x" * 100},
              marker=".metadata", marker_data=b"this is not a pickle")
    ckptfs.wait_state("run1/step200", "broken", timeout=30)
    assert ckptfs.xattr("run1/step200", "user.ckptfs.error"), "broken step needs a reason"
    assert ckptfs.latest("run1") == "step100"
    ev = [e for e in ckptfs.events() if e.get("path") == "run1/step200"]
    assert any(e["event"] == "broken" for e in ev), ev
    # an explicit commit of a broken step fails with a message
    r = ckptfs.commit("run1/step200")
    assert r.returncode != 0 and r.stderr.strip(), (r.returncode, r.stderr)
    assert ckptfs.state("run1/step200") == "broken"
    assert ckptfs.latest("run1") == "step100"


def test_marker_only_directly_inside_step(ckptfs):
    make_step(ckptfs, "run1/step100", {"model_and_optim/.metadata.json": b"{}",
                                       "sub/deeper/metadata.json": b"{}",
                                       "data.bin": b"d"})
    time.sleep(1.0)
    assert ckptfs.state("run1/step100") == "writing"


def test_custom_commit_marker_replaces_defaults(make_ckptfs):
    m = make_ckptfs("--commit-marker", "DONE", "--commit-marker", "_SUCCESS")
    # a complete OLMo-core safetensors step that commits under the default markers
    files, meta = olmo_safetensors_step_files()
    make_step(m, "run/step300", files, marker="metadata.json", marker_data=meta)
    make_step(m, "run/step100", {"a": b"a"}, marker="DONE", marker_data=b"")
    m.wait_state("run/step100", "committed")
    make_step(m, "run/step200", {"a": b"a"}, marker="_SUCCESS", marker_data=b"")
    m.wait_state("run/step200", "committed")
    assert m.latest("run") == "step200"
    assert m.state("run/step300") == "writing", "metadata.json is no longer a marker"


@pytest.mark.parametrize("tmp,final", [("step100-tmp", "step100"),
                                       ("tmp-checkpoint-100", "checkpoint-100")])
def test_rename_commit(ckptfs, tmp, final):
    """OLMo-core / Hugging Face: write into a temporary dir, rename it into a step name."""
    written = make_step(ckptfs, f"run1/{tmp}", {"model.safetensors": os.urandom(200_000),
                                                  "optimizer.pt": os.urandom(100_000),
                                                  "trainer_state.json": b'{"global_step": 100}'})
    assert ckptfs.state(f"run1/{tmp}") is None
    os.rename(ckptfs.path("run1", tmp), ckptfs.path("run1", final))
    ckptfs.wait_state(f"run1/{final}", "committed", timeout=30)
    assert ckptfs.latest("run1") == final
    assert_contents(ckptfs, f"run1/{final}", written)
    assert read_file(ckptfs.path("run1", "latest", "optimizer.pt")) == written["optimizer.pt"]
    assert not os.path.exists(ckptfs.path("run1", tmp))


def test_cli_commit_is_synchronous(ckptfs):
    written = make_step(ckptfs, "run1/step100")
    assert ckptfs.state("run1/step100") == "writing"
    commit_ok(ckptfs, "run1/step100")
    assert ckptfs.latest("run1") == "step100"
    assert ckptfs.xattr("run1/step100", "user.ckptfs.files") == str(len(written))
    assert ckptfs.xattr("run1/step100", "user.ckptfs.bytes") == str(sum(map(len, written.values())))
    first = ckptfs.xattr("run1/step100", "user.ckptfs.committed_at")
    # committing again is harmless
    commit_ok(ckptfs, "run1/step100")
    assert ckptfs.xattr("run1/step100", "user.ckptfs.committed_at") == first


def test_cli_commit_errors(ckptfs, outside_dir):
    os.makedirs(ckptfs.path("run1", "notastep"))
    os.makedirs(os.path.join(outside_dir, "step100"))
    for path in (ckptfs.path("run1", "step100"),          # does not exist
                 ckptfs.path("run1"),                      # not a step
                 ckptfs.path("run1", "notastep"),          # not a step
                 os.path.join(outside_dir, "step100")):    # not inside a ckptfs mount
        r = run_cli("commit", path)
        assert r.returncode != 0, f"commit {path} should fail"
        assert r.stderr.strip(), f"commit {path}: no message"
    r = run_cli("commit")
    assert r.returncode != 0


def test_setfattr_commit(ckptfs):
    written = make_step(ckptfs, "run1/step100")
    r = subprocess.run(["setfattr", "-n", "user.ckptfs.commit", "-v", "1",
                        ckptfs.path("run1", "step100")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # SPEC section 3: the user's word that the step is complete. No settling
    # for quiet (--commit-settle is 2 s here): committed when setfattr returns.
    assert ckptfs.state("run1/step100") == "committed"
    assert ckptfs.latest("run1") == "step100"
    assert_contents(ckptfs, "run1/step100", written)


def test_setfattr_commits_in_a_row_leave_retention_its_count(make_ckptfs):
    # A script that commits 30 steps in a row with the xattr, then counts what
    # retention kept: each commit is written before setfattr returns, so the
    # count is the policy's, and latest is the last step.
    m = make_ckptfs("--keep-last", "6")
    for n in range(1, 31):
        make_step(m, f"run1/step{n}", {"model.pt": f"weights {n}".encode()})
        r = subprocess.run(["setfattr", "-n", "user.ckptfs.commit", "-v", "1", m.path("run1", f"step{n}")],
                           capture_output=True, text=True)
        assert r.returncode == 0, f"step{n}: {r.stderr}"
        assert m.state(f"run1/step{n}") == "committed", f"step{n} not committed when setfattr returned"
    kept = sorted(n for n in os.listdir(m.path("run1")) if n.startswith("step"))
    assert kept == [f"step{n}" for n in range(25, 31)], kept
    assert m.latest("run1") == "step30"


def test_commit_waits_for_open_writers(ckptfs):
    make_step(ckptfs, "run1/step100", {"a.bin": b"a" * 1000})
    f = open(ckptfs.path("run1", "step100", "late.bin"), "wb")
    f.write(b"first")
    f.flush()
    result = {}

    def run():
        result["r"] = ckptfs.commit("run1/step100")

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(1.5)
    assert t.is_alive(), f"commit returned while a file was open for writing: {result}"
    assert ckptfs.state("run1/step100") == "writing"
    f.write(b" second")
    f.close()
    t.join(30)
    assert not t.is_alive(), "commit did not finish after the writer closed"
    assert result["r"].returncode == 0, result["r"].stderr
    assert ckptfs.state("run1/step100") == "committed"
    assert read_file(ckptfs.path("run1", "step100", "late.bin")) == b"first second"


def test_commit_idle(make_ckptfs):
    m = make_ckptfs("--commit-idle", "2")
    make_step(m, "run/step100", {"a": b"a" * 100})
    t_closed = time.monotonic()
    time.sleep(0.5)
    assert m.state("run/step100") == "writing"
    m.wait_state("run/step100", "committed", timeout=20)
    assert time.monotonic() - t_closed >= 1.5, "committed before the idle period elapsed"
    # a file held open for writing keeps the step uncommitted past the idle period
    os.makedirs(m.path("run", "step200"))
    f = open(m.path("run", "step200", "open.bin"), "wb")
    try:
        f.write(b"x")
        f.flush()
        time.sleep(4.5)
        assert m.state("run/step200") == "writing"
    finally:
        f.close()
    m.wait_state("run/step200", "committed", timeout=20)
    assert m.latest("run") == "step200"


# --------------------------------------------------------------------------- sealed steps

def test_committed_files_are_sealed(ckptfs):
    written = make_step(ckptfs, "run1/step100")
    commit_ok(ckptfs, "run1/step100")
    p = ckptfs.path("run1", "step100", "model.pt")
    for flags in (os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_APPEND, os.O_WRONLY | os.O_TRUNC,
                  os.O_RDONLY | os.O_TRUNC):
        expect_errno(errno.EROFS, os.open, p, flags)
    expect_errno(errno.EROFS, os.truncate, p, 0)
    expect_errno(errno.EROFS, os.truncate, ckptfs.path("run1", "step100", "sub", "extra.bin"), 1)
    # reading works and nothing changed
    assert_contents(ckptfs, "run1/step100", written)
    assert os.path.getsize(p) == len(written["model.pt"])


def test_committed_step_rejects_new_entries(ckptfs):
    make_step(ckptfs, "run1/step100")
    commit_ok(ckptfs, "run1/step100")
    d = ckptfs.path("run1", "step100")
    expect_errno(errno.EROFS, os.open, os.path.join(d, "new.bin"), os.O_CREAT | os.O_WRONLY, 0o644)
    expect_errno(errno.EROFS, os.mkdir, os.path.join(d, "newdir"))
    expect_errno((errno.EROFS, errno.EXDEV), os.rename, os.path.join(d, "model.pt"),
                 ckptfs.path("run1", "stolen.pt"))
    assert os.path.exists(os.path.join(d, "model.pt"))
    assert ckptfs.xattr("run1/step100", "user.ckptfs.files") == "3"


def test_state_xattrs_are_read_only(ckptfs):
    make_step(ckptfs, "run1/step100")
    expect_errno(READ_ONLY_ERRNOS, os.setxattr, ckptfs.path("run1", "step100"),
                 "user.ckptfs.state", b"committed")
    assert ckptfs.state("run1/step100") == "writing"
    names = set(os.listxattr(ckptfs.path("run1", "step100")))
    assert {"user.ckptfs.state", "user.ckptfs.step"} <= names


def test_delete_committed_step(ckptfs):
    make_step(ckptfs, "run1/step100")
    commit_ok(ckptfs, "run1/step100")
    make_step(ckptfs, "run1/step200")
    commit_ok(ckptfs, "run1/step200")
    assert ckptfs.latest("run1") == "step200"
    shutil.rmtree(ckptfs.path("run1", "step200"))
    assert not os.path.exists(ckptfs.path("run1", "step200"))
    assert ckptfs.latest("run1") == "step100"
    gone = ckptfs.step_status("run1/step200")
    assert gone is None or gone["state"] == "deleted", gone
    shutil.rmtree(ckptfs.path("run1", "step100"))
    assert not os.path.lexists(ckptfs.path("run1", "latest"))


def test_move_committed_step_to_another_run(ckptfs):
    written = make_step(ckptfs, "run1/step100")
    commit_ok(ckptfs, "run1/step100")
    os.mkdir(ckptfs.path("run2"))
    os.rename(ckptfs.path("run1", "step100"), ckptfs.path("run2", "step100"))
    assert ckptfs.state("run2/step100") == "committed"
    assert_contents(ckptfs, "run2/step100", written)
    assert ckptfs.latest("run2") == "step100"
    assert not os.path.lexists(ckptfs.path("run1", "latest"))
    expect_errno(errno.EROFS, os.open, ckptfs.path("run2", "step100", "model.pt"), os.O_WRONLY)


# --------------------------------------------------------------------------- latest

def test_latest_follows_highest_committed_step(ckptfs):
    make_step(ckptfs, "run1/step200")
    commit_ok(ckptfs, "run1/step200")
    assert ckptfs.latest("run1") == "step200"
    make_step(ckptfs, "run1/step100")                 # an older step committed later
    commit_ok(ckptfs, "run1/step100")
    assert ckptfs.latest("run1") == "step200"
    make_step(ckptfs, "run1/step1000")                # numeric, not lexical, order
    make_step(ckptfs, "run1/step300")
    commit_ok(ckptfs, "run1/step300")
    assert ckptfs.latest("run1") == "step300"         # step1000 is still writing
    commit_ok(ckptfs, "run1/step1000")
    assert ckptfs.latest("run1") == "step1000"
    st = os.lstat(ckptfs.path("run1", "latest"))
    assert st.st_mode & 0o170000 == 0o120000          # S_IFLNK
    # Reachable by name, not listed: trainers parse every entry of their folder.
    assert "latest" not in os.listdir(ckptfs.path("run1"))
    assert sorted(os.listdir(ckptfs.path("run1", "latest"))) == sorted(
        os.listdir(ckptfs.path("run1", "step1000")))


def test_show_latest_lists_the_link(make_ckptfs):
    m = make_ckptfs("--show-latest")
    make_step(m, "run1/step100")
    commit_ok(m, "run1/step100")
    assert "latest" in os.listdir(m.path("run1"))


def test_latest_is_read_only(ckptfs):
    make_step(ckptfs, "run1/step100")
    commit_ok(ckptfs, "run1/step100")
    latest = ckptfs.path("run1", "latest")
    expect_errno(errno.EEXIST, os.symlink, "step5", latest)
    expect_errno(READ_ONLY_ERRNOS + (errno.EEXIST,), os.rename, latest, ckptfs.path("run1", "x"))
    assert ckptfs.latest("run1") == "step100"
    # rm turns the link off for this run; a user's own link can take the name.
    os.unlink(latest)
    assert not os.path.lexists(latest)
    os.symlink("step100", latest)
    assert os.readlink(latest) == "step100" and ckptfs.xattr("run1", "user.ckptfs.latest_link") == "off"


def test_latest_per_run_and_nested(ckptfs):
    for rel in ("step100", "exp1/seed3/step5", "exp1/seed3/step7", "exp2/step-42"):
        make_step(ckptfs, rel, {"f": rel.encode()})
        commit_ok(ckptfs, rel)
    assert ckptfs.latest("") == "step100"
    assert ckptfs.latest("exp1/seed3") == "step7"
    assert ckptfs.latest("exp2") == "step-42"
    assert not os.path.lexists(ckptfs.path("exp1", "latest"))
    assert read_file(ckptfs.path("exp1", "seed3", "latest", "f")) == b"exp1/seed3/step7"
    paths = {s["path"]: s for s in ckptfs.status()["steps"]}
    assert {"step100", "exp1/seed3/step5", "exp1/seed3/step7", "exp2/step-42"} <= set(paths)
    assert paths["exp2/step-42"]["step"] == 42


def test_real_latest_file_wins(ckptfs):
    """DeepSpeed writes its own `latest` file next to global_stepN."""
    make_step(ckptfs, "run1/global_step100", {"mp_rank_00_model_states.pt": b"m" * 1000})
    write_file(ckptfs.path("run1", "latest"), b"global_step100")
    commit_ok(ckptfs, "run1/global_step100")
    p = ckptfs.path("run1", "latest")
    assert not os.path.islink(p)
    assert read_file(p) == b"global_step100"
    make_step(ckptfs, "run1/global_step200", {"mp_rank_00_model_states.pt": b"n" * 1000})
    commit_ok(ckptfs, "run1/global_step200")
    assert not os.path.islink(p)
    write_file(p, b"global_step200")               # the trainer updates its file
    assert read_file(p) == b"global_step200"
    os.unlink(p)                    # a DeepSpeed run never gets the virtual link back
    assert not os.path.lexists(p)
    # Other runs: once the trainer's own file is gone, the virtual link shows.
    make_step(ckptfs, "run2/step7", {"m.pt": b"m"})
    write_file(ckptfs.path("run2", "latest"), b"mine")
    commit_ok(ckptfs, "run2/step7")
    assert read_file(ckptfs.path("run2", "latest")) == b"mine"
    os.unlink(ckptfs.path("run2", "latest"))
    assert ckptfs.latest("run2") == "step7"


# --------------------------------------------------------------------------- control dir

def test_status_json(ckptfs):
    t0 = time.time()
    written = make_step(ckptfs, "run1/step100")
    commit_ok(ckptfs, "run1/step100")
    make_step(ckptfs, "run1/step200", {"a": b"abc"})
    make_step(ckptfs, "step7", {"a": b"abc"})
    st = ckptfs.status()
    assert isinstance(st["pid"], int) and _pid_alive(st["pid"])
    assert daemon_pids_for(ckptfs.mnt) == [st["pid"]], "status.json pid is not the daemon's"
    assert isinstance(st["version"], str) and st["version"]
    v = run_cli("--version")
    assert v.returncode == 0 and st["version"] in v.stdout + v.stderr
    assert os.path.realpath(st["mountpoint"]) == os.path.realpath(ckptfs.mnt)
    cache = st["cache"]
    assert isinstance(cache, dict), f"status.json cache must describe the cache, got {cache!r}"
    assert os.path.realpath(cache["dir"]) == os.path.realpath(ckptfs.cache)
    disk = os.statvfs(ckptfs.cache)
    assert cache["bytes_total"] == disk.f_blocks * disk.f_frsize
    assert 0 < cache["bytes_free"] <= cache["bytes_total"]
    # What ckptfs holds, beside the disk's figures: sums over the steps, and
    # without a remote nothing is persisted or evictable.
    by_state = {}
    for s in st["steps"]:
        by_state[s["state"]] = by_state.get(s["state"], 0) + s["bytes"]
    assert cache["committed_bytes"] == by_state["committed"] == sum(map(len, written.values())), cache
    assert cache["writing_bytes"] == by_state["writing"] > 0, cache
    assert cache["local_bytes"] >= cache["committed_bytes"] + cache["writing_bytes"], cache
    assert cache["persisted_bytes"] == 0 and cache["evictable_bytes"] == 0, cache
    steps = {s["path"]: s for s in st["steps"]}
    s100 = steps["run1/step100"]
    assert s100["step"] == 100 and s100["state"] == "committed"
    assert s100["bytes"] == sum(map(len, written.values()))
    assert s100["files"] == len(written)
    assert isinstance(s100["committed_at"], float) and t0 - 1 <= s100["committed_at"] <= time.time() + 1
    assert s100.get("error", "") in ("", None)
    assert steps["run1/step200"]["state"] == "writing"
    assert steps["run1/step200"]["committed_at"] is None
    assert steps["step7"]["step"] == 7


def test_events(ckptfs):
    t0 = time.time()
    files, meta = olmo_safetensors_step_files()
    make_step(ckptfs, "run1/step100", files, marker="metadata.json", marker_data=meta)
    ckptfs.wait_state("run1/step100", "committed")
    ev = ckptfs.events()
    commits = [e for e in ev if e.get("event") == "commit" and e.get("path") == "run1/step100"]
    assert len(commits) == 1, ev
    assert isinstance(commits[0]["time"], float)
    assert t0 - 1 <= commits[0]["time"] <= time.time() + 1
    # each line is one JSON object
    raw = read_file(ckptfs.path(".ckptfs", "events")).decode()
    for line in raw.splitlines():
        assert isinstance(json.loads(line), dict)


# --------------------------------------------------------------------------- daemon lifecycle

def test_clean_restart_keeps_committed_steps(ckptfs):
    written = make_step(ckptfs, "run1/step100")
    commit_ok(ckptfs, "run1/step100")
    committed_at = ckptfs.xattr("run1/step100", "user.ckptfs.committed_at")
    digest = tree_digest(ckptfs.path("run1", "step100"))
    ckptfs.restart()
    assert ckptfs.state("run1/step100") == "committed"
    assert ckptfs.latest("run1") == "step100"
    assert ckptfs.xattr("run1/step100", "user.ckptfs.committed_at") == committed_at
    assert tree_digest(ckptfs.path("run1", "step100")) == digest
    assert_contents(ckptfs, "run1/step100", written)
    expect_errno(errno.EROFS, os.open, ckptfs.path("run1", "step100", "model.pt"), os.O_WRONLY)


def test_plain_files_survive_restart(ckptfs):
    os.makedirs(ckptfs.path("a", "b"))
    write_file(ckptfs.path("a", "b", "f"), b"data")
    os.symlink("b/f", ckptfs.path("a", "l"))
    os.link(ckptfs.path("a", "b", "f"), ckptfs.path("a", "h"))
    os.chmod(ckptfs.path("a", "b", "f"), 0o600)
    os.setxattr(ckptfs.path("a", "b", "f"), "user.k", b"v")
    ckptfs.restart()
    assert read_file(ckptfs.path("a", "b", "f")) == b"data"
    assert os.readlink(ckptfs.path("a", "l")) == "b/f"
    assert os.stat(ckptfs.path("a", "h")).st_nlink == 2
    assert os.stat(ckptfs.path("a", "b", "f")).st_mode & 0o777 == 0o600
    assert os.getxattr(ckptfs.path("a", "b", "f"), "user.k") == b"v"


def test_foreground_unmount(make_ckptfs):
    m = make_ckptfs(foreground=True)
    write_file(m.path("f"), b"x")
    rc = m.umount()
    assert rc == 0
    assert not mounted_in_proc(m.mnt)


def test_foreground_sigterm(make_ckptfs):
    m = make_ckptfs(foreground=True)
    write_file(m.path("f"), b"x")
    m.proc.send_signal(signal.SIGTERM)
    rc = m.proc.wait(timeout=30)
    assert rc == 0, f"exit status {rc} after SIGTERM"
    assert not mounted_in_proc(m.mnt)
    m.start(foreground=False)
    assert read_file(m.path("f")) == b"x"


def test_background_sigterm(ckptfs):
    write_file(ckptfs.path("f"), b"x")
    pid = ckptfs.pid
    os.kill(pid, signal.SIGTERM)
    assert _wait_pid_gone(pid, 30), "daemon did not exit on SIGTERM"
    deadline = time.monotonic() + 10
    while mounted_in_proc(ckptfs.mnt) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not mounted_in_proc(ckptfs.mnt), "mount left behind after SIGTERM"
    ckptfs.start()
    assert read_file(ckptfs.path("f")) == b"x"


# --------------------------------------------------------------------------- CLI contract

def test_help_and_version():
    if not os.access(CKPTFS_BIN, os.X_OK):
        pytest.skip(f"no ckptfs binary at {CKPTFS_BIN}")
    h = run_cli("--help")
    assert h.returncode == 0
    assert "mount" in h.stdout and "commit" in h.stdout
    v = run_cli("--version")
    assert v.returncode == 0 and any(c.isdigit() for c in v.stdout)


def _assert_mount_fails(m, *args, expect_in_msg=None):
    r = run_cli(*args, timeout=30)
    assert r.returncode != 0, f"`ckptfs {' '.join(args)}` should fail"
    assert r.stderr.strip(), f"`ckptfs {' '.join(args)}` failed without a message"
    if expect_in_msg:
        assert any(s.lower() in r.stderr.lower() for s in expect_in_msg), r.stderr
    time.sleep(0.2)
    assert not mounted_in_proc(m.mnt), "something was mounted"
    assert not daemon_pids_for(m.mnt), "a daemon was left running"
    return r


def test_bad_cli_input(make_ckptfs):
    m = make_ckptfs(start=False)
    missing = os.path.join(m.base, "nonexistent")
    _assert_mount_fails(m, "mount", m.mnt, "--cache", missing, expect_in_msg=[missing, "cache"])
    _assert_mount_fails(m, "mount", missing, "--cache", m.cache,
                        expect_in_msg=[missing, "mount"])
    as_file = os.path.join(m.base, "cachefile")
    write_file(as_file, b"")
    _assert_mount_fails(m, "mount", m.mnt, "--cache", as_file)
    _assert_mount_fails(m, "mount", m.mnt, "--cache", m.cache, "--step-pattern", "step(",
                        expect_in_msg=["pattern", "step(", "regex"])
    _assert_mount_fails(m, "mount", m.mnt, "--cache", m.cache, "--step-pattern", r"step\d+",
                        expect_in_msg=["group", "pattern"])   # no capture group
    _assert_mount_fails(m, "mount", m.mnt, "--cache", m.cache, "--no-such-option")
    _assert_mount_fails(m, "mount", m.mnt, "--cache", m.cache, "--commit-idle", "soon")
    _assert_mount_fails(m, "mount", "--cache", m.cache)
    inside = os.path.join(m.mnt, "cache-inside")
    os.mkdir(inside)
    _assert_mount_fails(m, "mount", m.mnt, "--cache", inside)      # cache inside the mountpoint
    os.rmdir(inside)
    r = run_cli("frobnicate")
    assert r.returncode != 0 and r.stderr.strip()
    # after all that, a correct mount of the same paths works
    m.start()
    assert m.status()["steps"] == []


def test_already_mounted(ckptfs):
    write_file(ckptfs.path("f"), b"first")
    other_cache = os.path.join(ckptfs.base, "cache2")
    os.mkdir(other_cache)
    for cache in (other_cache, ckptfs.cache):
        r = run_cli("mount", ckptfs.mnt, "--cache", cache, timeout=30)
        assert r.returncode != 0, f"mounting twice (cache {cache}) must fail"
        assert r.stderr.strip()
    # the first mount still serves, and there is exactly one daemon
    assert read_file(ckptfs.path("f")) == b"first"
    time.sleep(0.2)
    assert daemon_pids_for(ckptfs.mnt) == [ckptfs.pid]
    with open("/proc/mounts") as f:
        n = sum(1 for line in f if line.split()[1] == os.path.realpath(ckptfs.mnt))
    assert n == 1, "stacked a second mount on the mountpoint"


def test_umount_then_mount_at_once_reuses_the_cache(ckptfs):
    # `umount /ckpt && ckptfs mount /ckpt`: umount returns before the old daemon has
    # released the cache; the new mount waits for it rather than failing.
    write_file(ckptfs.path("f"), b"kept")
    for _ in range(5):
        subprocess.run(["fusermount3", "-u", ckptfs.mnt], check=True, timeout=30)
        ckptfs.start()
        assert read_file(ckptfs.path("f")) == b"kept"


def test_a_cache_another_daemon_serves_is_refused(ckptfs):
    other = os.path.join(ckptfs.base, "mnt2")
    os.mkdir(other)
    t0 = time.monotonic()
    r = run_cli("mount", other, "--cache", ckptfs.cache, timeout=60)
    assert r.returncode != 0
    assert "is in use by another ckptfs daemon" in r.stderr, r.stderr
    assert time.monotonic() - t0 < 30
    assert not mounted_in_proc(other)
    assert read_file(ckptfs.path(".ckptfs", "status.json"))


def test_status_command(ckptfs):
    written = make_step(ckptfs, "run1/step100")
    commit_ok(ckptfs, "run1/step100")
    make_step(ckptfs, "run1/step200", {"part.bin": b"p" * 2048})
    r = run_cli("status", ckptfs.mnt)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert any(l.strip() == "run1" for l in lines), r.stdout
    # What ckptfs holds, not the disk's use by everything on it.
    cache_line = next(l for l in lines if l.startswith("cache: "))
    assert "ckptfs holds " in cache_line and " free of " in cache_line, cache_line
    assert " used of " not in cache_line, cache_line
    assert any(l.strip().startswith("steps: ") and " committed" in l for l in lines), r.stdout
    row100 = next(l for l in lines if l.split()[:2] == ["100", "committed"])
    assert row100.split()[4] == str(len(written)), row100          # FILES column
    row200 = next(l for l in lines if l.split()[:2] == ["200", "writing"])
    assert "2.0 KiB" in row200, row200                             # current size while writing
    r = run_cli("status", ckptfs.mnt, "--json")
    assert r.returncode == 0
    assert {s["path"] for s in json.loads(r.stdout)["steps"]} == {"run1/step100", "run1/step200"}
    r = run_cli("status", "/tmp")
    assert r.returncode != 0 and "not a ckptfs mount" in r.stderr


def parse_metrics(text):
    """{(name, frozenset(labels)): value} from the Prometheus text format; checks its shape."""
    out = {}
    typed = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            assert kind in ("counter", "gauge", "histogram"), line
            typed.add(name)
            continue
        if line.startswith("#") or not line:
            continue
        series, value = line.rsplit(" ", 1)
        name, labels = series, frozenset()
        if "{" in series:
            name, rest = series.split("{", 1)
            labels = frozenset(tuple(kv.split("=", 1)) for kv in rest.rstrip("}").split(","))
        base = name
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix) and name[:-len(suffix)] in typed:
                base = name[:-len(suffix)]
        assert base in typed, f"sample {name} has no TYPE line"
        out[(name, labels)] = float(value)
    return out


def test_metrics_count_writes_commits_and_steps(ckptfs):
    m = parse_metrics(read_file(ckptfs.path(".ckptfs/metrics")).decode())
    assert m[("ckptfs_commits_total", frozenset())] == 0
    os.makedirs(ckptfs.path("run/step1"))
    write_file(ckptfs.path("run/step1/w.bin"), b"x" * 100000)
    assert ckptfs.commit("run/step1").returncode == 0
    m = parse_metrics(read_file(ckptfs.path(".ckptfs/metrics")).decode())
    assert m[("ckptfs_commits_total", frozenset())] == 1
    # The FUSE byte counters count what went through the daemon: nothing,
    # where the kernel wrote the file itself (passthrough).
    if ckptfs.status()["passthrough"]["active"]:
        assert m[("ckptfs_fuse_write_bytes_total", frozenset())] == 0
        assert m[("ckptfs_passthrough_opens_total", frozenset())] >= 1
    else:
        assert m[("ckptfs_fuse_write_bytes_total", frozenset())] >= 100000
    assert m[("ckptfs_steps", frozenset({("state", '"committed"')}))] == 1
    assert m[("ckptfs_commit_duration_seconds_count", frozenset())] == 1
    assert m[("ckptfs_events_total", frozenset({("event", '"commit"')}))] == 1
    assert "metrics" in os.listdir(ckptfs.path(".ckptfs"))
