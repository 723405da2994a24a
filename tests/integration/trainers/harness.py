"""Test side of the trainer emulations: start a trainer "process" (driver.py: N gloo
ranks), merge what its ranks report, and check a mount against it."""
import errno
import json
import os
import signal
import subprocess
import tempfile
import time

from ckptfs_testlib import HERE, PYTHON, get_xattr

DRIVER = os.path.join(HERE, "trainers", "driver.py")
COMMIT_TIMEOUT_S = 30      # commits are asynchronous (settle time, straggler ranks, a loaded CI)


class TrainerFailed(AssertionError):
    pass


class Phase:
    """The merged reports of one trainer process's ranks."""

    def __init__(self, ranks, seconds):
        self.ranks = sorted(ranks, key=lambda r: r["rank"])
        self.seconds = seconds
        self.files = {}
        self.run_files = set()
        for r in self.ranks:
            for step, files in r["files"].items():
                self.files.setdefault(step, set()).update(files)
            self.run_files.update(r["run_files"])
        r0 = self.ranks[0]
        self.saved = r0["saved"]
        self.removed = sorted({s for r in self.ranks for s in r["removed"]})
        self.discovered = r0["discovered"]
        self.loaded = r0["loaded"]

    def rank(self, i):
        return self.ranks[i]


def run_phase(trainer, cfg, timeout=150):
    """Run one trainer process to its end; raise TrainerFailed with the ranks'
    tracebacks if any rank saw an error."""
    report_dir = tempfile.mkdtemp(prefix="ckptfs-trainer-", dir="/tmp")
    cfg = dict(cfg, report_dir=report_dir)
    cfg.setdefault("world", 2)
    cfg_path = os.path.join(report_dir, "config.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    out_path = os.path.join(report_dir, "output.txt")
    t0 = time.monotonic()
    with open(out_path, "wb") as out:
        p = subprocess.Popen([PYTHON, DRIVER, trainer, cfg_path], stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True,
                             env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = "timeout"
    seconds = time.monotonic() - t0
    with open(out_path, "rb") as f:
        output = f.read().decode(errors="replace")
    if rc != 0:
        raise TrainerFailed(f"trainer {trainer} ({cfg.get('run')}) saw an error (exit {rc}, "
                            f"{seconds:.1f}s):\n{output[-8000:]}")
    ranks = []
    for i in range(cfg["world"]):
        with open(os.path.join(report_dir, f"rank{i}.json")) as f:
            ranks.append(json.load(f))
    return Phase(ranks, seconds)


class RunLog:
    """Everything the trainer's processes did in one run directory, across phases."""

    def __init__(self):
        self.files = {}
        self.run_files = set()
        self.saved = []
        self.removed = []
        self.phases = []

    def add(self, phase):
        self.phases.append(phase)
        for step, files in phase.files.items():
            if step in phase.saved or step not in self.files:
                self.files[step] = set(files)
            else:
                self.files[step] |= files
        self.run_files |= phase.run_files
        self.saved += [s for s in phase.saved]
        self.removed += [s for s in phase.removed]
        return phase

    @property
    def alive(self):
        """Steps the trainer saved and did not remove, by its own account."""
        gone = set(self.removed)
        return sorted({s for s in self.saved if s not in gone}, key=step_number)


def step_number(name):
    digits = "".join(c if c.isdigit() else " " for c in name).split()
    return int(digits[-1]) if digits else -1


def walk_files(root):
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for n in filenames:
            p = os.path.join(dirpath, n)
            if not os.path.islink(p):
                out.add(os.path.relpath(p, root))
    return out


def wait_committed(m, rel, timeout=COMMIT_TIMEOUT_S):
    m.wait_state(rel, "committed", timeout=timeout)


def check_steps(m, run_rel, log, alive=None, timeout=COMMIT_TIMEOUT_S):
    """Every step the trainer finished and kept (or `alive`, when ckptfs prunes) is
    committed (waiting for asynchronous commits) and holds exactly the files the trainer's
    ranks wrote into it."""
    deadline = time.monotonic() + timeout
    for step in (log.alive if alive is None else alive):
        rel = f"{run_rel}/{step}"
        wait_committed(m, rel, timeout=max(1.0, deadline - time.monotonic()))
        want = log.files.get(step, set())
        got = walk_files(m.path(rel))
        assert got == want, (f"{rel}: files {sorted(got)} but the trainer wrote {sorted(want)} "
                             f"(missing {sorted(want - got)}, extra {sorted(got - want)})")
        n = m.xattr(rel, "user.ckptfs.files")
        assert n == str(len(want)), f"{rel}: user.ckptfs.files={n}, the trainer wrote {len(want)}"


def check_listing(m, run_rel, log, is_step, alive=None):
    """The run directory lists exactly the steps the trainer kept (its own pruning and
    ckptfs agree; or `alive`, what the trainer's rule keeps when ckptfs prunes) and the
    run-level files it wrote; no `latest` in the listing."""
    alive = log.alive if alive is None else alive

    def listed():
        names = set(os.listdir(m.path(run_rel)))
        return names, sorted((n for n in names if is_step(n)), key=step_number)

    names, steps = listed()
    # Steps that settle together commit in no particular order, and retention acts on each
    # commit: a step beyond the rule may still be listed until its own commit prunes it.
    deadline = time.monotonic() + COMMIT_TIMEOUT_S
    while steps != alive and time.monotonic() < deadline:
        time.sleep(0.1)
        names, steps = listed()
    if steps != alive:
        raise AssertionError(f"{run_rel}: steps listed {steps}, expected {alive} (the trainer "
                             f"saved {log.saved}, removed {log.removed}); ckptfs: "
                             f"{run_events(m, run_rel)}")
    others = names - set(steps)
    assert "latest" not in others or "latest" in log.run_files, \
        f"{run_rel}: the virtual `latest` is listed by readdir: {sorted(names)}"
    assert others == set(log.run_files), \
        f"{run_rel}: other entries {sorted(others)}, the trainer wrote {sorted(log.run_files)}"


def check_latest(m, run_rel, expected):
    """readlink(run/latest) (the virtual link) names `expected`, the trainer's own choice."""
    try:
        got = os.readlink(m.path(run_rel, "latest"))
    except OSError as e:
        got = f"<{errno.errorcode.get(e.errno, e.errno)}>"
    assert got == expected, f"{run_rel}/latest -> {got!r}, the trainer's discovery says {expected!r}"


def state_of(m, rel):
    try:
        return get_xattr(m.path(rel), "user.ckptfs.state")
    except OSError as e:
        return f"<{errno.errorcode.get(e.errno, e.errno)}>"


def run_events(m, run_rel):
    """The commit / prune / waiting events of a run (for failure messages)."""
    try:
        evs = m.events()
    except OSError as e:
        return f"<events unreadable: {e}>"
    out = []
    for e in evs:
        if str(e.get("path", "")).startswith(run_rel + "/") and e.get("event") in (
                "commit", "prune", "commit_waiting", "commit_failed", "broken"):
            out.append({k: e[k] for k in ("event", "path", "reason", "error") if k in e})
    return out
