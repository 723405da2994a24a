"""Retention inside the filesystem (SPEC section 5) through a real mount: the rules
(keep_last, keep_every, keep_steps, ephemeral_every, keep_best, pins) and their union, run
directory xattr overrides and their validation, the safety rules, prune events, removal from
the namespace at once with the data deleted later by the background GC, open readers of a
pruned step, `ckptfs retention --dry-run`, and kill -9 while pruned data is still queued."""
import errno
import hashlib
import os
import time

import pytest

from ckptfs_testlib import read_file, run_cli, tree_digest, write_file
from test_lifecycle import _assert_mount_fails, commit_ok, expect_errno, make_step

GC_TIMEOUT_S = 15   # the GC runs about once a second; allow a loaded machine some slack


# --------------------------------------------------------------------------- helpers

def steps_in(m, run):
    """Step numbers listed in run directory `run` (names stepN only; `latest` ignored)."""
    out = set()
    for n in os.listdir(m.path(run)):
        if n.startswith("step") and n[4:].isdigit():
            out.add(int(n[4:]))
    return out


def commit_new(m, rel, files):
    make_step(m, rel, files)
    commit_ok(m, rel)


def data_bytes(m):
    """Total size of the backing files under CACHE/data (the daemon's local data tier)."""
    total = 0
    for dirpath, _, names in os.walk(os.path.join(m.cache, "data")):
        for n in names:
            try:
                total += os.lstat(os.path.join(dirpath, n)).st_size
            except FileNotFoundError:
                pass
    return total


def wait_data_bytes(m, expected, timeout=GC_TIMEOUT_S):
    """Poll until CACHE/data holds exactly `expected` bytes; fail with what it holds."""
    deadline = time.monotonic() + timeout
    while True:
        got = data_bytes(m)
        if got == expected:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"CACHE/data holds {got} bytes after {timeout}s, expected "
                                 f"{expected} (the data of pruned steps was not deleted)")
        time.sleep(0.1)


def prune_events(m, run=None):
    ev = [e for e in m.events() if e.get("event") == "prune"]
    if run is not None:
        ev = [e for e in ev if e.get("path", "").rsplit("/", 1)[0] == run]
    return ev


def assert_gone(m, rel):
    expect_errno(errno.ENOENT, os.stat, m.path(rel))
    expect_errno(errno.ENOENT, os.listdir, m.path(rel))
    run, name = os.path.split(rel)
    assert name not in os.listdir(m.path(run)), f"{rel} is still listed"
    st = m.step_status(rel)
    assert st is None or st["state"] == "deleted", f"status.json still shows {rel}: {st}"


def digest_of(files):
    return {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}


def parse_dry_run(out):
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert lines, "empty dry-run output"
    assert lines[0].split() == ["STEP", "NAME", "STATE", "ACTION", "REASON"], lines[0]
    rows = {}
    for ln in lines[1:]:
        parts = ln.split(None, 4)
        assert len(parts) == 5, f"dry-run row without a reason: {ln!r}"
        step, name, state, action, reason = parts
        assert action in ("keep", "remove"), ln
        rows[int(step)] = {"name": name, "state": state, "action": action, "reason": reason.strip()}
    return rows


# --------------------------------------------------------------------------- mount options

def test_invalid_retention_mount_options_fail(make_ckptfs):
    m = make_ckptfs(start=False)
    base = ["mount", m.mnt, "--cache", m.cache]
    for opt, val in [("--keep-last", "0"), ("--keep-last", "abc"), ("--keep-last", "-2"),
                     ("--keep-every", "0"), ("--keep-steps", "10,x"), ("--ephemeral-every", "1.5"),
                     ("--keep-interval", "5x"), ("--keep-interval", "0"), ("--keep-best", "none"),
                     ("--score-mode", "median")]:
        _assert_mount_fails(m, *base, opt, val, expect_in_msg=[opt.lstrip("-"), opt.lstrip("-").replace("-", "_"), val])
    m.start(args=["--keep-last", "2", "--keep-every", "10", "--keep-steps", "3,7",
                  "--ephemeral-every", "2", "--keep-interval", "6h", "--keep-best", "1",
                  "--score-mode", "max"])
    assert m.status()["steps"] == []


# --------------------------------------------------------------------------- rules

@pytest.mark.timeout_s(120)
def test_keep_last_keep_every_and_pin(make_ckptfs):
    m = make_ckptfs("--keep-last", "3", "--keep-every", "10")
    run = "run"
    written = {}
    peak = 0
    for i in range(1, 31):
        files = {"w.bin": os.urandom(4096 + i)}
        commit_new(m, f"{run}/step{i}", files)
        written[i] = files
        if i == 7:
            os.setxattr(m.path(run, "step7"), "user.ckptfs.pin", b"1")
            assert m.xattr(f"{run}/step7", "user.ckptfs.pin") == "1"
        peak = max(peak, data_bytes(m))
        assert m.latest(run) == f"step{i}"
        if i == 12:
            assert steps_in(m, run) == {7, 10, 11, 12}
        if i == 21:
            assert steps_in(m, run) == {7, 10, 19, 20, 21}
    survivors = {7, 10, 20, 28, 29, 30}
    assert steps_in(m, run) == survivors
    assert m.latest(run) == "step30"
    for i in range(1, 31):
        if i in survivors:
            assert m.state(f"{run}/step{i}") == "committed"
            assert read_file(m.path(run, f"step{i}", "w.bin")) == written[i]["w.bin"]
        else:
            assert_gone(m, f"{run}/step{i}")
    st_paths = {s["path"] for s in m.status()["steps"] if s.get("state") != "deleted"}
    assert st_paths == {f"{run}/step{i}" for i in survivors}
    pruned = prune_events(m, run)
    by_step = {}
    for e in pruned:
        assert e["path"] == f"{run}/step{e['step']}", e
        assert isinstance(e.get("reason"), str) and e["reason"], e
        by_step.setdefault(e["step"], []).append(e)
    assert set(by_step) == set(range(1, 31)) - survivors, sorted(by_step)
    assert all(len(v) == 1 for v in by_step.values()), "a step was pruned twice"
    # a pin is "1" or "0", nothing else
    expect_errno(errno.EINVAL, os.setxattr, m.path(run, "step7"), "user.ckptfs.pin", b"yes")
    assert m.xattr(f"{run}/step7", "user.ckptfs.pin") == "1"
    # the data of the 24 pruned steps is deleted from the cache in the background
    expected = sum(len(written[i]["w.bin"]) for i in survivors)
    assert peak > expected
    wait_data_bytes(m, expected)


def test_unpinned_step_goes_at_next_commit(make_ckptfs):
    m = make_ckptfs("--keep-last", "1")
    commit_new(m, "run/step1", {"a": b"1" * 1000})
    os.setxattr(m.path("run", "step1"), "user.ckptfs.pin", b"1")
    commit_new(m, "run/step2", {"a": b"2" * 1000})
    commit_new(m, "run/step3", {"a": b"3" * 1000})
    assert steps_in(m, "run") == {1, 3}
    os.setxattr(m.path("run", "step1"), "user.ckptfs.pin", b"0")
    commit_new(m, "run/step4", {"a": b"4" * 1000})
    assert steps_in(m, "run") == {4}
    assert m.latest("run") == "step4"


@pytest.mark.timeout_s(120)
def test_olmo_core_ephemeral_and_permanent(make_ckptfs):
    """OLMo-core: save_interval=10 (permanent), ephemeral_save_interval=2."""
    m = make_ckptfs("--keep-every", "10", "--ephemeral-every", "2")
    run = "run"
    for s in range(2, 51, 2):
        commit_new(m, f"{run}/step{s}", {"model.pt": os.urandom(2048)})
        expected = {k for k in range(10, s + 1, 10)} | {s}
        assert steps_in(m, run) == expected, f"after committing step{s}"
        assert m.latest(run) == f"step{s}"
        if s == 14:
            assert steps_in(m, run) == {10, 14}
    assert steps_in(m, run) == {10, 20, 30, 40, 50}
    pruned = {e["step"] for e in prune_events(m, run)}
    assert pruned == set(range(2, 51, 2)) - {10, 20, 30, 40, 50}
    wait_data_bytes(m, 5 * 2048)


def test_ephemeral_beats_keep_last(make_ckptfs):
    """An ephemeral step goes once a newer step commits, even if keep_last would keep it;
    keep_steps makes a step permanent."""
    m = make_ckptfs("--keep-last", "5", "--ephemeral-every", "3", "--keep-steps", "6")
    for s in range(1, 11):
        commit_new(m, f"run/step{s}", {"f": bytes([s]) * 100})
    # keep_last=5 keeps 6..10; 9 is ephemeral and superseded by 10; 6 is a keep_steps step;
    # 3 is ephemeral and superseded
    assert steps_in(m, "run") == {6, 7, 8, 10}
    reasons = {e["step"]: e["reason"] for e in prune_events(m, "run")}
    assert set(reasons) == {1, 2, 3, 4, 5, 9}


def test_keep_interval(make_ckptfs):
    m = make_ckptfs("--keep-interval", "2s", "--keep-last", "1")
    commit_new(m, "run/step1", {"f": b"1"})
    commit_new(m, "run/step2", {"f": b"2"})     # < 2 s after step1
    t1 = int(m.xattr("run/step1", "user.ckptfs.committed_at").split(".")[0])
    time.sleep(2.1)
    commit_new(m, "run/step3", {"f": b"3"})     # >= 2 s after step1
    commit_new(m, "run/step4", {"f": b"4"})     # < 2 s after step3, kept as the newest
    t4 = int(m.xattr("run/step4", "user.ckptfs.committed_at").split(".")[0])
    if t4 - t1 > 3:
        pytest.skip("commits too slow on this machine for a 2 s interval")
    assert steps_in(m, "run") == {1, 3, 4}
    assert {e["step"] for e in prune_events(m, "run")} == {2}


def test_retention_runs_at_mount(ckptfs):
    m = ckptfs
    for s in range(1, 6):
        commit_new(m, f"run/step{s}", {"f": bytes([s]) * 1000})
    make_step(m, "run/step6", {"f": b"6" * 1000})   # a writing step survives as incomplete
    m.restart(args=["--keep-last", "2"])
    assert steps_in(m, "run") == {4, 5, 6}
    assert m.state("run/step6") == "incomplete"
    assert m.latest("run") == "step5"
    assert {e["step"] for e in prune_events(m, "run")} == {1, 2, 3}
    wait_data_bytes(m, 3000)


def test_keep_best_mount_options_and_run_xattrs(make_ckptfs):
    m = make_ckptfs("--keep-best", "2", "--score-mode", "min")
    # run1: the mount default (min); scores set on each step before its commit
    scores = {1: 5.0, 2: 3.0, 3: 4.0, 4: 1.0, 5: 6.0, 6: 2.0, 7: 7.0, 8: 8.0}
    for s, sc in scores.items():
        make_step(m, f"run1/step{s}", {"m.pt": os.urandom(512)})
        os.setxattr(m.path("run1", f"step{s}"), "user.ckptfs.score", repr(sc).encode())
        commit_ok(m, f"run1/step{s}")
        if s == 3:
            assert steps_in(m, "run1") == {2, 3}
    # the 2 lowest scores (steps 4 and 6) and the newest (8)
    assert steps_in(m, "run1") == {4, 6, 8}
    assert m.latest("run1") == "step8"
    assert {e["step"] for e in prune_events(m, "run1")} == {1, 2, 3, 5, 7}

    # run2: score_mode=max from a run directory xattr
    os.makedirs(m.path("run2"))
    os.setxattr(m.path("run2"), "user.ckptfs.score_mode", b"max")
    expect_errno(errno.EINVAL, os.setxattr, m.path("run2"), "user.ckptfs.score_mode", b"best")
    scores2 = {1: 0.9, 2: 0.5, 3: 0.95, 4: 0.1, 5: 0.2}
    for s, sc in scores2.items():
        make_step(m, f"run2/step{s}", {"m.pt": os.urandom(512)})
        os.setxattr(m.path("run2", f"step{s}"), "user.ckptfs.score", str(sc).encode())
        commit_ok(m, f"run2/step{s}")
    assert steps_in(m, "run2") == {1, 3, 5}
    # a score must be a number
    make_step(m, "run2/step6", {"m.pt": b"x"})
    expect_errno(errno.EINVAL, os.setxattr, m.path("run2", "step6"), "user.ckptfs.score", b"good")
    expect_errno(errno.EINVAL, os.setxattr, m.path("run2", "step6"), "user.ckptfs.score", b"1.5x")
    assert m.xattr("run2/step6", "user.ckptfs.score") is None
    assert steps_in(m, "run1") == {4, 6, 8}


# --------------------------------------------------------------------------- readers

def test_open_reader_keeps_pruned_data(make_ckptfs):
    m = make_ckptfs("--keep-last", "1")
    old = os.urandom(1 << 20)
    commit_new(m, "run/step1", {"model.pt": old})
    fd = os.open(m.path("run", "step1", "model.pt"), os.O_RDONLY)
    try:
        assert os.pread(fd, 16, 0) == old[:16]
        new = os.urandom(300_000)
        commit_new(m, "run/step2", {"model.pt": new})
        assert_gone(m, "run/step1")
        assert m.latest("run") == "step2"
        assert [e["step"] for e in prune_events(m, "run")] == [1]
        time.sleep(2.5)   # a couple of GC ticks: the open file's data must survive them
        assert os.fstat(fd).st_size == len(old)
        assert os.pread(fd, len(old) + 10, 0) == old
        assert os.pread(fd, 100, 700_000) == old[700_000:700_100]
        assert data_bytes(m) == len(old) + len(new), "data of an open file was deleted"
    finally:
        os.close(fd)
    wait_data_bytes(m, len(new))
    assert read_file(m.path("run", "step2", "model.pt")) == new


# --------------------------------------------------------------------------- run-dir xattrs

def test_run_xattr_override_and_refusal(ckptfs):
    m = ckptfs
    for s in (1, 2, 3):
        commit_new(m, f"run/step{s}", {"f": bytes([s]) * 100})
    run = m.path("run")
    for bad in (b"abc", b"0", b"-1", b"2.5", b"3 "):
        n_err = len([e for e in m.events() if e.get("event") == "error"])
        expect_errno(errno.EINVAL, os.setxattr, run, "user.ckptfs.keep_last", bad)
        errs = [e for e in m.events() if e.get("event") == "error"][n_err:]
        assert errs, f"no error event for keep_last={bad!r}"
        assert any("keep_last" in str(e) for e in errs), errs
    assert m.xattr("run", "user.ckptfs.keep_last") is None
    commit_new(m, "run/step4", {"f": b"4" * 100})
    assert steps_in(m, "run") == {1, 2, 3, 4}, "an invalid keep_last was applied"
    assert prune_events(m) == []

    os.setxattr(run, "user.ckptfs.keep_last", b"2")
    assert m.xattr("run", "user.ckptfs.keep_last") == "2"
    commit_new(m, "run/step5", {"f": b"5" * 100})
    assert steps_in(m, "run") == {4, 5}
    assert {e["step"] for e in prune_events(m)} == {1, 2, 3}

    # an invalid value leaves the old policy in place
    expect_errno(errno.EINVAL, os.setxattr, run, "user.ckptfs.keep_last", b"banana")
    assert m.xattr("run", "user.ckptfs.keep_last") == "2"
    commit_new(m, "run/step6", {"f": b"6" * 100})
    assert steps_in(m, "run") == {5, 6}

    # an empty value clears the rule: nothing is pruned any more
    os.setxattr(run, "user.ckptfs.keep_last", b"")
    commit_new(m, "run/step7", {"f": b"7" * 100})
    commit_new(m, "run/step8", {"f": b"8" * 100})
    assert steps_in(m, "run") == {5, 6, 7, 8}

    # other rules are validated too
    for name, bad in (("keep_every", b"x"), ("keep_steps", b"1,,x"), ("ephemeral_every", b"0"),
                      ("keep_interval", b"soon"), ("keep_best", b"-3")):
        expect_errno(errno.EINVAL, os.setxattr, run, f"user.ckptfs.{name}", bad)
    commit_new(m, "run/step9", {"f": b"9" * 100})
    assert steps_in(m, "run") == {5, 6, 7, 8, 9}


def test_run_xattr_overrides_mount_default(make_ckptfs):
    m = make_ckptfs("--keep-last", "1")
    os.makedirs(m.path("a"))
    os.makedirs(m.path("b"))
    os.setxattr(m.path("b"), "user.ckptfs.keep_last", b"3")
    for s in range(1, 6):
        commit_new(m, f"a/step{s}", {"f": b"a" * 10})
        commit_new(m, f"b/step{s}", {"f": b"b" * 10})
    assert steps_in(m, "a") == {5}
    assert steps_in(m, "b") == {3, 4, 5}
    # the override survives a restart (it is a persistent xattr) and retention at mount
    m.restart()
    assert m.xattr("b", "user.ckptfs.keep_last") == "3"
    assert steps_in(m, "a") == {5}
    assert steps_in(m, "b") == {3, 4, 5}


# --------------------------------------------------------------------------- dry run

def test_dry_run_matches_next_commit(ckptfs, outside_dir):
    m = ckptfs
    for s in range(1, 8):
        commit_new(m, f"run/step{s}", {"f": bytes([s]) * 1000})
    os.setxattr(m.path("run", "step3"), "user.ckptfs.pin", b"1")
    os.setxattr(m.path("run", "step7"), "user.ckptfs.pin", b"1")
    os.setxattr(m.path("run"), "user.ckptfs.keep_every", b"5")   # applies at the next commit
    make_step(m, "run/step8", {"f": b"8" * 1000})                 # being written

    r = run_cli("retention", "--dry-run", m.path("run"))
    assert r.returncode == 0, r.stderr
    rows = parse_dry_run(r.stdout)
    assert set(rows) == set(range(1, 9)), r.stdout
    actions = {s: row["action"] for s, row in rows.items()}
    assert actions == {1: "remove", 2: "remove", 3: "keep", 4: "remove", 5: "keep", 6: "remove",
                       7: "keep", 8: "keep"}, r.stdout
    assert all(rows[s]["name"] == f"step{s}" for s in rows), r.stdout
    assert rows[8]["state"] == "writing" and rows[1]["state"] == "committed", r.stdout
    assert "pin" in rows[3]["reason"] and "pin" in rows[7]["reason"], r.stdout
    assert "keep_every" in rows[5]["reason"], r.stdout
    # a dry run changes nothing
    assert steps_in(m, "run") == set(range(1, 9))
    assert prune_events(m) == []

    commit_ok(m, "run/step8")
    kept = {s for s, a in actions.items() if a == "keep"}
    assert steps_in(m, "run") == kept
    ev = {e["step"]: e["reason"] for e in prune_events(m, "run")}
    assert set(ev) == {s for s, a in actions.items() if a == "remove"}
    for s, reason in ev.items():
        assert reason == rows[s]["reason"], f"step{s}: pruned for {reason!r}, dry run said {rows[s]['reason']!r}"

    # after the commit, the plan keeps everything that is left
    r = run_cli("retention", "--dry-run", m.path("run"))
    assert r.returncode == 0, r.stderr
    rows = parse_dry_run(r.stdout)
    assert set(rows) == kept and all(row["action"] == "keep" for row in rows.values()), r.stdout

    # outside a mount, and bad usage: non-zero with a message
    r = run_cli("retention", "--dry-run", outside_dir)
    assert r.returncode != 0 and r.stderr.strip()
    r = run_cli("retention", "--dry-run", os.path.join(outside_dir, "missing"))
    assert r.returncode != 0 and r.stderr.strip()
    r = run_cli("retention", m.path("run"))
    assert r.returncode != 0 and r.stderr.strip()


# --------------------------------------------------------------------------- crash safety

@pytest.mark.timeout_s(150)
def test_kill9_with_pruned_data_queued(make_ckptfs):
    """SIGKILL right after a commit that pruned a 300-file step: after restart the pruned
    step stays gone, the kept one is committed and byte-identical, and the persistent GC
    queue still deletes the pruned data."""
    m = make_ckptfs("--keep-last", "1")
    gc_was_pending = False
    step = 0
    for attempt in range(3):
        big_step = step + 1
        step = big_step + 1
        big = {f"shard_{i:03d}.bin": os.urandom(4096) for i in range(300)}
        commit_new(m, f"run/step{big_step}", big)
        kept_files = {"model.pt": os.urandom(200_000), "optim.pt": os.urandom(100_000)}
        commit_new(m, f"run/step{step}", kept_files)
        m.kill9()
        # the daemon is dead: see whether the pruned data was still queued
        pending = data_bytes(m)
        kept_bytes = sum(map(len, kept_files.values()))
        assert pending >= kept_bytes
        m.start()
        assert_gone(m, f"run/step{big_step}")
        assert steps_in(m, "run") == {step}
        assert m.state(f"run/step{step}") == "committed"
        assert m.latest("run") == f"step{step}"
        assert tree_digest(m.path("run", f"step{step}")) == digest_of(kept_files), \
            "the kept step changed across kill -9"
        expect_errno(errno.EROFS, os.open, m.path("run", f"step{step}", "model.pt"), os.O_WRONLY)
        wait_data_bytes(m, kept_bytes)
        print(f"attempt {attempt}: {pending} bytes in CACHE/data at kill -9, kept {kept_bytes}")
        if pending > kept_bytes:
            gc_was_pending = True
            break
    assert gc_was_pending, "the GC always finished before kill -9; the persistent queue was not exercised"


def test_incomplete_step_pruned_at_next_commit(ckptfs):
    m = ckptfs   # no retention policy: only the safety rule removes the incomplete step
    commit_new(m, "run/step1", {"f": b"1" * 5000})
    make_step(m, "run/step2", {"f": b"2" * 7000})
    assert m.state("run/step2") == "writing"
    m.kill9()
    m.start()
    assert m.state("run/step2") == "incomplete"      # newer than every committed step: kept
    assert m.state("run/step1") == "committed"
    assert read_file(m.path("run", "step2", "f")) == b"2" * 7000
    assert not [e for e in prune_events(m) if e["step"] == 2]

    commit_new(m, "run/step3", {"f": b"3" * 3000})
    assert_gone(m, "run/step2")
    assert steps_in(m, "run") == {1, 3}
    assert m.latest("run") == "step3"
    ev = [e for e in prune_events(m, "run") if e["step"] == 2]
    assert len(ev) == 1 and ev[0]["path"] == "run/step2", prune_events(m)
    assert "incomplete" in ev[0]["reason"], ev[0]
    wait_data_bytes(m, 5000 + 3000)
