"""`ckptfs fsck` on a real cache: clean after a commit and an unmount; a truncated committed
file and an unowned backing file are reported (exit 1) and a check changes nothing;
--repair removes only the unowned file and keeps the committed step's record; a cache in
use by a mounted daemon is refused (exit 2) with the mountpoint in the message."""
import json
import os

from ckptfs_testlib import read_file, run_cli, write_file


def backing_files(cache):
    """{name: size} of the backing files in CACHE/data."""
    d = os.path.join(cache, "data")
    return {n: os.path.getsize(os.path.join(d, n)) for n in os.listdir(d)}


def fsck(cache, *args):
    return run_cli("fsck", cache, *args, timeout=120)


def test_fsck_reports_and_repairs_a_damaged_cache(make_ckptfs):
    m = make_ckptfs()
    os.makedirs(m.path("run1", "step100"))
    model = os.urandom(8192)
    optim = os.urandom(1000)
    write_file(m.path("run1", "step100", "model.pt"), model)
    write_file(m.path("run1", "step100", "optim.pt"), optim)
    r = m.commit("run1/step100")
    assert r.returncode == 0, r.stderr
    ino = os.stat(m.path("run1", "step100", "model.pt")).st_ino

    # In use: refused, with where it is mounted, and nothing is touched.
    r = fsck(m.cache)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "in use by a running ckptfs" in r.stderr and m.mnt in r.stderr, r.stderr
    assert "unmount first" in r.stderr
    r = fsck(m.cache, "--repair")
    assert r.returncode == 2, r.stdout + r.stderr
    assert read_file(m.path("run1", "step100", "model.pt")) == model

    m.umount()
    r = fsck(m.cache)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().splitlines()[-1] == \
        "fsck: 2 files, 1 steps checked; 0 errors, 0 warnings, 0 repaired", r.stdout

    # Damage: the committed model.pt loses its second half; a stray backing file appears.
    name = f"{ino:016x}"
    assert backing_files(m.cache)[name] == 8192
    with open(os.path.join(m.cache, "data", name), "r+b") as f:
        f.truncate(4096)
    stray = os.path.join(m.cache, "data", f"{0xabcdef:016x}")
    write_file(stray, b"left by a crash")

    r = fsck(m.cache)
    assert r.returncode == 1, r.stdout + r.stderr
    assert (f"error: run1/step100/model.pt: backing file {name} is 4096 bytes, manifest says 8192 "
            "(committed data lost: restore from the remote or delete the step)") in r.stdout, r.stdout
    assert f"warning: data/{0xabcdef:016x}: backing file with no inode" in r.stdout, r.stdout
    assert "1 errors, 1 warnings, 0 repaired" in r.stdout, r.stdout
    assert os.path.exists(stray), "a check without --repair removed a file"

    r = fsck(m.cache, "--json")
    assert r.returncode == 1, r.stderr
    report = json.loads(r.stdout)
    assert (report["errors"], report["warnings"], report["repaired"]) == (1, 1, 0)
    assert report["exit_code"] == 1 and report["counts"]["files"] == 2
    paths = {f["path"]: f for f in report["findings"]}
    assert paths["run1/step100/model.pt"]["severity"] == "error"
    assert paths["run1/step100/model.pt"]["repair"] == ""

    r = fsck(m.cache, "--repair")
    assert r.returncode == 1, r.stdout + r.stderr  # the lost data remains
    assert not os.path.exists(stray)
    assert "(repaired: remove it, as the next mount would)" in r.stdout, r.stdout
    assert "1 errors, 1 warnings, 1 repaired" in r.stdout, r.stdout
    assert backing_files(m.cache)[name] == 4096

    # Idempotent: a second repair finds only what it must not repair.
    r = fsck(m.cache, "--repair", "--json")
    report = json.loads(r.stdout)
    assert r.returncode == 1
    assert (report["errors"], report["warnings"], report["repaired"]) == (1, 0, 0), report
    assert report["findings"][0]["path"] == "run1/step100/model.pt"

    # The step was kept: the mount marks it broken (its background check of the committed
    # steps a restart leaves unloaded, within a second or two) and keeps every byte left.
    m.start()
    m.wait_state("run1/step100", "broken", timeout=20)
    assert read_file(m.path("run1", "step100", "optim.pt")) == optim
    m.umount()


def test_fsck_refuses_what_is_not_a_cache(ckptfs_bin, outside_dir):
    r = fsck(outside_dir)
    assert r.returncode == 2
    assert "not a ckptfs cache directory" in r.stderr, r.stderr
    assert os.listdir(outside_dir) == [], "fsck created files in a directory that is no cache"
    r = fsck(os.path.join(outside_dir, "missing"))
    assert r.returncode == 2 and "No such file or directory" in r.stderr, r.stderr
    r = run_cli("fsck", outside_dir, "--bogus")
    assert r.returncode == 2 and "unknown option" in r.stderr
    r = run_cli("fsck", "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: ckptfs fsck CACHE_DIR"), r.stdout
    r = run_cli("--help")
    assert "ckptfs fsck CACHE_DIR" in r.stdout
