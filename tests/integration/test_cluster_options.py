"""Cluster mode's mount options and identity (SPEC section 9, issue 17 slice S4, issue 28).

`--node NAME`, `--refresh SECONDS`, `--publish-timeout SECONDS` and `--read-wait SECONDS` on
real mounts: bad names and options without their companions are refused before anything is
mounted; a node joins the cluster in its remote on the Ceph gateway (the probe, the
`.ckptfs-cluster.json` saying "conditional-put", the registration .ckptfs-nodes/<node>.json)
and status.json shows how; a store that ignores conditional writes (s3rver) is refused with
a message that says why; a second cache under a taken name is refused, also when both mount
at once; a cache stays bound to the node of its first cluster mount.
"""
import errno
import json
import os
import threading
import time

import pytest

from ckptfs_testlib import MountError
from s3rver_fixture import S3rver, s3rver_available, ACCESS_KEY, SECRET_KEY

pytest_plugins = ["ceph_fixture"]


@pytest.fixture
def s3(ceph_s3):
    """The Ceph gateway, a fresh bucket per test."""
    return ceph_s3


@pytest.fixture
def s3rver(monkeypatch):
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


def refused(m, *needles):
    """m.start() fails with every needle in its message, and nothing is mounted."""
    with pytest.raises(MountError) as e:
        m.start()
    msg = str(e.value)
    for needle in needles:
        assert needle in msg, msg
    assert not m.mounted
    assert not os.path.ismount(m.mnt)
    return msg


@pytest.mark.parametrize("name", ["", "-lead", "a/b", "a~b", "a b", "trailing.", "x" * 64])
def test_bad_node_names_are_refused(make_ckptfs, tmp_path, name):
    m = make_ckptfs("--remote", f"file://{tmp_path}", "--node", name, start=False)
    msg = refused(m, "--node: ", "1-63 characters")
    assert "rc=2" in msg  # a command-line error


def test_cluster_options_need_their_companions(make_ckptfs, tmp_path):
    m = make_ckptfs("--node", "a", start=False)
    refused(m, "--node needs --remote: the bucket is what the nodes share")
    m = make_ckptfs("--remote", f"file://{tmp_path}", "--refresh", "2", start=False)
    refused(m, "--refresh needs --node")
    m = make_ckptfs("--remote", f"file://{tmp_path}", "--node", "a", "--refresh", "0", start=False)
    refused(m, "--refresh takes")
    m = make_ckptfs("--remote", f"file://{tmp_path}", "--node", "a", "--refresh", "3601", start=False)
    refused(m, "--refresh takes")
    m = make_ckptfs("--remote", f"file://{tmp_path}", "--publish-timeout", "5", start=False)
    refused(m, "--publish-timeout needs --node")
    m = make_ckptfs("--remote", f"file://{tmp_path}", "--node", "a", "--publish-timeout", "0", start=False)
    refused(m, "--publish-timeout takes")
    m = make_ckptfs("--remote", f"file://{tmp_path}", "--read-wait", "5", start=False)
    refused(m, "--read-wait needs --node")
    m = make_ckptfs("--remote", f"file://{tmp_path}", "--node", "a", "--read-wait", "86401", start=False)
    refused(m, "--read-wait takes")


def test_a_store_that_ignores_conditional_writes_is_refused(make_ckptfs, s3rver):
    """SPEC section 9: cluster mode needs conditional writes; s3rver 3.7.1 accepts
    If-None-Match: * and overwrites anyway. The mount probes, refuses and says why; the
    same store serves a mount without --node."""
    m = make_ckptfs(*s3_args(s3rver), "--node", "a", start=False)
    refused(m, "needs an object store that honours conditional writes", "overwrote it anyway",
            "mount without --node")
    keys = s3rver.keys("team/exp/")
    assert not [k for k in keys if ".ckptfs-nodes/" in k or ".ckptfs-cluster" in k], keys
    single = make_ckptfs(*s3_args(s3rver))
    assert "cluster" not in single.status()


def test_node_joins_and_status_shows_it(make_ckptfs, s3):
    m = make_ckptfs(*s3_args(s3), "--node", "a", "--refresh", "2.5", "--nodes", "4")
    cluster = m.status().get("cluster")
    requests = cluster.pop("requests")
    assert cluster.pop("closes_published_later") == 0, cluster
    # True once a refresh read the index (status.json's own lookup may have made one).
    assert cluster.pop("view_known") in (True, False), cluster
    assert cluster == {"node": "a", "conditional_put": "supported", "refresh_s": 2.5,
                       "job_nodes": 4, "epoch": 1, "fenced": None}, cluster
    # What the node asked of the bucket, by kind; status.json's own lookup may refresh (1 LIST).
    assert set(requests) == {"part_puts", "part_gets", "lists", "index_puts", "index_gets", "decisions",
                             "refreshes", "deletes", "commit_watch_gets", "run_file_puts",
                             "run_file_gets"}, requests
    assert requests["part_puts"] == 0 and requests["decisions"] == 0, requests
    joins = [e for e in m.events() if e.get("event") == "cluster_join"]
    assert len(joins) == 1 and joins[0]["node"] == "a", joins
    assert joins[0]["conditional_put"] == "supported", joins
    keys = s3.keys("team/exp/")
    assert "team/exp/.ckptfs-cluster.json" in keys, keys
    assert "team/exp/.ckptfs-nodes/a.json" in keys, keys
    assert not [k for k in keys if ".ckptfs-probe/" in k], keys  # the probe cleans up
    pinned = s3.get("team/exp/.ckptfs-cluster.json")
    assert pinned == b'{"format":"ckptfs-cluster","version":1,"decide":"conditional-put"}\n', pinned
    reg = json.loads(s3.get("team/exp/.ckptfs-nodes/a.json"))
    assert reg["format"] == "ckptfs-node" and reg["node"] == "a" and len(reg["cache_id"]) == 32, reg
    assert reg["host"] == os.uname().nodename, reg
    # The cluster's files are not checkpoints: the mount's root shows nothing of them.
    assert not [n for n in os.listdir(m.mnt) if n.startswith(".ckptfs-")], os.listdir(m.mnt)
    m.umount()

    # The same cache mounts again under its name, and under no other.
    m.start()
    assert m.status()["cluster"]["node"] == "a"
    assert json.loads(s3.get("team/exp/.ckptfs-nodes/a.json")) == reg
    m.umount()
    with pytest.raises(MountError) as e:
        m.start(args=[*s3_args(s3), "--node", "b"])
    assert f"cache {m.cache} belongs to node a; mount it with --node a" in str(e.value), str(e.value)
    assert not m.mounted
    with pytest.raises(MountError) as e:
        m.start(args=s3_args(s3))
    assert f"cache {m.cache} belongs to cluster node a; mount it with --node a" in str(e.value), str(e.value)
    assert not m.mounted
    assert "team/exp/.ckptfs-nodes/b.json" not in s3.keys("team/exp/")


def test_a_node_name_belongs_to_one_cache(make_ckptfs, s3):
    a = make_ckptfs(*s3_args(s3), "--node", "gpu-0")
    reg = json.loads(s3.get("team/exp/.ckptfs-nodes/gpu-0.json"))
    other = make_ckptfs(*s3_args(s3), "--node", "gpu-0", start=False)
    msg = refused(other, f"node name 'gpu-0' is used by cache {reg['cache_id']}", "pick another --node",
                  ".ckptfs-nodes/gpu-0.json")
    assert "rc=1" in msg
    # The refused cache was not bound to the name: it joins as another node.
    other.start(args=[*s3_args(s3), "--node", "gpu-1"])
    assert other.status()["cluster"]["node"] == "gpu-1"
    assert a.status()["cluster"]["node"] == "gpu-0"
    assert json.loads(s3.get("team/exp/.ckptfs-nodes/gpu-0.json")) == reg


def test_two_daemons_mounting_one_name_at_once_never_both_come_up(make_ckptfs, s3):
    """Issue 28, 5: with the registration slowed by the store, two mounts with the same
    --node both came up (a GET, then a PUT). The registration is a conditional create:
    of caches mounting one name at the same moment, one mounts and the others are refused."""
    for attempt in range(3):
        name = f"gpu-{attempt}"
        mounts = [make_ckptfs(*s3_args(s3), "--node", name, start=False) for _ in range(3)]
        outcome = [None] * len(mounts)
        go = threading.Barrier(len(mounts))

        def start(i):
            go.wait()
            try:
                mounts[i].start()
                outcome[i] = "mounted"
            except MountError as e:
                outcome[i] = str(e)

        threads = [threading.Thread(target=start, args=(i,)) for i in range(len(mounts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert outcome.count("mounted") == 1, outcome
        for o in outcome:
            assert o == "mounted" or f"node name '{name}' is used by cache" in o, o
        for m in mounts:
            if m.mounted:
                m.umount()


def test_replace_node_takes_a_dead_nodes_name_and_fences_its_old_daemon(make_ckptfs, s3):
    """SPEC section 9, node names: a replacement takes a node's name only when told to
    (--replace-node), and the old holder can no longer write under it. Node b's old daemon
    keeps running (a node cut off and thought dead): its file in step6 stays out of the
    commit, and its next first open of a step fails with EROFS saying why."""
    args = [*s3_args(s3), "--refresh", "0.2"]
    a = make_ckptfs(*args, "--node", "a")
    old_b = make_ckptfs(*args, "--node", "b")
    old_cache_id = json.loads(s3.get("team/exp/.ckptfs-nodes/b.json"))["cache_id"]
    os.makedirs(a.path("run/step6"))
    os.makedirs(old_b.path("run/step6"), exist_ok=True)
    with open(old_b.path("run/step6/stale.bin"), "wb") as f:
        f.write(b"old daemon")

    new_b = make_ckptfs(*args, "--node", "b", start=False)
    refused(new_b, "node name 'b' is used by cache", "mount with --replace-node")
    new_b.start(args=[*args, "--node", "b", "--replace-node"])
    assert new_b.status()["cluster"]["epoch"] == 2
    joins = [e for e in new_b.events() if e.get("event") == "cluster_join"]
    assert joins[-1]["replaced_cache_id"] == old_cache_id and joins[-1]["epoch"] == 2, joins
    assert "team/exp/.ckptfs-nodes/b~2.json" in s3.keys("team/exp/")

    # The old daemon: no new step takes its writes, and it says why.
    os.makedirs(old_b.path("run/step7"), exist_ok=True)
    with pytest.raises(OSError) as e:
        open(old_b.path("run/step7/x.bin"), "wb")
    assert e.value.errno == errno.EROFS, e.value
    fenced = old_b.status()["cluster"]["fenced"]
    assert fenced and "taken over by another cache with --replace-node" in fenced, fenced
    assert [e for e in old_b.events() if e.get("kind") == "cluster_fenced"], old_b.events()

    # Step 6 commits with a's file, never the old daemon's.
    with open(a.path("run/step6/a.bin"), "wb") as f:
        f.write(b"from a")
    r = a.commit("run/step6", timeout=60)
    assert r.returncode == 0, r.stderr
    a.wait_state("run/step6", "committed", timeout=30)
    assert os.listdir(a.path("run/step6")) == ["a.bin"], os.listdir(a.path("run/step6"))
    dropped = [e for e in a.events() if e.get("kind") == "cluster_fenced_part"]
    assert dropped and dropped[0]["node"] == "b" and dropped[0]["epoch"] == 1, a.events()
    new_b.wait_state("run/step6", "committed", timeout=30)
    assert os.listdir(new_b.path("run/step6")) == ["a.bin"], os.listdir(new_b.path("run/step6"))

    # The new holder's files count: step 8 commits with both.
    os.makedirs(a.path("run/step8"))
    with open(a.path("run/step8/a.bin"), "wb") as f:
        f.write(b"from a")
    os.makedirs(new_b.path("run/step8"), exist_ok=True)
    with open(new_b.path("run/step8/b.bin"), "wb") as f:
        f.write(b"from the new b")
    time.sleep(1.5)  # the new b's part made durable and put again by its thread
    r = a.commit("run/step8", timeout=60)
    assert r.returncode == 0, r.stderr
    for m in (a, new_b):
        m.wait_state("run/step8", "committed", timeout=30)
        assert sorted(os.listdir(m.path("run/step8"))) == ["a.bin", "b.bin"], os.listdir(m.path("run/step8"))
    with open(a.path("run/step8/b.bin"), "rb") as f:
        assert f.read() == b"from the new b"
    # A restart of the old cache without the flag is refused, naming the new holder.
    old_b.umount()
    refused(old_b, "node name 'b' is used by cache", "b~2.json")


def test_mount_without_node_is_unchanged(make_ckptfs, s3):
    m = make_ckptfs(*s3_args(s3))
    assert "cluster" not in m.status()
    assert not [k for k in s3.keys("team/exp/") if ".ckptfs-" in k]
