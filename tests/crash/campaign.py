#!/usr/bin/python3
"""Crash campaign: kill -9 the ckptfs daemon at random points while a real DCP trainer
saves into it, restart it on the same cache, and check what SPEC section 3 promises.

    campaign.py [--rounds N] [--seed S] [--phases write,commit,upload,prune,rmrf]
                [--writer auto|dcp|emulated] [--world-size 2] [--mib 4] [--json OUT]

Run as root with /dev/fuse and a built daemon (CKPTFS_BIN, default build/ckptfs). The
mount has a file:// remote and `--keep-last 2`. Each round picks a phase and a random
kill point in it:

  write   while the trainer's shards are being written (0-250 ms after it began)
  commit  0-150 ms after the trainer's save returned (.metadata renamed into place)
  upload  0-500 ms after the step committed, while its files go to the remote
  prune   0-300 ms after a commit that made retention remove an older step
  rmrf    0-60 ms into `rm -rf` of the older committed step

After each kill the daemon restarts on the same cache and the campaign checks:
  * every step committed before the kill is still committed and byte-identical, unless
    retention (two newer committed steps) or the `rm -rf` took it; a removed step is gone,
    not left half deleted;
  * every step whose save returned before the kill is committed (or taken by retention);
  * every committed step holds exactly the reference files, byte for byte (SHA-256 of
    what the trainer wrote), so nothing partial is ever committed; `latest` is the newest;
  * uploads resume: every committed step becomes persisted;
  * `ckptfs fsck` of the unmounted cache is clean.
It prints a summary per phase and exits 1 if any check failed.
"""
import argparse
import collections
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))

from ckptfs_testlib import (CKPTFS_BIN, PYTHON, CkptfsMount, get_xattr,  # noqa: E402
                            mounted_in_proc, run_cli, torch_available)

PHASES = ("write", "commit", "upload", "prune", "rmrf")
KEEP_LAST = 2


class CheckFailed(Exception):
    pass


def sha256_tree(d):
    out = {}
    for name in sorted(os.listdir(d)):
        h = hashlib.sha256()
        with open(os.path.join(d, name), "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        out[name] = h.hexdigest()
    return out


class Trainer:
    """The dcp_trainer.py process and its lockstep protocol (see its docstring)."""

    def __init__(self, run_dir, ref_dir, ctl_dir, args):
        self.run_dir, self.ref_dir, self.ctl = run_dir, ref_dir, ctl_dir
        self.args = args
        self.proc = None
        self.log_pos = 0
        self.outcomes = {}   # step -> "saved" | "failed"
        self.begun = set()

    def start(self):
        cmd = [PYTHON, os.path.join(HERE, "dcp_trainer.py"), self.run_dir, self.ref_dir, self.ctl,
               "--world-size", str(self.args.world_size), "--mib", str(self.args.mib)]
        if self.args.writer == "emulated":
            cmd.append("--emulate")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True)

    def stop(self):
        self._token("stop")
        if self.proc is not None:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
            self.proc = None

    def _token(self, text):
        tmp = os.path.join(self.ctl, "next.tmp")
        with open(tmp, "w") as f:
            f.write(text)
        os.rename(tmp, os.path.join(self.ctl, "next"))

    def _poll(self):
        path = os.path.join(self.ctl, "log")
        if not os.path.exists(path):
            return
        with open(path) as f:
            f.seek(self.log_pos)
            data = f.read()
        complete = data[:data.rfind("\n") + 1]
        self.log_pos += len(complete)
        for line in complete.splitlines():
            word, n = line.split()[:2]
            if word == "begin":
                self.begun.add(int(n))
            else:
                self.outcomes[int(n)] = word

    def ask(self, n):
        self._token(str(n))

    def wait(self, pred, timeout, what):
        deadline = time.monotonic() + timeout
        while True:
            self._poll()
            if pred():
                return
            if self.proc.poll() is not None:
                raise CheckFailed(f"trainer exited ({self.proc.returncode}) waiting for {what}: "
                                  f"{self.proc.stderr.read().decode(errors='replace')[-2000:]}")
            if time.monotonic() > deadline:
                raise CheckFailed(f"trainer: no {what} within {timeout}s")
            time.sleep(0.002)


class Campaign:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.base = tempfile.mkdtemp(prefix="ckptfs-crash-", dir="/tmp")
        os.chmod(self.base, 0o755)
        self.remote = os.path.join(self.base, "remote")
        self.ref = os.path.join(self.base, "ref")
        self.ctl = os.path.join(self.base, "ctl")
        for d in (self.remote, self.ref, self.ctl, os.path.join(self.base, "fs")):
            os.makedirs(d)
        self.m = CkptfsMount(args=["--remote", "file://" + self.remote, "--keep-last", str(KEEP_LAST)],
                             base=os.path.join(self.base, "fs"))
        self.trainer = Trainer(self.m.path("run"), self.ref, self.ctl, args)
        self.next_step = 1
        self.committed = {}       # step -> sha256 per file, as verified while mounted
        self.saved = set()        # the trainer's save returned before this round's kill
        self.saved_total = 0
        self.removed_by_rm = set()
        self.stats = collections.defaultdict(collections.Counter)
        self.failures = []
        self.refs = {}

    # -- helpers
    def ref_of(self, n):
        if n not in self.refs:
            self.refs[n] = sha256_tree(os.path.join(self.ref, f"step{n}"))
        return self.refs[n]

    def steps_on_mount(self):
        out = {}
        run = self.m.path("run")
        if not os.path.isdir(run):
            return out
        for name in os.listdir(run):
            if name.startswith("step") and name[4:].isdigit():
                out[int(name[4:])] = get_xattr(os.path.join(run, name), "user.ckptfs.state")
        return out

    def state(self, n):
        try:
            return get_xattr(self.m.path("run", f"step{n}"), "user.ckptfs.state")
        except OSError:
            return None

    def wait_state(self, n, want, timeout=60):
        deadline = time.monotonic() + timeout
        while self.state(n) != want:
            if time.monotonic() > deadline:
                raise CheckFailed(f"step{n}: state {self.state(n)!r}, expected {want!r}")
            time.sleep(0.005)

    def save_unharmed(self):
        """One save with no kill: a committed step to build on."""
        n = self.next_step
        self.next_step += 1
        self.trainer.ask(n)
        self.trainer.wait(lambda: n in self.trainer.outcomes, 300, f"outcome of step{n}")
        if self.trainer.outcomes[n] != "saved":
            raise CheckFailed(f"step{n}: save failed with no kill")
        self.wait_state(n, "committed")
        self.committed = self.verify_committed()
        return n

    def verify_committed(self):
        """Every committed step holds exactly its reference bytes; returns their digests."""
        out = {}
        for n, st in sorted(self.steps_on_mount().items()):
            if st != "committed":
                continue
            got = sha256_tree(self.m.path("run", f"step{n}"))
            if got != self.ref_of(n):
                bad = sorted(k for k in set(got) | set(self.ref_of(n)) if got.get(k) != self.ref_of(n).get(k))
                raise CheckFailed(f"step{n} is committed with wrong or missing files: {bad[:5]}")
            out[n] = got
        return out

    # -- one round
    def kill_round(self, phase):
        n = None
        if phase in ("prune", "rmrf"):
            while len(self.committed) < KEEP_LAST:
                self.save_unharmed()
        if phase == "rmrf":
            victim = min(self.committed)
            rm = subprocess.Popen(["rm", "-rf", self.m.path("run", f"step{victim}")],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(self.rng.uniform(0, 0.06))
            self.removed_by_rm.add(victim)
            self.m.kill9()
            rm.wait(timeout=30)
        else:
            n = self.next_step
            self.next_step += 1
            self.trainer.ask(n)
            if phase == "write":
                self.trainer.wait(lambda: n in self.trainer.begun, 300, f"begin of step{n}")
                time.sleep(self.rng.uniform(0, 0.25))
            else:
                self.trainer.wait(lambda: n in self.trainer.outcomes, 300, f"outcome of step{n}")
                if self.trainer.outcomes[n] != "saved":
                    raise CheckFailed(f"step{n}: save failed before the kill")
                if phase == "commit":
                    time.sleep(self.rng.uniform(0, 0.15))
                else:
                    self.wait_state(n, "committed")
                    self.committed[n] = None   # committed before the kill; bytes checked after
                    time.sleep(self.rng.uniform(0, 0.5 if phase == "upload" else 0.3))
            self.m.kill9()
            self.trainer.wait(lambda: n in self.trainer.outcomes, 120, f"outcome of step{n}")
            if self.trainer.outcomes[n] == "saved":
                self.saved.add(n)
                self.saved_total += 1
        before = dict(self.committed)
        self.clean_mountpoint()
        self.m.start()
        self.check_after_restart(before, n)

    def clean_mountpoint(self):
        # A save interrupted by the kill may have gone on in the directory under the dead
        # mount (mkdir -p of the step): clear it, never while anything is mounted there.
        if mounted_in_proc(self.m.mnt):
            raise CheckFailed("the dead mount is still mounted")
        for name in os.listdir(self.m.mnt):
            p = os.path.join(self.m.mnt, name)
            shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)

    def check_after_restart(self, before, n):
        now = self.steps_on_mount()
        committed_now = sorted(k for k, st in now.items() if st == "committed")
        # Nothing partial committed, byte-identical: every committed step matches its reference.
        verified = self.verify_committed()

        def taken_by_retention(k):
            return len([c for c in committed_now if c > k]) >= KEEP_LAST

        for k in before:
            if k in verified:
                continue
            if k in now:
                raise CheckFailed(f"step{k} was committed before the kill and is {now[k]!r} now")
            if k not in self.removed_by_rm and not taken_by_retention(k):
                raise CheckFailed(f"step{k} was committed before the kill and is gone")
        if before:
            newest = max(before)
            if newest not in self.removed_by_rm and newest not in verified:
                raise CheckFailed(f"the newest committed step{newest} did not survive")
        for k in sorted(self.saved):
            if k in verified or (k not in now and taken_by_retention(k)) or k in self.removed_by_rm:
                continue
            raise CheckFailed(f"step{k}: the trainer's save returned before the kill, "
                              f"but the step is {now.get(k, 'gone')!r} after the restart")
        self.saved.clear()
        if committed_now:
            latest = os.readlink(self.m.path("run", "latest"))
            if latest != f"step{committed_now[-1]}":
                raise CheckFailed(f"latest -> {latest}, newest committed is step{committed_now[-1]}")
        self.committed = verified
        self.last_outcome = now.get(n) if n is not None else None
        # Uploads resume: every committed step becomes persisted.
        deadline = time.monotonic() + 120
        for k in committed_now:
            while True:
                try:
                    if get_xattr(self.m.path("run", f"step{k}"), "user.ckptfs.persisted") == "true":
                        break
                except OSError:
                    break   # retention took it meanwhile
                if time.monotonic() > deadline:
                    raise CheckFailed(f"step{k} not persisted 120 s after the restart")
                time.sleep(0.02)
        # fsck of the unmounted cache.
        self.m.umount()
        r = run_cli("fsck", self.m.cache, timeout=300)
        if r.returncode != 0:
            raise CheckFailed(f"fsck exit {r.returncode}: {r.stdout[-1500:]}{r.stderr[-500:]}")
        self.m.start()

    def run(self):
        phases = self.args.phases.split(",")
        t0 = time.monotonic()
        self.m.start()
        self.trainer.start()
        try:
            self.save_unharmed()
            for i in range(self.args.rounds):
                if self.args.budget_s and time.monotonic() - t0 > self.args.budget_s:
                    print(f"time budget reached after {i} rounds", flush=True)
                    break
                phase = phases[self.rng.randrange(len(phases))]
                self.stats[phase]["kills"] += 1
                try:
                    self.kill_round(phase)
                    self.stats[phase]["survived"] += 1
                    if phase in ("commit", "write", "upload", "prune"):
                        self.stats[phase][f"step {self.last_outcome or 'gone'}"] += 1
                except Exception as e:  # noqa: BLE001  a check, or the harness itself
                    if not isinstance(e, CheckFailed):
                        e = f"{type(e).__name__}: {e}"
                    self.failures.append(f"round {i} ({phase}): {e}")
                    print(f"FAIL round {i} ({phase}): {e}", flush=True)
                    self.stats[phase]["failed"] += 1
                    break
                if self.args.verbose:
                    print(f"round {i} {phase}: ok ({self.last_outcome})", flush=True)
        finally:
            try:
                self.trainer.stop()
            finally:
                self.m.close()
                if not mounted_in_proc(self.m.mnt):
                    shutil.rmtree(self.base, ignore_errors=True)
        self.elapsed = time.monotonic() - t0
        return not self.failures

    def summary(self):
        lines = [f"crash campaign: seed {self.args.seed}, writer {self.args.writer}, "
                 f"{sum(s['kills'] for s in self.stats.values())} kills in {self.elapsed:.0f} s"]
        for phase in PHASES:
            s = self.stats.get(phase)
            if not s:
                continue
            extra = ", ".join(f"{k}: {v}" for k, v in sorted(s.items()) if k.startswith("step "))
            lines.append(f"  {phase:7s} kills {s['kills']:3d}  survived {s['survived']:3d}  failed "
                         f"{s['failed']:2d}" + (f"  (killed step after restart: {extra})" if extra else ""))
        lines.append(f"  saves that returned before a kill: {self.saved_total}, "
                     f"all committed after the restart: {'yes' if not self.failures else 'see failures'}")
        for f in self.failures:
            lines.append("  FAILURE " + f)
        return "\n".join(lines)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--phases", default=",".join(PHASES))
    ap.add_argument("--writer", choices=("auto", "dcp", "emulated"), default="auto")
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--mib", type=int, default=4)
    ap.add_argument("--budget-s", type=float, default=0, help="stop starting rounds after this long")
    ap.add_argument("--json", help="write the summary as JSON here")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    if args.writer == "auto":
        args.writer = "dcp" if torch_available() else "emulated"
        if args.writer == "emulated":
            print("torch is not importable: emulating DCP's file sequence", flush=True)
    return args


def main(argv):
    args = parse_args(argv)
    if not os.access(CKPTFS_BIN, os.X_OK):
        print(f"no ckptfs binary at {CKPTFS_BIN} (set CKPTFS_BIN)", file=sys.stderr)
        return 2
    for phase in args.phases.split(","):
        if phase not in PHASES:
            print(f"unknown phase {phase!r} (phases: {', '.join(PHASES)})", file=sys.stderr)
            return 2
    c = Campaign(args)
    ok = c.run()
    print(c.summary(), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seed": args.seed, "writer": args.writer, "elapsed_s": round(c.elapsed, 1),
                       "phases": {p: dict(s) for p, s in c.stats.items()},
                       "saved_before_kill": c.saved_total, "failures": c.failures}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
