"""Cluster mode (SPEC section 9, issue 17): several mounts on one bucket (a Ceph gateway), each
with its own cache and `--node a|b|c|d`, `--refresh 0.2`, stand in for the nodes of one
training job (cluster_fixture.py).

What is checked is what trainers and users see on every node: the step committed
(user.ckptfs.state, `ls` of the run directory, `latest`, `ckptfs status`,
user.ckptfs.files / bytes) within a few seconds of the commit on another node; every
file byte for byte the same on every node, also files another node wrote (the read
waits for the owner's upload) and after that node is gone; DCP loads of the step through
any node; exact `.full/` views on a node that wrote no shard; `persisted` everywhere and
on a cold mount of a new node. The writers:

  * real torch DCP (torch 1.13, gloo) with ranks spread over the mounts
    (dcp_cluster_save.py: rank r writes under the mount of node r // ranks_per_node;
    rank 0 renames `.metadata` into place after DCP's gather), compared with the same
    save into a plain directory (byte-identical; full_views_gen.py's expected views);
  * per-rank torch.save with `ckptfs commit` on one node;
  * `cp -r` of a checkpoint split over two mounts, in both orders;
  * the OLMo-core Checkpointer's multi-node sequence (per-node `step<N>-tmp` renamed by
    each node, `.metadata.json` by rank 0), with node b's rename before and after the
    marker;
  * a part that never arrives (the step stays `writing`, the file named in
    user.ckptfs.error, never committed anywhere) and a node whose shards come 2 s late.
"""
import errno
import json
import os
import shutil
import subprocess
import time

import pytest

from ckptfs_testlib import (HERE, PYTHON, read_file, run_cli, torch_available,
                            tree_digest, write_file)
import cluster_fixture

DRIVER = os.path.join(HERE, "dcp_cluster_save.py")
GEN = os.path.join(HERE, "full_views_gen.py")
MiB = 1 << 20
VISIBLE_S = 10       # a commit made on one node shows on every node within this
PERSIST_S = 60


@pytest.fixture(scope="module", autouse=True)
def _needs():
    cluster_fixture.require_store()
    if not torch_available():
        pytest.skip(f"torch is not importable by {PYTHON}: the cluster tests drive torch DCP "
                    "(apt install python3-torch)")


@pytest.fixture
def cluster(request, ckptfs_bin, monkeypatch):
    """cluster(n) -> cluster_fixture.Cluster: a bucket and n mounts, nodes a, b, ..."""
    with cluster_fixture.clusters(request, monkeypatch) as make:
        yield make


# ----------------------------------------------------------------------------- writers

def run_py(script, *args, timeout=300):
    r = subprocess.run([PYTHON, script, *map(str, args)], capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, f"{os.path.basename(script)} {' '.join(map(str, args))} failed:\n" \
                              f"{r.stderr[-4000:]}"
    return r


def dcp_save(c, rel, world, nodes=None):
    """A real DCP save by `world` gloo ranks, rank r under the mount of node
    r // (world / len(nodes))."""
    run_py(DRIVER, "save", rel, "--roots", ",".join(c.roots(nodes)), "--world-size", world)


def dcp_load(path, world):
    """`world` ranks load the step at `path` and compare every value with the recipe."""
    run_py(DRIVER, "load", path, "--world-size", world)


@pytest.fixture(scope="module")
def dcp_ref(tmp_path_factory):
    """dcp_ref(world) -> (plain dir, expected views dir): the same DCP save into a plain
    directory (made once per world size)."""
    made = {}

    def get(world):
        if world not in made:
            base = tmp_path_factory.mktemp(f"dcpref{world}")
            d, exp = str(base / "ckpt"), str(base / "exp")
            run_py(GEN, "save", d, exp, "--world-size", world)
            made[world] = d, exp
        return made[world]
    return get


def rank_files(ref, ranks):
    """DCP shard files of `ranks` in a plain checkpoint (`__<rank>_<i>.distcp`)."""
    return sorted(n for n in os.listdir(ref) if n.startswith("__") and
                  int(n[2:].split("_")[0]) in ranks)


def write_files(root, files):
    """files: {relative path: bytes}, written under root (directories made)."""
    for rel, data in files.items():
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        write_file(p, data)


def files_of(ref, names):
    return {n: read_file(os.path.join(ref, n)) for n in names}


def rename_into_place(path, data):
    """tmp file + fsync + rename, as DCP's finish writes `.metadata`."""
    write_file(path + ".tmp", data, fsync=True)
    os.rename(path + ".tmp", path)


def payload(n, seed):
    block = bytes((seed * 131 + i * 7) & 0xFF for i in range(4093))
    return (block * (n // len(block) + 1))[:n]


def digest_of(files):
    import hashlib
    return {rel: hashlib.sha256(data).hexdigest() for rel, data in files.items()}


# ----------------------------------------------------------------------------- what every node sees

def poll(fn, timeout, what):
    """Calls fn() until it returns (True, _); fails with the last detail after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            ok, detail = fn()
        except OSError as e:
            ok, detail = False, repr(e)
        if ok:
            return detail
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s; last: {detail}")
        time.sleep(0.05)


def status_step(m, rel):
    r = run_cli("status", m.mnt, "--json")
    assert r.returncode == 0, f"ckptfs status {m.mnt}: {r.stderr}"
    return next((s for s in json.loads(r.stdout)["steps"] if s.get("path") == rel), None)


def assert_committed_on(name, m, rel, nfiles, nbytes, latest=True, timeout=VISIBLE_S):
    run, step = os.path.split(rel)
    m.wait_state(rel, "committed", timeout=timeout)
    poll(lambda: (step in os.listdir(m.path(run)), sorted(os.listdir(m.path(run)))),
         timeout, f"node {name}: {step} in `ls {run}`")
    if latest:
        poll(lambda: (os.readlink(m.path(run, "latest")) == step,
                      os.readlink(m.path(run, "latest"))), timeout, f"node {name}: {run}/latest -> {step}")
    st = poll(lambda: ((s := status_step(m, rel)) is not None and s.get("state") == "committed", s),
              timeout, f"node {name}: `ckptfs status` shows {rel} committed")
    assert m.xattr(rel, "user.ckptfs.files") == str(nfiles), \
        f"node {name}: user.ckptfs.files {m.xattr(rel, 'user.ckptfs.files')}, expected {nfiles}"
    assert m.xattr(rel, "user.ckptfs.bytes") == str(nbytes), \
        f"node {name}: user.ckptfs.bytes {m.xattr(rel, 'user.ckptfs.bytes')}, expected {nbytes}"
    return st


class Want:
    """The files a step must hold: {relative path: sha256} and their total size."""

    def __init__(self, digest, nbytes):
        self.digest, self.nbytes = digest, nbytes

    @classmethod
    def of_dir(cls, d):
        digest = tree_digest(d)
        return cls(digest, sum(os.path.getsize(os.path.join(d, p)) for p in digest))

    @classmethod
    def of_files(cls, files):
        import hashlib
        return cls({rel: hashlib.sha256(data).hexdigest() for rel, data in files.items()},
                   sum(len(data) for data in files.values()))


def assert_same_files(name, m, rel, want):
    got = tree_digest(m.path(rel))
    assert sorted(got) == sorted(want.digest), \
        f"node {name}: files of {rel} differ: missing {sorted(set(want.digest) - set(got))}, " \
        f"extra {sorted(set(got) - set(want.digest))}"
    bad = sorted(p for p in want.digest if got[p] != want.digest[p])
    assert not bad, f"node {name}: {rel}: contents differ for {bad}"


def assert_committed_everywhere(c, rel, want, latest=True, nodes=None):
    """On every node (or `nodes`): `rel` committed (state xattr, `ls` of the run,
    `latest`, `ckptfs status`, user.ckptfs.files / bytes), then every file read through
    that node byte-identical to `want`."""
    names = nodes or c.names()
    for name in names:
        assert_committed_on(name, c[name], rel, len(want.digest), want.nbytes, latest)
    for name in names:
        assert_same_files(name, c[name], rel, want)


def assert_never_committed(c, rel, secs):
    """For `secs`, no node shows `rel` committed or `latest` pointing at it."""
    run, step = os.path.split(rel)
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        for name, m in c.nodes.items():
            if os.path.isdir(m.path(rel)):
                st = m.state(rel)
                assert st != "committed", \
                    f"node {name}: {rel} committed: {m.xattr(rel, 'user.ckptfs.error')!r}"
            if os.path.islink(m.path(run, "latest")):
                assert os.readlink(m.path(run, "latest")) != step, f"node {name}: latest -> {step}"
        time.sleep(0.1)


def wait_waiting_for(m, rel, missing, timeout=VISIBLE_S):
    """`rel` is `writing` on m with user.ckptfs.error naming one of the files `missing`."""
    def check():
        st, err = m.state(rel), m.xattr(rel, "user.ckptfs.error") or ""
        return st == "writing" and any(n in err for n in missing), (st, err)
    return poll(check, timeout, f"{rel} writing, waiting for one of {missing}")


def wait_persisted_everywhere(c, rel, nodes=None, timeout=PERSIST_S):
    for name in nodes or c.names():
        m = c[name]
        poll(lambda: (m.xattr(rel, "user.ckptfs.persisted") == "true",
                      (m.xattr(rel, "user.ckptfs.persisted"), m.state(rel))),
             timeout, f"node {name}: {rel} persisted")


def split_dcp(ref, ranks_by_node, marker_node):
    """{node: {name: bytes}}: the shards of a plain DCP checkpoint split by rank over
    nodes, `.metadata` with marker_node."""
    out = {n: files_of(ref, rank_files(ref, ranks)) for n, ranks in ranks_by_node.items()}
    out[marker_node][".metadata"] = read_file(os.path.join(ref, ".metadata"))
    return out


def split_plain_step():
    """Files of a step written half on node a, half on node b; some cross 8 MiB."""
    return {"a": {"shard_a0.bin": payload(3 * MiB + 5, 1), "shard_a1.bin": payload(MiB, 2)},
            "b": {"shard_b0.bin": payload(9 * MiB + 3, 3), "sub/b1.bin": b"node b's small file\n"}}


def write_split(c, rel, by_node):
    for name, files in by_node.items():
        write_files(c[name].path(rel), files)


def union(by_node):
    out = {}
    for files in by_node.values():
        out.update(files)
    return out


# ----------------------------------------------------------------------------- torch DCP

@pytest.mark.timeout_s(300)
def test_dcp_two_nodes_four_ranks(cluster, dcp_ref):
    c = cluster(2)
    ref, _ = dcp_ref(4)
    dcp_save(c, "run/step100", 4)          # ranks 0-1 on a, 2-3 on b; rank 0 renames .metadata on a
    assert_committed_everywhere(c, "run/step100", Want.of_dir(ref))
    assert c["a"].xattr("run/step100", "user.ckptfs.error") in (None, "")
    # DCP fsyncs each shard, then closes it: the fsync published it, so b's closes
    # left their PUT (the open-writer count) to the daemon's thread.
    assert c["b"].status()["cluster"]["closes_published_later"] >= 1, c["b"].status()["cluster"]
    dcp_load(c["b"].path("run/step100"), 4)


@pytest.mark.timeout_s(400)
def test_dcp_four_nodes_eight_ranks_and_full_views(cluster, dcp_ref):
    from test_full_views import assert_full_views
    c = cluster(4)
    ref, exp = dcp_ref(8)
    dcp_save(c, "run/step200", 8)          # two ranks per node, a..d
    assert_committed_everywhere(c, "run/step200", Want.of_dir(ref))
    assert_full_views(c["d"].path("run/step200", ".full"), exp, "dcp")
    dcp_load(c["b"].path("run/step200"), 8)


@pytest.mark.timeout_s(300)
def test_dcp_consecutive_saves_move_latest_on_every_node(cluster, dcp_ref):
    c = cluster(2)
    ref, _ = dcp_ref(4)
    want = Want.of_dir(ref)                # the recipe does not depend on the step
    dcp_save(c, "run/step1", 4)
    assert_committed_everywhere(c, "run/step1", want)
    dcp_save(c, "run/step2", 4)
    assert_committed_everywhere(c, "run/step2", want)
    for name, m in c.nodes.items():
        assert m.latest("run") == "step2", f"node {name}"
        assert m.state("run/step1") == "committed", f"node {name}"
        steps = sorted(n for n in os.listdir(m.path("run")) if n.startswith("step"))
        assert steps == ["step1", "step2"], f"node {name}: {steps}"


@pytest.mark.timeout_s(180)
def test_full_views_on_a_node_that_wrote_nothing(cluster, dcp_ref):
    """Node c only reads: it sees the step the ranks on a and b wrote, and its `.full/`
    views are exact."""
    from test_full_views import assert_full_views
    c = cluster(3)
    ref, exp = dcp_ref(4)
    by_node = split_dcp(ref, {"b": {2, 3}, "a": {0, 1}}, marker_node="a")
    write_split(c, "run/step300", {"b": by_node["b"]})
    write_files(c["a"].path("run/step300"), {n: d for n, d in by_node["a"].items() if n != ".metadata"})
    rename_into_place(c["a"].path("run/step300/.metadata"), by_node["a"][".metadata"])
    assert_committed_everywhere(c, "run/step300", Want.of_dir(ref), nodes=["c", "a", "b"])
    assert_full_views(c["c"].path("run/step300", ".full"), exp, "dcp")


# ----------------------------------------------------------------------------- other writers

@pytest.mark.timeout_s(300)
def test_torch_save_per_rank_then_ckptfs_commit_on_one_node(cluster):
    c = cluster(2)
    run_py(DRIVER, "torch-save", "run/step5", "--roots", ",".join(c.roots()), "--world-size", 4)
    # each node holds its ranks' files; nothing committed yet (no marker, no trigger)
    own = {}
    for name, ranks in (("a", (0, 1)), ("b", (2, 3))):
        m = c[name]
        have = set(os.listdir(m.path("run/step5")))
        assert have >= {f"rank{r}.pt" for r in ranks}, f"node {name}: {sorted(have)}"
        assert m.state("run/step5") == "writing", name
        own.update({f"rank{r}.pt": read_file(m.path("run/step5", f"rank{r}.pt")) for r in ranks})
    r = c["a"].commit("run/step5")
    assert r.returncode == 0, f"ckptfs commit on node a: {r.stderr}"
    assert_committed_everywhere(c, "run/step5", Want.of_files(own))
    run_py(DRIVER, "torch-load", c["b"].path("run/step5"), "--world-size", 4)


@pytest.mark.timeout_s(240)
def test_a_rank_still_writing_on_another_node_holds_the_commit(cluster):
    """Issue 28, 1 (SPEC section 9: a file open for writing on any node keeps its step
    from committing). DeepSpeed's order: a rank on node b still writes its optimizer
    shard (open, nothing closed on b yet) when rank 0 on node a writes `latest`. Node a
    committed the step with its own files after the settle; b's later write and close
    returned 0 and the file was gone. Now b's open is in its part before open()
    returns, so the commit waits for the close and holds b's file."""
    c = cluster(2, "--nodes", 2)
    rel = "run/global_step10"
    for name in c.nodes:
        os.makedirs(c[name].path(rel), exist_ok=True)
    a_files = {"mp_rank_00_model_states.pt": payload(2 * MiB, 1),
               "zero_pp_rank_0_mp_rank_00_optim_states.pt": payload(MiB, 2)}
    b_name, b_data = "zero_pp_rank_1_mp_rank_00_optim_states.pt", payload(3 * MiB + 7, 3)
    with open(c["b"].path(rel, b_name), "wb") as f:
        f.write(b_data[:MiB])
        f.flush()
        write_files(c["a"].path(rel), a_files)
        write_file(c["a"].path("run", "latest"), b"global_step10")   # rank 0: the trigger
        assert_never_committed(c, rel, 4)       # past the 2 s settle
        error = c["a"].xattr(rel, "user.ckptfs.error")
        assert "open for writing on node b" in error, error
        f.write(b_data[MiB:])
    assert_committed_everywhere(c, rel, Want.of_files({**a_files, b_name: b_data}), latest=False)


@pytest.mark.timeout_s(240)
def test_a_step_that_lists_no_files_waits_for_every_node_of_the_job(cluster):
    """Issue 28, 1 (SPEC section 9: a step whose format lists no files commits only once
    every node of the job has published its part with nothing open). Hugging Face's
    order on 2 nodes: rank 0 on node a saves the model and `trainer_state.json` (the
    trigger) while node b's rank has not opened its `rng_state_1.pth` yet. Node a
    committed after the 2 s settle with its own files, and b's file then vanished
    (`cluster_late_file`). With --nodes 2 the commit waits for b's part and holds b's
    file; a run mounted without --nodes waits and says to set it."""
    c = cluster(2, "--nodes", 2)
    rel = "run/checkpoint-100"
    for name in c.nodes:
        os.makedirs(c[name].path(rel), exist_ok=True)
    a_files = {"model.safetensors": payload(2 * MiB, 11), "rng_state_0.pth": payload(14_000, 12),
               "trainer_state.json": b'{"global_step": 100}'}
    b_files = {"rng_state_1.pth": payload(14_000, 13)}
    write_files(c["a"].path(rel), a_files)
    assert_never_committed(c, rel, 4)       # past the 2 s settle
    error = c["a"].xattr(rel, "user.ckptfs.error")
    assert "1 of --nodes 2 published" in error, error
    write_files(c["b"].path(rel), b_files)
    assert_committed_everywhere(c, rel, Want.of_files({**a_files, **b_files}), latest=True)

    # The same run on nodes mounted without --nodes: the step waits, the error names
    # the option, and the user's `ckptfs commit` commits it once the save is done.
    d = cluster(2, prefix="team/no-nodes")
    for name in d.nodes:
        os.makedirs(d[name].path(rel), exist_ok=True)
    write_files(d["b"].path(rel), b_files)
    write_files(d["a"].path(rel), a_files)
    assert_never_committed(d, rel, 3)
    error = d["a"].xattr(rel, "user.ckptfs.error")
    assert "--nodes N" in error, error
    r = d["a"].commit(rel)
    assert r.returncode == 0, f"ckptfs commit on node a: {r.stderr}"
    assert_committed_everywhere(d, rel, Want.of_files({**a_files, **b_files}), latest=True)


def read_run_file(m, rel):
    """(bytes, None) of a file on mount m, or (None, why not)."""
    try:
        return read_file(m.path(rel)), None
    except OSError as e:
        return None, e


@pytest.mark.timeout_s(240)
def test_run_level_files_written_on_one_node_are_read_on_every_node(cluster):
    """Issue 28, 7 (SPEC section 9, "one namespace of steps"): DeepSpeed's `latest` and
    RecIS's `checkpoint`, written on node a, never appeared on node b, even once persisted,
    and every DeepSpeed rank reads `latest` at resume. Now the uploading node records each
    version in the bucket's step index and every node shows it: b and a cold node c read
    a's bytes, a newer version replaces them, and a version b writes itself later wins
    there and then on a."""
    c = cluster(2, "--nodes", 2)

    def save(step, latest):
        rel = f"run/{step}"
        files = {"a": {"mp_rank_00_model_states.pt": payload(MiB, 1)},
                 "b": {"zero_pp_rank_1_mp_rank_00_optim_states.pt": payload(MiB + 3, 2)}}
        for name in c.nodes:
            os.makedirs(c[name].path(rel), exist_ok=True)
        write_files(c["b"].path(rel), files["b"])
        write_files(c["a"].path(rel), files["a"])
        write_file(c["a"].path("run", "latest"), latest)     # rank 0, after the barrier
        write_file(c["a"].path("run", "checkpoint"), b"model_checkpoint_path: " + latest + b"\n")
        assert_committed_everywhere(c, rel, Want.of_files({**files["a"], **files["b"]}),
                                    latest=False)
        wait_persisted_everywhere(c, rel)

    def wait_reads(names, rel, want):
        for name in names:
            poll(lambda: (read_run_file(c[name], rel)[0] == want, read_run_file(c[name], rel)),
                 VISIBLE_S, f"node {name}: {rel} reads {want!r}")

    save("global_step10", b"global_step10")
    wait_reads(["b"], "run/latest", b"global_step10")
    wait_reads(["b"], "run/checkpoint", b"model_checkpoint_path: global_step10\n")
    assert "latest" in os.listdir(c["b"].path("run"))
    save("global_step20", b"global_step20")
    wait_reads(["b"], "run/latest", b"global_step20")
    c.add("c")
    wait_reads(["c"], "run/latest", b"global_step20")
    # A version written on b later wins, on b at once and then on a and c.
    time.sleep(0.05)
    write_file(c["b"].path("run", "latest"), b"global_step10")
    wait_reads(["b", "a", "c"], "run/latest", b"global_step10")


@pytest.mark.timeout_s(300)
def test_a_shard_left_by_an_abandoned_attempt_never_enters_the_re_save(cluster, dcp_ref):
    """Issue 28, 3 (SPEC section 9, "one save, one step"): attempt 1 of step5 left rank
    2's shard on node a and was abandoned; attempt 2 wrote rank 2 on node b, and node a
    its ranks and `.metadata`, which commits. The step kept node a's stale copy ("the
    step keeps node a's") and a DCP load through a fresh node got one tensor wrong. The
    copy written last wins: every node, the bucket and a cold node hold attempt 2's."""
    c = cluster(2)
    ref, _ = dcp_ref(4)
    stale_name = rank_files(ref, {2})[0]
    stale = payload(os.path.getsize(os.path.join(ref, stale_name)), 77)
    write_files(c["a"].path("run/step5"), {stale_name: stale})       # attempt 1, abandoned
    time.sleep(0.05)
    halves = split_dcp(ref, {"a": {0, 1}, "b": {2, 3}}, marker_node="a")
    write_split(c, "run/step5", {"b": halves["b"]})                  # attempt 2
    write_split(c, "run/step5", {"a": halves["a"]})                  # `.metadata` last: commits
    assert_committed_everywhere(c, "run/step5", Want.of_dir(ref))
    wait_persisted_everywhere(c, "run/step5")
    assert c.server.get(f"{c.prefix}/run/step5/{stale_name}") == read_file(os.path.join(ref, stale_name))
    c.add("c")
    assert_committed_everywhere(c, "run/step5", Want.of_dir(ref), nodes=["c"])
    dcp_load(c["c"].path("run/step5"), 4)


def test_shards_of_an_abandoned_attempt_with_more_ranks_never_enter_the_re_save(cluster, dcp_ref):
    """SPEC section 9, "one save, one step": attempt 1 of step6 ran with 6 ranks and left
    ranks 4 and 5's shards on node b; attempt 2 runs with 4 ranks, whose `.metadata`
    names only its own shards. The stale shards were committed with the step (and
    uploaded); now they stay out of it on every node, in the bucket and on a cold node."""
    c = cluster(2)
    ref, _ = dcp_ref(4)
    stale = {"__4_0.distcp": payload(3000, 4), "__5_0.distcp": payload(3000, 5)}
    write_files(c["b"].path("run/step6"), stale)                       # attempt 1, abandoned
    halves = split_dcp(ref, {"a": {0, 1}, "b": {2, 3}}, marker_node="a")
    write_split(c, "run/step6", {"b": halves["b"]})                    # attempt 2
    write_split(c, "run/step6", {"a": halves["a"]})                    # `.metadata` last: commits
    assert_committed_everywhere(c, "run/step6", Want.of_dir(ref))
    for name in stale:
        assert not os.path.exists(c["b"].path("run/step6", name)), name
    assert any(e.get("kind") == "cluster_stale_shard" for e in c["a"].events())
    wait_persisted_everywhere(c, "run/step6")
    keys = c.server.keys(f"{c.prefix}/run/step6/")
    assert not [k for k in keys if k.endswith(tuple(stale))], keys
    c.add("c")
    assert_committed_everywhere(c, "run/step6", Want.of_dir(ref), nodes=["c"])
    dcp_load(c["c"].path("run/step6"), 4)


@pytest.mark.parametrize("order", ["a_then_b", "b_then_a"])
@pytest.mark.timeout_s(180)
def test_cp_r_split_over_two_mounts_then_commit_on_b(cluster, dcp_ref, tmp_path, order):
    c = cluster(2)
    ref, _ = dcp_ref(4)
    halves = split_dcp(ref, {"a": {0, 1}, "b": {2, 3}}, marker_node="b")
    for name, files in halves.items():
        write_files(str(tmp_path / name), files)
        os.makedirs(c[name].path("run"), exist_ok=True)
    for name in (("a", "b") if order == "a_then_b" else ("b", "a")):
        r = subprocess.run(["cp", "-r", str(tmp_path / name), c[name].path("run/step7")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"cp -r into node {name}: {r.stderr}"
    r = c["b"].commit("run/step7", timeout=VISIBLE_S * 3)
    assert r.returncode == 0, f"ckptfs commit on node b: {r.stderr}"
    assert_committed_everywhere(c, "run/step7", Want.of_dir(ref))


def olmo_write_metadata(step_dir, doc):
    """OLMo-core's _save_metadata: NamedTemporaryFile in the step, fdatasync, replace."""
    import tempfile
    with tempfile.NamedTemporaryFile(dir=step_dir, delete=False) as f:
        f.write(json.dumps(doc).encode())
        f.flush()
        os.fdatasync(f.fileno())
    os.replace(f.name, os.path.join(step_dir, ".metadata.json"))


@pytest.mark.parametrize("b_renames", ["before_marker", "after_marker"])
@pytest.mark.timeout_s(180)
def test_olmo_core_per_node_tmp_dir_renames(cluster, dcp_ref, b_renames):
    """Each node's local rank 0 renames its own step20-tmp into step20; global rank 0
    (node a) then writes .metadata.json. No barrier orders node b's rename against the
    marker: both orders must commit, and b's late rename must succeed (a merge)."""
    c = cluster(2)
    ref, _ = dcp_ref(4)
    shards = split_dcp(ref, {"a": {0, 1}, "b": {2, 3}}, marker_node="a")
    by_node = {}
    for name, ranks in (("a", (0, 1)), ("b", (2, 3))):
        files = {f"train/rank{r}.pt": payload(200 * 1024 + r, 40 + r) for r in ranks}
        files.update({f"model_and_optim/{n}": d for n, d in shards[name].items() if n != ".metadata"})
        by_node[name] = files
        write_files(c[name].path("run/step20-tmp"), files)
    # DCP's finish on rank 0 (after the gather): the nested marker, no effect by itself
    meta = shards["a"][".metadata"]
    rename_into_place(c["a"].path("run/step20-tmp/model_and_optim/.metadata"), meta)
    by_node["a"]["model_and_optim/.metadata"] = meta
    # _teardown_tmp_dir: every node's local rank 0 renames its own tmp dir
    os.rename(c["a"].path("run/step20-tmp"), c["a"].path("run/step20"))
    if b_renames == "before_marker":
        os.rename(c["b"].path("run/step20-tmp"), c["b"].path("run/step20"))
    doc = {"ephemeral": False, "version": "2.1.0"}
    olmo_write_metadata(c["a"].path("run/step20"), doc)
    by_node["a"][".metadata.json"] = json.dumps(doc).encode()
    if b_renames == "after_marker":
        c["a"].wait_state("run/step20", "committed", timeout=VISIBLE_S)
        os.rename(c["b"].path("run/step20-tmp"), c["b"].path("run/step20"))  # must not fail
    assert_committed_everywhere(c, "run/step20", Want.of_files(union(by_node)))
    for name, m in c.nodes.items():
        assert "step20-tmp" not in os.listdir(m.path("run")), f"node {name}"


# ----------------------------------------------------------------------------- parts missing or late

@pytest.mark.timeout_s(180)
def test_a_part_that_never_arrives_keeps_the_step_writing_everywhere(cluster, dcp_ref):
    c = cluster(2)
    ref, _ = dcp_ref(4)
    by_node = split_dcp(ref, {"a": {0, 1}, "b": {2, 3}}, marker_node="a")
    missing = rank_files(ref, {3})[0]
    del by_node["b"][missing]
    write_split(c, "run/step9", {"b": by_node["b"]})
    write_files(c["a"].path("run/step9"), {n: d for n, d in by_node["a"].items() if n != ".metadata"})
    rename_into_place(c["a"].path("run/step9/.metadata"), by_node["a"][".metadata"])
    wait_waiting_for(c["a"], "run/step9", [missing])
    assert_never_committed(c, "run/step9", secs=2.0)
    for name, m in c.nodes.items():
        assert m.state("run/step9") == "writing", f"node {name}: {m.state('run/step9')}"
        assert not os.path.lexists(m.path("run/step9", missing)), f"node {name}"


@pytest.mark.timeout_s(180)
def test_a_slow_node_commits_when_its_part_arrives(cluster, dcp_ref):
    c = cluster(2)
    ref, _ = dcp_ref(4)
    by_node = split_dcp(ref, {"a": {0, 1}, "b": {2, 3}}, marker_node="a")
    write_files(c["a"].path("run/step11"), {n: d for n, d in by_node["a"].items() if n != ".metadata"})
    rename_into_place(c["a"].path("run/step11/.metadata"), by_node["a"][".metadata"])
    t0 = time.monotonic()
    wait_waiting_for(c["a"], "run/step11", sorted(by_node["b"]))   # names one of b's shards
    assert_never_committed(c, "run/step11", secs=max(0.0, 2.0 - (time.monotonic() - t0)))
    write_files(c["b"].path("run/step11"), by_node["b"])    # node b, 2 s late
    assert_committed_everywhere(c, "run/step11", Want.of_dir(ref))


# ----------------------------------------------------------------------------- persisted, cold mounts, gone writers

@pytest.mark.timeout_s(240)
def test_persisted_everywhere_and_a_cold_node_sees_the_step(cluster):
    c = cluster(2)
    by_node = split_plain_step()
    write_split(c, "run/step30", by_node)
    os.setxattr(c["a"].path("run/step30"), "user.ckptfs.commit", b"1")
    want = Want.of_files(union(by_node))
    # read right after the commit: another node's files may not be uploaded yet
    assert_committed_everywhere(c, "run/step30", want)
    wait_persisted_everywhere(c, "run/step30")
    e = c.add("e")                                  # a new machine: an empty cache
    assert_committed_on("e", e, "run/step30", len(want.digest), want.nbytes)
    assert e.xattr("run/step30", "user.ckptfs.persisted") == "true"
    assert_same_files("e", e, "run/step30", want)


@pytest.mark.timeout_s(240)
def test_reads_of_a_gone_nodes_files_come_from_the_remote(cluster):
    c = cluster(2)
    by_node = split_plain_step()
    write_split(c, "run/step40", by_node)
    r = c["a"].commit("run/step40")
    assert r.returncode == 0, f"ckptfs commit on node a: {r.stderr}"
    # node a reads nothing of b's before b is gone: only xattrs here
    c["a"].wait_state("run/step40", "committed", timeout=VISIBLE_S)
    wait_persisted_everywhere(c, "run/step40", nodes=["b", "a"])
    b = c["b"]
    b.umount()
    shutil.rmtree(b.cache)                          # nothing of b is left on this "machine"
    a = c["a"]
    for rel, data in by_node["b"].items():
        assert read_file(a.path("run/step40", rel)) == data, f"{rel} read on node a"
    assert_same_files("a", a, "run/step40", Want.of_files(union(by_node)))
    assert a.state("run/step40") == "committed"


def metric(m, name):
    for line in read_file(m.path(".ckptfs", "metrics")).decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no metric {name}")


@pytest.mark.timeout_s(300)
def test_a_node_past_its_inode_budget_unloads_other_nodes_steps_and_reads_them_back(cluster):
    # Every node holds every step (issue 29): node b, with room for 1,000 inodes, learns
    # 24 steps of 50 files that node a wrote. Once persisted they leave b's memory when
    # nobody uses them, and read back byte for byte from the bucket, removal included.
    c = cluster(2, "--inode-cache", "1000")
    a, b = c["a"], c["b"]
    want = {}
    for s in range(1, 25):
        files = {f"r{i:02d}.distcp": payload(100 + s * 50 + i, s * 50 + i) for i in range(50)}
        os.makedirs(a.path(f"run/step{s}"))
        for rel, data in files.items():
            write_file(a.path(f"run/step{s}", rel), data)
            want[f"run/step{s}/{rel}"] = data
        r = a.commit(f"run/step{s}")
        assert r.returncode == 0, r.stderr
    for s in range(1, 25):
        wait_persisted_everywhere(c, f"run/step{s}")
    poll(lambda: (metric(b, "ckptfs_inodes") <= 1000, metric(b, "ckptfs_inodes")), 30,
         "node b under its inode budget")
    assert metric(b, "ckptfs_lazy_step_unloads_total") > 0
    for rel, data in want.items():
        assert read_file(b.path(rel)) == data, f"{rel} read on node b"
    assert metric(b, "ckptfs_lazy_step_loads_total") > 0, "b read unloaded steps back"
    poll(lambda: (metric(b, "ckptfs_inodes") <= 1000, metric(b, "ckptfs_inodes")), 30,
         "node b under its inode budget after the reads")
    assert b.status()["cache"]["local_bytes"] == sum(map(len, want.values()))
    # rm on b of a step it had unloaded: gone everywhere, and from the bucket.
    shutil.rmtree(b.path("run/step1"))
    wait_gone_everywhere(c, "run/step1")
    poll(lambda: (not bucket_keys(c, "run/step1/"), bucket_keys(c, "run/step1/")), PERSIST_S,
         "no object left under run/step1/")
    assert read_file(b.path("run/step24/r49.distcp")) == want["run/step24/r49.distcp"]


# ----------------------------------------------------------------------------- removal and retention

def bucket_keys(c, prefix):
    return c.server.keys(f"{c.prefix}/{prefix}")


def wait_gone_everywhere(c, rel, timeout=VISIBLE_S):
    for name, m in c.nodes.items():
        poll(lambda: (not os.path.lexists(m.path(rel)), m.path(rel)), timeout, f"{rel} gone on node {name}")


@pytest.mark.timeout_s(240)
def test_rm_on_one_node_removes_the_step_everywhere_and_from_the_bucket(cluster):
    c = cluster(2)
    by_node = split_plain_step()
    write_split(c, "run/step50", by_node)
    os.setxattr(c["a"].path("run/step50"), "user.ckptfs.commit", b"1")
    want = Want.of_files(union(by_node))
    assert_committed_everywhere(c, "run/step50", want)
    wait_persisted_everywhere(c, "run/step50")
    shutil.rmtree(c["b"].path("run/step50"))       # node b is not the committer
    wait_gone_everywhere(c, "run/step50")
    poll(lambda: (not bucket_keys(c, "run/step50/"), bucket_keys(c, "run/step50/")), PERSIST_S,
         "no object left under run/step50/")
    index = bucket_keys(c, ".ckptfs-index/")
    assert any(k.endswith("step50~r.json") for k in index), index
    assert not any(k.endswith("step50~c.json") for k in index), index
    # the name saved again is a new step, not hidden by the tombstone
    by_node = {"a": {"again.bin": payload(MiB, 9)}, "b": {"again_b.bin": payload(MiB, 10)}}
    write_split(c, "run/step50", by_node)
    r = c["a"].commit("run/step50")
    assert r.returncode == 0, r.stderr
    assert_committed_everywhere(c, "run/step50", Want.of_files(union(by_node)))


@pytest.mark.timeout_s(240)
def test_a_save_of_a_name_being_removed_is_a_new_step_that_stays(cluster):
    """Issue 28, 4: `rm -rf step9` on node b while its deletions in the bucket are slow
    (b reaches the bucket through a proxy that stalls each DeleteObjects 4 s), and node a
    saves step9 again meanwhile. The new save adopted the removed step's decision (its
    new file dropped as late), `ckptfs commit` said committed, and seconds later step9
    was gone from every node and the bucket. Now the save waits until the removal is
    done, commits as a new step, and stays, with its own bytes, everywhere."""
    from fault_proxy import FaultProxy, Faults
    c = cluster(1)
    port = int(c.server.endpoint.rsplit(":", 1)[1])
    proxy = FaultProxy(port, {}).start()
    try:
        b = c.add("b", endpoint=proxy.endpoint)
        old = {"a": {"model.pt": payload(MiB, 21)}, "b": {"optim.pt": payload(MiB, 22)}}
        write_split(c, "run/step9", old)
        r = c["a"].commit("run/step9")
        assert r.returncode == 0, r.stderr
        assert_committed_everywhere(c, "run/step9", Want.of_files(union(old)))
        wait_persisted_everywhere(c, "run/step9")
        proxy.set_faults({"POST": Faults(stall=1.0, stall_s=4.0)})   # b's DeleteObjects
        shutil.rmtree(b.path("run/step9"))
        poll(lambda: (any(k.endswith("step9~r.json") for k in bucket_keys(c, ".ckptfs-index/")), None),
             VISIBLE_S, "b's tombstone of run/step9 in the index")
        wait_gone_everywhere(c, "run/step9")
        assert bucket_keys(c, "run/step9/"), "the removal is still under way"
        new = {"model.pt": payload(MiB, 31), "extra.pt": payload(MiB // 2, 32)}
        write_files(c["a"].path("run/step9"), new)
        t0 = time.monotonic()
        r = c["a"].commit("run/step9", timeout=60)
        took = time.monotonic() - t0
        assert r.returncode == 0, r.stderr
        assert took > 1.0, f"committed after {took:.2f} s, while b's deletions were stalled"
        want = Want.of_files(new)
        assert_committed_everywhere(c, "run/step9", want, latest=False)
        wait_persisted_everywhere(c, "run/step9")
        time.sleep(2 * cluster_fixture.REFRESH_S + 1)
        assert_committed_everywhere(c, "run/step9", want, latest=False)
        keys = bucket_keys(c, "run/step9/")
        for name, data in new.items():
            assert c.server.get(f"{c.prefix}/run/step9/{name}") == data, (name, keys)
        assert f"{c.prefix}/run/step9/optim.pt" not in keys, keys
    finally:
        proxy.close()


@pytest.mark.timeout_s(240)
def test_a_node_that_never_saw_the_commit_drops_the_removed_step(cluster):
    """Node b writes its part of step5, then cannot read the bucket (every GET through
    its proxy fails) while node a commits step5 and removes it: b never learns of the
    commit. Before, b kept step5 as `writing` for ever once it could read again (the
    tombstone named a step it never had committed), and a commit request there decided
    the removed step again. Now b's first look drops what it holds of the removed save,
    and nothing of step5 comes back, on any node or in the bucket."""
    from fault_proxy import FaultProxy, Faults
    c = cluster(1)
    port = int(c.server.endpoint.rsplit(":", 1)[1])
    proxy = FaultProxy(port, {}).start()
    try:
        b = c.add("b", endpoint=proxy.endpoint)
        # b's view must be known before it makes the step: a step directory made
        # while it is not (b's first refresh took longer than a lookup waits, 1 s, on
        # a loaded machine) follows whichever removal comes next, and is kept.
        os.listdir(b.path(""))
        poll(lambda: (b.status()["cluster"].get("view_known") is True, b.status()["cluster"]),
             VISIBLE_S, "node b's first refresh of the step index")
        by_node = {"a": {"model.pt": payload(MiB, 41)}, "b": {"optim.pt": payload(MiB, 42)}}
        write_split(c, "run/step5", by_node)
        part = f"{c.prefix}/run/step5/.ckptfs-parts/b.json"

        def b_part_synced():
            body = c.server.get(part)
            return bool(body) and json.loads(body).get("synced") is True, body
        poll(b_part_synced, VISIBLE_S, "node b's part of run/step5, durable, in the bucket")
        proxy.set_faults({"GET": Faults(status_5xx=1.0)})   # b reads nothing from now on
        r = c["a"].commit("run/step5")
        assert r.returncode == 0, r.stderr
        shutil.rmtree(c["a"].path("run/step5"))
        poll(lambda: (not bucket_keys(c, "run/step5/"), bucket_keys(c, "run/step5/")),
             PERSIST_S, "a's removal of run/step5 done in the bucket")
        proxy.set_faults({})
        poll(lambda: (not os.path.lexists(b.path("run/step5")), None), VISIBLE_S,
             "run/step5 gone on node b")
        assert any(e.get("kind") == "cluster_leftover" and e.get("path") == "run/step5"
                   for e in b.events()), b.events()[-5:]
        time.sleep(2 * cluster_fixture.REFRESH_S + 1)
        assert not bucket_keys(c, "run/step5/"), bucket_keys(c, "run/step5/")
        index = bucket_keys(c, ".ckptfs-index/")
        assert not any(k.endswith("step5~c.json") for k in index), index
        for name, m in c.nodes.items():
            assert not os.path.lexists(m.path("run/step5")), name
    finally:
        proxy.close()


@pytest.mark.timeout_s(180)
def test_a_node_nobody_looks_at_learns_the_commit_from_its_watch(cluster):
    """Node b's ranks close their files and go back to training: nothing on b looks
    at the step again (--refresh 3600: no lookup would read the index). Its commit
    watch finds the commit in the bucket within about 100 ms, so b seals its part
    and starts uploading without waiting for the tier's commit hold."""
    c = cluster(2, "--refresh", "3600")
    by_node = split_plain_step()
    write_split(c, "run/step70", by_node)
    assert c["b"].state("run/step70") == "writing"
    os.setxattr(c["a"].path("run/step70"), "user.ckptfs.commit", b"1")
    t0 = time.monotonic()
    poll(lambda: (any(e.get("event") == "commit" and e.get("path") == "run/step70"
                      for e in c["b"].events()), c["b"].events()[-3:]),
         10, "node b's commit event for run/step70")
    took = time.monotonic() - t0
    assert took < 5, f"node b learnt the commit after {took:.1f} s"
    watch = c["b"].status()["cluster"]["requests"]
    assert 1 <= watch["commit_watch_gets"] <= 6 * 4, watch
    assert watch["refreshes"] <= 2, watch   # the mount's and the first lookup's, none since
    assert c["b"].state("run/step70") == "committed"
    poll(lambda: (c["a"].xattr("run/step70", "user.ckptfs.persisted") == "true", None), PERSIST_S,
         "run/step70 persisted on node a")


@pytest.mark.timeout_s(240)
def test_a_committed_step_is_not_renamed_and_mv_copies_it_for_the_cluster(cluster):
    c = cluster(2)
    by_node = split_plain_step()
    write_split(c, "run/step60", by_node)
    os.setxattr(c["a"].path("run/step60"), "user.ckptfs.commit", b"1")
    want = Want.of_files(union(by_node))
    assert_committed_everywhere(c, "run/step60", want)
    # rename(2) is refused on either node, and nothing moves
    for name in ("a", "b"):
        with pytest.raises(OSError) as e:
            os.rename(c[name].path("run/step60"), c[name].path("run/step61"))
        assert e.value.errno == errno.EXDEV, e.value
    assert_committed_everywhere(c, "run/step60", want)
    # mv falls back to copy and remove: on node b, which did not commit and
    # holds half of the files, the copy reads node a's half from the bucket
    r = subprocess.run(["mv", c["b"].path("run/step60"), c["b"].path("run/step61")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    r = c["b"].commit("run/step61")
    assert r.returncode == 0, r.stderr
    assert_committed_everywhere(c, "run/step61", want)
    wait_gone_everywhere(c, "run/step60")
    poll(lambda: (not bucket_keys(c, "run/step60/"), bucket_keys(c, "run/step60/")), PERSIST_S,
         "no object left under run/step60/")
    wait_persisted_everywhere(c, "run/step61")


@pytest.mark.timeout_s(240)
def test_a_restarted_node_never_prunes_from_what_it_remembers(cluster):
    """Issue 28, 2 (SPEC section 9, retention): node b mounted with --keep-last 1, node a
    with no policy, which commits. Killed and mounted again, b ran its mount-time
    retention as a single node would, before its cluster hooks were attached: it deleted
    step1's commit object and its own shard of step1 from the bucket, wrote no tombstone,
    and every node still said step1 was persisted. Now the restart prunes nothing."""
    c = cluster(1)
    c.add("b", "--keep-last", "1")
    for name in c.nodes:
        os.makedirs(c[name].path("run"), exist_ok=True)
    steps = {}
    for i, step in enumerate(("step1", "step2")):
        by_node = {"a": {"a.bin": payload(MiB, 10 + i)}, "b": {"b.bin": payload(MiB, 20 + i)}}
        write_split(c, f"run/{step}", by_node)
        r = c["a"].commit(f"run/{step}")
        assert r.returncode == 0, r.stderr
        steps[step] = Want.of_files(union(by_node))
        assert_committed_everywhere(c, f"run/{step}", steps[step], latest=(step == "step2"))
    for step in steps:
        wait_persisted_everywhere(c, f"run/{step}")
    before = bucket_keys(c, "run/step1/")
    assert any(k.endswith("/.ckptfs-commit.json") for k in before), before

    c.kill9("b")
    c.restart("b")
    # Well past a refresh and a tier pass: nothing of step1 goes, on any node or in the bucket.
    time.sleep(5 * c.refresh + 2)
    assert bucket_keys(c, "run/step1/") == before
    for step, want in steps.items():
        assert_committed_everywhere(c, f"run/{step}", want, latest=(step == "step2"))
        for name, m in c.nodes.items():
            assert m.xattr(f"run/{step}", "user.ckptfs.persisted") == "true", (name, step)
    # A node that joins now reads step1 whole from the bucket.
    c.add("c")
    assert_committed_everywhere(c, "run/step1", steps["step1"], latest=False, nodes=["c"])


@pytest.mark.timeout_s(240)
def test_retention_is_decided_once_and_acts_on_every_node(cluster):
    c = cluster(2)
    for name in c.nodes:
        os.makedirs(c[name].path("run"), exist_ok=True)
    os.setxattr(c["a"].path("run"), "user.ckptfs.keep_last", b"1")
    for step in ("step1", "step2"):
        by_node = {"a": {"a.bin": payload(MiB, 1)}, "b": {"b.bin": payload(MiB, 2)}}
        write_split(c, f"run/{step}", by_node)
        r = c["a"].commit(f"run/{step}")
        assert r.returncode == 0, r.stderr
        assert_committed_everywhere(c, f"run/{step}", Want.of_files(union(by_node)))
    # keep_last 1 with a remote: step1 goes once step2 is persisted
    wait_persisted_everywhere(c, "run/step2")
    wait_gone_everywhere(c, "run/step1", timeout=PERSIST_S)
    poll(lambda: (not bucket_keys(c, "run/step1/"), bucket_keys(c, "run/step1/")), PERSIST_S,
         "no object left under run/step1/")
    for name, m in c.nodes.items():
        assert m.state("run/step2") == "committed", name
