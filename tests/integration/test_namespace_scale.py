"""A large cache mounted again (issue 29): a remount reads committed steps only when something
looks inside them, and everything reads back as written: the tree, the bytes, the inode
numbers, the steps' states and `latest`, after an unmount and after a kill -9; rm -rf of a
step nobody looked at since the remount removes it for good."""
import os
import shutil
import time

from ckptfs_testlib import read_file, write_file

STEPS = 40
FILES = 100


def metric(m, name):
    for line in read_file(m.path(".ckptfs", "metrics")).decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no metric {name}")


def step_name(n):
    return f"step{n:03d}"


def build(m):
    """run/step001..step040 committed (FILES files + sub/ with 2 files each), step041 not."""
    want = {}
    for n in range(1, STEPS + 1):
        step = m.path("run", step_name(n))
        os.makedirs(os.path.join(step, "sub"))
        for i in range(FILES):
            rel = f"run/{step_name(n)}/f{i:03d}"
            want[rel] = f"{rel} {n * i}".encode()
        for i in range(2):
            want[f"run/{step_name(n)}/sub/g{i}"] = f"deep {n} {i}".encode() * 50
        for rel, data in want.items():
            if rel.startswith(f"run/{step_name(n)}/"):
                write_file(m.path(rel), data)
        r = m.commit(f"run/{step_name(n)}")
        assert r.returncode == 0, r.stderr
    os.makedirs(m.path("run", step_name(STEPS + 1)))
    for i in range(3):
        rel = f"run/{step_name(STEPS + 1)}/part{i}"
        want[rel] = b"not committed"
        write_file(m.path(rel), want[rel])
    return want


def tree(m):
    """{relpath: bytes} of every file below run/ (the `latest` link not followed)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(m.path("run")):
        dirnames[:] = [d for d in dirnames if d != ".full"]
        for f in filenames:
            p = os.path.join(dirpath, f)
            if os.path.islink(p):
                continue
            out[os.path.relpath(p, m.mnt)] = read_file(p)
    return out


def test_a_large_cache_reads_back_as_written_after_a_remount_and_a_kill(make_ckptfs):
    m = make_ckptfs()
    want = build(m)
    sample = {rel: os.stat(m.path(rel)).st_ino for rel in list(want)[::97]}
    f042 = f"run/{step_name(7)}/f042"
    sample[f042] = os.stat(m.path(f042)).st_ino
    m.umount()

    m.start()
    # The root, the run, its 41 steps and the writing step's 3 files: nothing of the
    # committed steps' 4,080 entries until something looks inside one.
    assert metric(m, "ckptfs_inodes") < 60
    assert sorted(os.listdir(m.path("run"))) == [step_name(n) for n in range(1, STEPS + 2)]
    for n in range(1, STEPS + 1):
        assert m.state(f"run/{step_name(n)}") == "committed"
    # Not committed when the daemon stopped (SPEC section 3): loaded at mount, as recovery
    # must see it.
    assert m.state(f"run/{step_name(STEPS + 1)}") == "incomplete"
    assert metric(m, "ckptfs_inodes") < 60, "states and the listing of the run read no step"
    assert metric(m, "ckptfs_lazy_step_loads_total") == 0
    # `latest` reads the newest step (a DeepSpeed run's shards there turn the link off).
    assert m.latest("run") == step_name(STEPS)
    assert metric(m, "ckptfs_lazy_step_loads_total") == 1

    assert os.stat(m.path(f042)).st_ino == sample[f042]
    assert metric(m, "ckptfs_lazy_step_loads_total") == 2
    assert tree(m) == want
    for rel, ino in sample.items():
        assert os.stat(m.path(rel)).st_ino == ino, rel
    assert metric(m, "ckptfs_lazy_step_loads_total") == STEPS

    # kill -9: the committed steps come back whole, unloaded again.
    write_file(m.path("run", step_name(STEPS + 1), "part0"), b"rewritten")
    want[f"run/{step_name(STEPS + 1)}/part0"] = b"rewritten"
    m.kill9()
    m.start()
    assert metric(m, "ckptfs_inodes") < 60
    assert m.state(f"run/{step_name(STEPS + 1)}") == "incomplete"
    for n in range(1, STEPS + 1):
        assert m.state(f"run/{step_name(n)}") == "committed"
    assert m.latest("run") == step_name(STEPS)

    # rm -rf of a step nobody looked at since the restart: gone, and stays gone.
    shutil.rmtree(m.path("run", step_name(1)))
    assert not os.path.exists(m.path("run", step_name(1)))
    m.umount()
    m.start()
    assert not os.path.exists(m.path("run", step_name(1)))
    del_prefix = f"run/{step_name(1)}/"
    assert tree(m) == {k: v for k, v in want.items() if not k.startswith(del_prefix)}
    for rel, ino in sample.items():
        if not rel.startswith(del_prefix):
            assert os.stat(m.path(rel)).st_ino == ino, rel
    m.umount()


def wait_metric_at_most(m, name, bound, timeout=15):
    """The metric falls to bound or below within timeout seconds (the unloader runs on
    the daemon's one-second idle tick); its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = metric(m, name)
        if value <= bound or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


def test_a_mount_past_its_inode_budget_unloads_idle_steps_and_reads_them_back(make_ckptfs):
    # 40 steps of 102 entries against a budget of 1,000 inodes: steps nobody uses go
    # back to the manifest (the kernel asked to drop them first), and come back with
    # the same numbers and bytes, while written, after a full walk and after a remount.
    m = make_ckptfs("--inode-cache", "1000")
    want = build(m)
    # The steps this mount committed are unloaded too. The writing step (3 files) and
    # whatever the kernel still holds stay.
    assert wait_metric_at_most(m, "ckptfs_inodes", 1000) <= 1000
    assert metric(m, "ckptfs_lazy_step_unloads_total") > 0
    sample = {rel: os.stat(m.path(rel)).st_ino for rel in list(want)[::89]}
    with open(m.path("run", step_name(3), "f007"), "rb") as held:
        assert tree(m) == want
        assert wait_metric_at_most(m, "ckptfs_inodes", 1000) <= 1000
        # The open file's step stayed; the file reads on.
        assert held.read() == want[f"run/{step_name(3)}/f007"]
    for rel, ino in sample.items():
        assert os.stat(m.path(rel)).st_ino == ino, rel
    for n in range(1, STEPS + 1):
        assert m.state(f"run/{step_name(n)}") == "committed"
    assert m.latest("run") == step_name(STEPS)
    assert metric(m, "ckptfs_lazy_step_loads_total") > 0, "the walk read unloaded steps back"

    m.umount()
    m.start()
    assert tree(m) == want
    assert wait_metric_at_most(m, "ckptfs_inodes", 1000) <= 1000
    for rel, ino in sample.items():
        assert os.stat(m.path(rel)).st_ino == ino, rel
    m.umount()


def test_a_remote_mount_unloads_persisted_steps_and_still_counts_their_data(make_ckptfs, tmp_path):
    # The same run on a file:// remote: once persisted, idle steps leave memory past the
    # budget as on a local mount, the cache's figures still count their data (local and
    # evictable), and they read back as written, with the same numbers; a remount leaves
    # them in the manifest from the start.
    remote = tmp_path / "remote"
    remote.mkdir()
    m = make_ckptfs("--remote", f"file://{remote}", "--inode-cache", "1000")
    want = build(m)
    committed = sum(len(data) for rel, data in want.items()
                    if not rel.startswith(f"run/{step_name(STEPS + 1)}/"))
    deadline = time.monotonic() + 120
    for n in range(1, STEPS + 1):
        while m.xattr(f"run/{step_name(n)}", "user.ckptfs.persisted") != "true":
            assert time.monotonic() < deadline, f"{step_name(n)} not persisted"
            time.sleep(0.1)
    assert wait_metric_at_most(m, "ckptfs_inodes", 1000) <= 1000
    assert metric(m, "ckptfs_lazy_step_unloads_total") > 0
    cache = m.status()["cache"]
    assert cache["evictable_bytes"] == committed, cache
    assert cache["local_bytes"] == committed + 3 * len(b"not committed"), cache
    sample = {rel: os.stat(m.path(rel)).st_ino for rel in list(want)[::89]}
    assert tree(m) == want
    assert metric(m, "ckptfs_lazy_step_loads_total") > 0, "the walk read unloaded steps back"
    assert wait_metric_at_most(m, "ckptfs_inodes", 1000) <= 1000
    for rel, ino in sample.items():
        assert os.stat(m.path(rel)).st_ino == ino, rel
    assert m.latest("run") == step_name(STEPS)
    m.umount()
    m.start()
    # Lazy at mount too: the root, the run, its step directories and the step not
    # committed are in memory; the persisted steps stay in the manifest, and the
    # background check finds what they hold without loading them.
    assert metric(m, "ckptfs_lazy_step_loads_total") == 0
    assert metric(m, "ckptfs_inodes") < 2 * STEPS, metric(m, "ckptfs_inodes")
    deadline = time.monotonic() + 30
    while m.status()["cache"]["local_bytes"] != committed + 3 * len(b"not committed"):
        assert time.monotonic() < deadline, m.status()["cache"]
        time.sleep(0.1)
    assert m.status()["cache"]["evictable_bytes"] == committed
    assert metric(m, "ckptfs_lazy_step_loads_total") == 0
    assert tree(m) == want
    assert metric(m, "ckptfs_lazy_step_loads_total") >= STEPS
    for rel, ino in sample.items():
        assert os.stat(m.path(rel)).st_ino == ino, rel
