"""Cluster mode under faults (issue 17, "Faults"; docs/cluster.md, "Failures"): real
mounts of the real daemon on one real S3 server (cluster_fixture.py: the Ceph gateway), nodes a
and b.

  * kill -9 of node b's daemon mid-save, with a rank's shard open and half written (its
    open published b's part, counting it open; node a wrote its shards and DCP's
    `.metadata`): the step stays `writing` on a, waiting for b's open file (or naming b's
    shards), and after b restarts on the same cache nothing
    partial is committed anywhere and the step committed before is intact on both nodes,
    and reaches `persisted` (b's uploads resume);
  * kill -9 of node b after its part is published, before its upload ended: a's commit
    takes the step, a's reads of b's file wait until b is back and has uploaded it;
  * kill -9 of the committing node a right after the step is committed on it, before it is
    persisted: after a restarts the step stays committed on both nodes, becomes persisted
    on both and `.ckptfs-commit.json` is in the bucket;
  * the S3 server stopped while node a is committing (waiting for b's part) and b closes its
    shards: nothing commits while the server is down, b's close waits, and once the server
    is back the step commits and node b sees it;
  * a malformed part record put into the bucket by someone else: the step is `broken` on
    the committing node, the key named in user.ckptfs.error, the daemon still answers;
  * a well-formed part record of a node `zz` that never uploads its file.

Everything is cleaned up by cluster_fixture (also killed daemons and their dead mounts).
"""
import errno
import json
import os
import subprocess
import threading
import time

import pytest

from ckptfs_testlib import PYTHON, read_file, torch_available
import cluster_fixture
import test_cluster as tc

MiB = 1 << 20
VISIBLE_S = 10
PERSIST_S = 60


# The same skips and fixture as the cluster tests (the server, torch for a real DCP .metadata).
from test_cluster import _needs, cluster  # noqa: E402,F401  (pytest fixtures)


@pytest.fixture(scope="module")
def dcp4(tmp_path_factory):
    """A real 4-rank DCP checkpoint in a plain directory (made once)."""
    base = tmp_path_factory.mktemp("dcpref4")
    d, exp = str(base / "ckpt"), str(base / "exp")
    tc.run_py(tc.GEN, "save", d, exp, "--world-size", 4)
    return d


# ----------------------------------------------------------------------------- helpers

def key(c, rel):
    return f"{c.prefix}/{rel}"


def part_key(c, step, node):
    return key(c, f"{step}/.ckptfs-parts/{node}.json")


def bucket_keys(c, rel):
    return c.server.keys(key(c, rel) + "/")


class Bg:
    """fn() in a thread: .done, .result, .error (an exception), .join(timeout)."""

    def __init__(self, fn):
        self.result = self.error = None
        self.t0 = time.monotonic()
        self.t1 = None

        def run():
            try:
                self.result = fn()
            except BaseException as e:  # noqa: BLE001
                self.error = e
            self.t1 = time.monotonic()
        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    @property
    def done(self):
        return not self.thread.is_alive()

    def join(self, timeout):
        self.thread.join(timeout)
        return self.done


def write_shards(m, rel, files):
    tc.write_files(m.path(rel), files)


def dcp_by_node(ref):
    return tc.split_dcp(ref, {"a": {0, 1}, "b": {2, 3}}, marker_node="a")


def save_split(c, rel, ref):
    """The whole DCP save, b's ranks and a's, then rank 0's `.metadata` on a."""
    by_node = dcp_by_node(ref)
    write_shards(c["b"], rel, by_node["b"])
    write_shards(c["a"], rel, {n: d for n, d in by_node["a"].items() if n != ".metadata"})
    tc.rename_into_place(c["a"].path(rel, ".metadata"), by_node["a"][".metadata"])
    return by_node


HALF_WRITER = r"""
import os, sys, time
path, data_path = sys.argv[1], sys.argv[2]
data = open(data_path, "rb").read()
os.makedirs(os.path.dirname(path), exist_ok=True)
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, data[:len(data) // 2])
print("ready", flush=True)
time.sleep(600)
"""


def start_half_writer(path, data, tmp_path):
    """A trainer rank that has `path` open with half of `data` written, and never closes."""
    src = tmp_path / "half.bin"
    src.write_bytes(data)
    p = subprocess.Popen([PYTHON, "-c", HALF_WRITER, path, str(src)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.strip() == "ready", f"half writer: {line!r} {p.stderr.read() if p.poll() is not None else ''}"
    return p


def kill_proc(p):
    if p.poll() is None:
        p.kill()
    p.wait(timeout=10)


# ----------------------------------------------------------------------------- kill -9 of a writing node

@pytest.mark.timeout_s(150)
def test_kill9_mid_write_commits_nothing_partial_and_loses_nothing(cluster, dcp4, tmp_path):
    c = cluster(2)
    want = tc.Want.of_dir(dcp4)
    save_split(c, "run/step1", dcp4)
    tc.assert_committed_everywhere(c, "run/step1", want)

    # step2: rank 2 on node b has its shard open, half written; rank 3 has not started.
    by_node = dcp_by_node(dcp4)
    b_shards = sorted(by_node["b"])
    # What a's user.ckptfs.error may say while it waits: b's open file, or b's shards.
    waiting = ["open for writing on node b", *b_shards]
    writer = start_half_writer(c["b"].path("run/step2", b_shards[0]), by_node["b"][b_shards[0]],
                               tmp_path)
    try:
        write_shards(c["a"], "run/step2", {n: d for n, d in by_node["a"].items() if n != ".metadata"})
        tc.rename_into_place(c["a"].path("run/step2/.metadata"), by_node["a"][".metadata"])
        tc.wait_waiting_for(c["a"], "run/step2", waiting)
        # The open published b's part, counting the file open (issue 28, 1): no node
        # commits the step without it.
        part = json.loads(c.server.get(part_key(c, "run/step2", "b")))
        assert part["open_writers"] == 1, part
        c.kill9("b", then=lambda: kill_proc(writer))
    finally:
        kill_proc(writer)

    # a keeps waiting for b's shards while b is dead
    a = c["a"]
    tc.assert_never_committed(_only(c, ["a"]), "run/step2", secs=2.0)
    tc.wait_waiting_for(a, "run/step2", waiting)

    c.restart("b")
    b = c["b"]
    # nothing committed is lost: step1 is committed with the same bytes on both nodes
    # (latest still names it), and b's uploads of step1 resume to `persisted`
    tc.assert_committed_everywhere(c, "run/step1", want)
    # nothing partial is committed, on either node
    tc.assert_never_committed(c, "run/step2", secs=3.0)
    tc.wait_waiting_for(a, "run/step2", waiting)
    if os.path.isdir(b.path("run/step2")):
        assert b.state("run/step2") != "committed"
    tc.wait_persisted_everywhere(c, "run/step1")
    assert ".ckptfs-commit.json" in [k.rsplit("/", 1)[1] for k in bucket_keys(c, "run/step1")]
    print(f"after restart: b's run/step2 state {b.state('run/step2') if os.path.isdir(b.path('run/step2')) else None!r}, "
          f"a's error {a.xattr('run/step2', 'user.ckptfs.error')!r}, "
          f"bucket step2 keys {bucket_keys(c, 'run/step2')}")


class _only:
    """A view of cluster `c` with only some nodes (for tc.assert_never_committed)."""

    def __init__(self, c, names):
        self.nodes = {n: c[n] for n in names}


@pytest.mark.timeout_s(150)
def test_kill9_after_publish_commit_takes_the_part_and_reads_wait_for_the_upload(cluster):
    c = cluster(2, "--commit-settle", "0")
    a, b = c["a"], c["b"]
    files = {"a": {"shard_a0.bin": tc.payload(2 * MiB + 1, 1)},
             "b": {"shard_b0.bin": tc.payload(96 * MiB + 7, 2), "shard_b1.bin": b"b's small file\n"}}
    write_shards(b, "run/step3", files["b"])       # closed: b's part is published
    # b makes its part durable in the background (SPEC section 9, "committed means
    # durable"); a commit waits for that, so the kill comes once the part says so.
    tc.poll(lambda: (json.loads(c.server.get(part_key(c, "run/step3", "b"))).get("synced"), None),
            tc.VISIBLE_S, "node b's part made durable")
    c.kill9("b")                                   # its upload has not ended
    part = json.loads(c.server.get(part_key(c, "run/step3", "b")))
    pending = sorted(f["path"] for f in part["files"] if not f["uploaded"])
    assert sorted(f["path"] for f in part["files"]) == sorted(files["b"]), part
    assert "shard_b0.bin" in pending, \
        f"node b's upload of shard_b0.bin ended before the kill (part {part}): no fault injected"

    write_shards(a, "run/step3", files["a"])
    r = a.commit("run/step3", timeout=VISIBLE_S * 3)
    assert r.returncode == 0, f"ckptfs commit on node a with b dead: {r.stderr}"
    assert a.state("run/step3") == "committed"
    assert sorted(os.listdir(a.path("run/step3"))) == sorted([*files["a"], *files["b"]])

    # a's read of b's big file waits: b is dead and the bucket does not hold it yet
    reader = Bg(lambda: read_file(a.path("run/step3", "shard_b0.bin")))
    assert not reader.join(3.0), \
        f"a's read of b's unuploaded file returned while b was dead: " \
        f"{reader.error!r} / {None if reader.result is None else len(reader.result)} bytes"
    c.restart("b")
    assert reader.join(90), "a's read of b's file still waits 90 s after b restarted"
    assert reader.error is None, f"a's read of b's file failed after b restarted: {reader.error!r}"
    assert reader.result == files["b"]["shard_b0.bin"], "a read wrong bytes of b's file"
    want = tc.Want.of_files(tc.union(files))
    tc.assert_committed_everywhere(c, "run/step3", want)
    tc.wait_persisted_everywhere(c, "run/step3")


@pytest.mark.timeout_s(150)
def test_kill9_before_the_part_is_durable_holds_the_commit_until_the_node_is_back(cluster):
    """SPEC section 9, "committed means durable": node b's trainer closes without fsync
    (torch.save), and b's daemon dies before it made its part durable. Before, node a
    committed at once with b's part, though a power loss on b could then have lost files
    of a committed step. Now b's part counts the file open until b has synced it and put
    the part again, so a's commit waits, and b's daemon, restarted in the same boot,
    syncs its part and puts it again: the step commits."""
    c = cluster(2, "--commit-settle", "0")
    a, b = c["a"], c["b"]
    files = {"a": {"shard_a0.bin": tc.payload(MiB + 1, 5)},
             "b": {"shard_b0.bin": tc.payload(256 * MiB + 7, 6)}}
    write_shards(b, "run/step6", files["b"])       # closed, never fsynced
    c.kill9("b")                                   # at once: before its sync and PUT
    part = json.loads(c.server.get(part_key(c, "run/step6", "b")))
    assert part["open_writers"] > 0 or not part["synced"], \
        f"node b made its part durable before the kill (part {part}): no fault injected"
    write_shards(a, "run/step6", files["a"])
    commit = Bg(lambda: a.commit("run/step6", timeout=tc.VISIBLE_S * 6))
    assert not commit.join(3.0), f"a committed with b's part not durable: {commit.result!r}"
    error = a.xattr("run/step6", "user.ckptfs.error")
    assert "open for writing on node b" in error or "node b to make its files durable" in error, error
    c.restart("b")
    assert commit.join(tc.VISIBLE_S * 6), "a's commit still waits after b restarted"
    assert commit.error is None and commit.result.returncode == 0, \
        f"ckptfs commit on node a: {commit.error!r} {commit.result and commit.result.stderr}"
    tc.assert_committed_everywhere(c, "run/step6", tc.Want.of_files(tc.union(files)))
    tc.wait_persisted_everywhere(c, "run/step6")


# ----------------------------------------------------------------------------- kill -9 of the committing node

@pytest.mark.timeout_s(150)
def test_kill9_of_the_committer_after_commit_before_persist(cluster):
    c = cluster(2, "--commit-settle", "0")
    a, b = c["a"], c["b"]
    files = {"a": {"shard_a0.bin": tc.payload(128 * MiB + 3, 3), "shard_a1.bin": b"a small\n"},
             "b": {"shard_b0.bin": tc.payload(3 * MiB + 5, 4)}}
    write_shards(b, "run/step4", files["b"])
    write_shards(a, "run/step4", files["a"])
    os.setxattr(a.path("run/step4"), "user.ckptfs.commit", b"1")
    a.wait_state("run/step4", "committed", timeout=VISIBLE_S)
    c.kill9("a")                                   # right after the commit, mid-upload
    names = [k.rsplit("/", 1)[1] for k in bucket_keys(c, "run/step4")]
    assert ".ckptfs-step.json" in names, names
    assert ".ckptfs-commit.json" not in names, \
        f"the step was persisted before the kill (keys {names}): no fault injected"

    c.restart("a")
    want = tc.Want.of_files(tc.union(files))
    tc.assert_committed_everywhere(c, "run/step4", want)
    tc.wait_persisted_everywhere(c, "run/step4", timeout=PERSIST_S)
    names = [k.rsplit("/", 1)[1] for k in bucket_keys(c, "run/step4")]
    assert ".ckptfs-commit.json" in names, names
    assert c.server.get(key(c, "run/step4/shard_a0.bin")) == files["a"]["shard_a0.bin"]


# ----------------------------------------------------------------------------- the bucket goes away

def commit_logged(m, rel):
    """Whether m's daemon log (<cache>/ckptfs.log, read outside the mount) has a commit
    of `rel`."""
    try:
        with open(os.path.join(m.cache, "ckptfs.log")) as f:
            lines = f.read().splitlines()
    except OSError:
        return False
    for line in lines:
        doc = line.split(": ", 2)[-1]
        if doc.startswith("{"):
            try:
                e = json.loads(doc)
            except ValueError:
                continue
            if e.get("event") in ("commit", "cluster_commit") and e.get("path") == rel:
                return True
    return False


@pytest.mark.timeout_s(180)
def test_bucket_stopped_during_a_commit(cluster, dcp4):
    c = cluster(2)
    a, b = c["a"], c["b"]
    by_node = dcp_by_node(dcp4)
    write_shards(a, "run/step6", {n: d for n, d in by_node["a"].items() if n != ".metadata"})
    tc.rename_into_place(a.path("run/step6/.metadata"), by_node["a"][".metadata"])
    tc.wait_waiting_for(a, "run/step6", sorted(by_node["b"]))   # a is committing, gathering parts
    c.server.stop()
    try:
        # node b's ranks finish while the bucket is down: their closes wait to publish
        # (well under the 60 s publish timeout), and a commits nothing meanwhile
        writer = Bg(lambda: write_shards(b, "run/step6", by_node["b"]))
        assert not writer.join(5.0), f"b's save finished with the bucket down: {writer.error!r}"
        assert not commit_logged(a, "run/step6"), "node a committed run/step6 with the bucket down"
    finally:
        c.server.start()
    assert writer.join(60), "b's closes still wait 60 s after the bucket came back"
    assert writer.error is None, f"b's closes failed: {writer.error!r}"
    tc.assert_committed_everywhere(c, "run/step6", tc.Want.of_dir(dcp4))


@pytest.mark.timeout_s(120)
def test_an_outage_never_fails_a_close_and_publish_timeout_bounds_a_first_open(cluster):
    """Issue 28 ("a bucket outage turning close() into EIO after 60 s"): with the bucket
    down, fsync() and close() of a file already open in a step return at once and
    succeed; the part in the bucket keeps counting the file open, so nothing commits
    without it, and the node puts it again once the bucket is back. Only the first open
    for writing of a step on the node waits for the bucket, and fails with EIO after
    --publish-timeout (2 s here; the default would hold it 60 s)."""
    c = cluster(1, "--publish-timeout", "2")
    a = c["a"]
    os.makedirs(a.path("run/step1"))
    fd = os.open(a.path("run/step1/x.bin"), os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"x" * 1000)
    c.server.stop()
    try:
        t0 = time.monotonic()
        os.fsync(fd)
        os.close(fd)
        took_close = time.monotonic() - t0
        os.makedirs(a.path("run/step2"))
        t0 = time.monotonic()
        with pytest.raises(OSError) as e:
            os.open(a.path("run/step2/y.bin"), os.O_WRONLY | os.O_CREAT, 0o644)
        took_open = time.monotonic() - t0
    finally:
        c.server.start()
    assert took_close < 1.0, f"fsync and close took {took_close:.1f} s with the bucket down"
    assert e.value.errno == errno.EIO, e.value
    assert 1.5 < took_open < 30, f"the first open took {took_open:.1f} s with --publish-timeout 2"
    assert read_file(a.path("run/step1/x.bin")) == b"x" * 1000
    errors = [ev for ev in a.events() if ev.get("kind") == "cluster_publish"]
    assert {ev["path"] for ev in errors} >= {"run/step2"}, errors
    # The bucket is back: the node's thread puts step1's part again, quiet and durable.
    tc.poll(lambda: (lambda p: (p["open_writers"] == 0 and p["synced"], p))(
                json.loads(c.server.get(part_key(c, "run/step1", "a")))),
            tc.VISIBLE_S * 3, "node a's part of run/step1 put again after the outage")


@pytest.mark.timeout_s(120)
def test_lookups_answer_promptly_while_the_bucket_is_down(cluster):
    c = cluster(2)
    a = c["a"]
    write_shards(a, "run/step1", {"x.bin": b"x" * 1000})
    assert a.commit("run/step1").returncode == 0
    c["b"].wait_state("run/step1", "committed", timeout=VISIBLE_S)
    c.server.stop()
    try:
        time.sleep(0.5)                            # the view is older than --refresh 0.2
        slow = []
        for what, fn in (("ls run", lambda: os.listdir(a.path("run"))),
                         ("getxattr state", lambda: a.state("run/step1")),
                         ("readlink latest", lambda: a.latest("run")),
                         ("status.json", lambda: a.status())):
            bg = Bg(fn)
            bg.join(30)
            took = (bg.t1 or time.monotonic()) - bg.t0
            assert bg.error is None, f"{what} with the bucket down: {bg.error!r}"
            if took > 3.0:
                slow.append(f"{what}: {took:.1f} s")
                break                              # one is enough (each costs ~8 s or more)
        assert not slow, f"node a with the bucket down (committed view kept): {slow}"
        assert a.state("run/step1") == "committed"
    finally:
        c.server.start()


# ----------------------------------------------------------------------------- foreign part records

@pytest.mark.timeout_s(120)
def test_a_malformed_part_record_breaks_the_step_naming_it(cluster):
    c = cluster(2)
    a, b = c["a"], c["b"]
    write_shards(a, "run/step5", {"shard_a0.bin": tc.payload(MiB, 5)})
    write_shards(b, "run/step5", {"shard_b0.bin": tc.payload(MiB, 6)})
    c.server.put(part_key(c, "run/step5", "zz"), b'{"format":"ckptfs-part","version":1,"node":')
    r = a.commit("run/step5", timeout=VISIBLE_S * 3)
    a.wait_state("run/step5", "broken", timeout=VISIBLE_S)
    err = a.xattr("run/step5", "user.ckptfs.error") or ""
    assert ".ckptfs-parts/zz.json" in err, f"user.ckptfs.error {err!r}"
    assert r.returncode != 0, f"ckptfs commit of a broken step succeeded: {r.stdout}"
    # no crash: the daemon answers and its other steps work
    assert sorted(os.listdir(a.path("run/step5"))) == ["shard_a0.bin"]
    write_shards(a, "run/step7", {"x.bin": b"x" * 1000})
    assert a.commit("run/step7").returncode == 0
    assert a.state("run/step7") == "committed"
    kinds = [e.get("kind") for e in a.events() if e.get("event") == "error"]
    assert "cluster_part" in kinds, kinds
    tc.assert_never_committed(c, "run/step5", secs=1.0)


def publish_ghost_part(c, step, size, joined=True):
    """Node zz's part record of `step`: node b's real record with the node changed and one
    file, ghost.bin of `size` bytes, that is never uploaded. joined: zz's registration is
    in `.ckptfs-nodes/` too (a node that joined, published, then stopped for good)."""
    if joined:
        c.server.put(key(c, ".ckptfs-nodes/zz.json"), json.dumps(
            {"format": "ckptfs-node", "version": 1, "node": "zz", "cache_id": "gone",
             "host": "gone"}).encode())
    rec = json.loads(c.server.get(part_key(c, step, "b")))
    rec["node"] = "zz"
    rec["files"] = [{"path": "ghost.bin", "size": size, "mode": 0o644,
                     "mtime_ns": rec["files"][0]["mtime_ns"], "crc32c": None,
                     "uploaded": False, "chunks": []}]
    rec["all_uploaded"] = False
    c.server.put(part_key(c, step, "zz"), json.dumps(rec).encode())


@pytest.mark.timeout_s(120)
def test_a_part_record_naming_a_file_that_never_arrives(cluster):
    c = cluster(2, "--commit-settle", "0")
    a, b = c["a"], c["b"]
    write_shards(a, "run/step8", {"shard_a0.bin": tc.payload(MiB, 7)})
    write_shards(b, "run/step8", {"shard_b0.bin": tc.payload(MiB, 8)})
    publish_ghost_part(c, "run/step8", size=12345)
    r = a.commit("run/step8", timeout=VISIBLE_S * 3)
    # What the daemon does (docs/cluster.md, "Failures": a node that stops after
    # publishing): the union, zz's file included, is committed; reads of zz's file wait
    # for its upload (up to 600 s, then EIO) and the step is never persisted. Nothing
    # crashes, nothing else waits, and no wrong bytes are ever returned.
    assert r.returncode == 0, f"ckptfs commit: {r.stderr}"
    assert a.state("run/step8") == "committed"
    assert sorted(os.listdir(a.path("run/step8"))) == ["ghost.bin", "shard_a0.bin", "shard_b0.bin"]
    assert os.stat(a.path("run/step8/ghost.bin")).st_size == 12345
    reader = Bg(lambda: read_file(a.path("run/step8", "ghost.bin")))
    assert not reader.join(4.0), \
        f"the read of a file that was never uploaded returned: {reader.error!r} / " \
        f"{None if reader.result is None else len(reader.result)} bytes"
    # the daemon still answers, other files of the step read right, on both nodes
    assert read_file(a.path("run/step8/shard_b0.bin")) == tc.payload(MiB, 8)
    assert read_file(b.path("run/step8/shard_a0.bin")) == tc.payload(MiB, 7)
    b.wait_state("run/step8", "committed", timeout=VISIBLE_S)
    assert "step8" in os.listdir(a.path("run"))
    time.sleep(2.0)
    for name in ("a", "b"):
        assert c[name].xattr("run/step8", "user.ckptfs.persisted") != "true", \
            f"node {name}: step8 persisted without zz's file"
    assert ".ckptfs-commit.json" not in [k.rsplit("/", 1)[1] for k in bucket_keys(c, "run/step8")]
    assert not reader.done, f"the read of ghost.bin returned: {reader.error!r}"


@pytest.mark.timeout_s(120)
def test_a_part_record_of_a_node_that_never_joined_stays_out(cluster):
    """A part record under a name no mount registered is not any node's part: the
    commit leaves it out (before, the step committed with zz's file, which no node had,
    and never became persisted)."""
    c = cluster(2, "--commit-settle", "0")
    a, b = c["a"], c["b"]
    write_shards(a, "run/step10", {"shard_a0.bin": tc.payload(MiB, 7)})
    write_shards(b, "run/step10", {"shard_b0.bin": tc.payload(MiB, 8)})
    publish_ghost_part(c, "run/step10", size=4096, joined=False)
    r = a.commit("run/step10", timeout=VISIBLE_S * 3)
    assert r.returncode == 0, f"ckptfs commit: {r.stderr}"
    assert sorted(os.listdir(a.path("run/step10"))) == ["shard_a0.bin", "shard_b0.bin"]
    assert any(e.get("kind") == "cluster_fenced_part" and e.get("node") == "zz"
               for e in a.events()), a.events()
    tc.wait_persisted_everywhere(c, "run/step10")


@pytest.mark.timeout_s(120)
def test_read_wait_bounds_a_read_of_a_file_never_uploaded(cluster):
    """--read-wait 3: the read of a file whose node never uploads it fails with EIO after
    about 3 s (the default would wait 600 s); the other files still read right."""
    c = cluster(2, "--commit-settle", "0", "--read-wait", "3")
    a, b = c["a"], c["b"]
    write_shards(a, "run/step9", {"shard_a0.bin": tc.payload(MiB, 7)})
    write_shards(b, "run/step9", {"shard_b0.bin": tc.payload(MiB, 8)})
    publish_ghost_part(c, "run/step9", size=4096)
    r = a.commit("run/step9", timeout=VISIBLE_S * 3)
    assert r.returncode == 0, f"ckptfs commit: {r.stderr}"
    t0 = time.monotonic()
    with pytest.raises(OSError) as e:
        read_file(a.path("run/step9/ghost.bin"))
    took = time.monotonic() - t0
    assert e.value.errno == errno.EIO, e.value
    assert 2.0 < took < 30, f"the read failed after {took:.1f} s with --read-wait 3"
    assert read_file(a.path("run/step9/shard_b0.bin")) == tc.payload(MiB, 8)
    said = [ev.get("error", "") for ev in a.events() if ev.get("event") == "error"]
    assert any("node zz" in m and "--read-wait" in m for m in said), said
