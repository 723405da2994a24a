"""Crash safety: SIGKILL the daemon while a trainer writes and while a step commits, then
remount the same cache.  Committed steps must be byte-identical, uncommitted steps become
`incomplete`, nothing is deleted, a step is never committed with wrong bytes, and a step
whose marker was closed before the kill is committed by the restart.  A short run of the
crash campaign (tests/crash/campaign.py) kills a real DCP trainer's daemon at random
points across write, commit, upload, prune and rm -rf."""
import hashlib
import json
import os
import struct
import subprocess
import sys
import time

import pytest

from ckptfs_testlib import (CKPTFS_BIN, PYTHON, read_file, sha256_file, tree_digest,
                            write_file)

STEP_XATTRS = ("user.ckptfs.state", "user.ckptfs.step", "user.ckptfs.bytes",
               "user.ckptfs.files", "user.ckptfs.committed_at")


def snapshot_step(m, rel):
    return {"digest": tree_digest(m.path(rel)),
            "xattrs": {n: m.xattr(rel, n) for n in STEP_XATTRS}}


def commit_step(m, rel, files):
    d = m.path(rel)
    os.makedirs(d, exist_ok=True)
    for name, data in files.items():
        write_file(os.path.join(d, name), data)
    r = m.commit(rel)
    assert r.returncode == 0, f"ckptfs commit {rel}: {r.stderr}"
    assert m.state(rel) == "committed"
    return snapshot_step(m, rel)


def assert_step_unchanged(m, rel, snap):
    assert m.state(rel) == "committed", f"{rel} lost its committed state"
    assert tree_digest(m.path(rel)) == snap["digest"], f"{rel} bytes changed"
    assert {n: m.xattr(rel, n) for n in STEP_XATTRS} == snap["xattrs"]


_WRITER = r"""
import hashlib, os, sys
d, log = sys.argv[1], sys.argv[2]
os.makedirs(d, exist_ok=True)
logf = open(log, "a")
def note(s):
    logf.write(s + "\n"); logf.flush(); os.fsync(logf.fileno())
block = os.urandom(1 << 20)
i = 0
while True:
    name = f"shard_{i:04d}.bin"
    h = hashlib.sha256()
    with open(os.path.join(d, name), "wb") as f:
        note("open " + name)   # logged once create() succeeded
        for k in range(4):
            chunk = bytes([i % 256, k]) + block[2:]
            f.write(chunk)
            h.update(chunk)
    note(f"closed {name} {h.hexdigest()}")
    i += 1
"""


@pytest.mark.timeout_s(300)
def test_kill9_mid_write(ckptfs, outside_dir):
    m = ckptfs
    snap100 = commit_step(m, "run1/step100", {f"r{i}.bin": os.urandom(3 << 20) for i in range(3)})
    snap50 = commit_step(m, "run2/step50", {"model.pt": os.urandom(1 << 20)})
    # an abandoned writing step: all files closed, never committed
    os.makedirs(m.path("run3", "step10"))
    write_file(m.path("run3", "step10", "a.bin"), b"abandoned" * 1000)

    log = os.path.join(outside_dir, "writer.log")
    writer = subprocess.Popen([PYTHON, "-c", _WRITER, m.path("run1", "step200"), log],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            lines = open(log).read().splitlines() if os.path.exists(log) else []
            if sum(1 for x in lines if x.startswith("closed")) >= 5:
                break
            assert writer.poll() is None, f"writer died: {writer.stderr.read()!r}"
            assert time.monotonic() < deadline, "writer too slow"
            time.sleep(0.01)
        assert m.state("run1/step200") == "writing"
        m.kill9()
        try:
            writer.wait(timeout=30)
        except subprocess.TimeoutExpired:
            writer.kill()
            writer.wait(timeout=10)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(timeout=10)

    lines = open(log).read().splitlines()
    opened = [x.split()[1] for x in lines if x.startswith("open ")]
    closed = {x.split()[1]: x.split()[2] for x in lines if x.startswith("closed ")}
    assert len(closed) >= 5

    m.start()
    assert_step_unchanged(m, "run1/step100", snap100)
    assert_step_unchanged(m, "run2/step50", snap50)
    assert m.latest("run1") == "step100"
    assert m.latest("run2") == "step50"
    # the interrupted step: incomplete, every file still there
    assert m.state("run1/step200") == "incomplete"
    assert m.state("run3/step10") == "incomplete"
    present = set(os.listdir(m.path("run1", "step200")))
    missing = [n for n in opened if n not in present]
    assert not missing, f"restart deleted files of the incomplete step: {missing}"
    for name, digest in closed.items():
        assert sha256_file(m.path("run1", "step200", name)) == digest, \
            f"{name} was closed before the crash but its bytes changed"
    assert read_file(m.path("run3", "step10", "a.bin")) == b"abandoned" * 1000
    for rel in ("run1/step200", "run3/step10"):
        assert m.xattr(rel, "user.ckptfs.error"), f"{rel}: incomplete without a reason"
    assert not os.path.lexists(m.path("run3", "latest"))
    # once the user has checked the files, an explicit commit still works
    r = m.commit("run3/step10")
    assert r.returncode == 0, r.stderr
    assert m.state("run3/step10") == "committed"
    assert m.latest("run3") == "step10"
    st = {s["path"]: s for s in m.status()["steps"]}
    assert st["run1/step200"]["state"] == "incomplete"
    assert st["run1/step100"]["state"] == "committed"
    # an incomplete step is not `latest` and can be removed by the user
    subprocess.run(["rm", "-rf", m.path("run1", "step200")], check=True)
    assert not os.path.exists(m.path("run1", "step200"))
    assert m.latest("run1") == "step100"


def _safetensors(name, raw):
    header = json.dumps({name: {"dtype": "F32", "shape": [len(raw) // 4],
                                "data_offsets": [0, len(raw)]}}).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + raw


def _big_olmo_step(base_block, tag, n, size):
    """An OLMo-core safetensors-format checkpoint (spec section 3: a format the commit
    checks): n files rank_<i>.safetensors of ~`size` bytes holding the shards of one
    F32 tensor "w", and the metadata.json marker that names them."""
    files, spec = {}, {}
    numel = size // 4
    for i in range(n):
        rot = (i * 4099 + tag * 131) % len(base_block)
        data = bytearray(base_block[rot:] + base_block[:rot])
        data[:16] = hashlib.md5(f"{tag}/{i}".encode()).digest()
        files[f"rank_{i}.safetensors"] = _safetensors("w", bytes(data[:numel * 4]))
        spec[f"rank_{i}.safetensors"] = {"flattened_offsets": [[i * numel, (i + 1) * numel]],
                                         "local_shape": None, "global_offset": None}
    meta = {"tensors": {"w": {"shape": [n * numel], "is_sharded": True, "dtype": "F32",
                              "shard_spec_per_file": spec}}}
    return files, json.dumps(meta).encode()


@pytest.mark.timeout_s(600)
@pytest.mark.parametrize("trigger", ["marker", "cli"])
def test_kill9_mid_commit(ckptfs, trigger):
    m = ckptfs
    snap100 = commit_step(m, "run1/step100", {"model.pt": os.urandom(2 << 20)})
    size = 64 << 20
    block = os.urandom(size)
    outcomes = []
    for it, delay in enumerate([0.0, 0.005, 0.02, 0.04, 0.06, 0.08, 0.12, 0.3, 0.8]):
        step = 1000 + it
        rel = f"run1/step{step}"
        files, meta = _big_olmo_step(block, step, 3, size)
        sums = {n: hashlib.sha256(d).hexdigest() for n, d in files.items()}
        total = sum(len(x) for x in files.values())
        d = m.path(rel)
        os.makedirs(d)
        for n, data in files.items():
            write_file(os.path.join(d, n), data)
        cli = None
        if trigger == "marker":
            write_file(os.path.join(d, "metadata.json"), meta)
            sums["metadata.json"] = hashlib.sha256(meta).hexdigest()
            total += len(meta)
        else:
            cli = subprocess.Popen([CKPTFS_BIN, "commit", d], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE)
        time.sleep(delay)
        m.kill9()
        cli_rc = None
        if cli is not None:
            try:
                cli_rc = cli.wait(timeout=30)
            except subprocess.TimeoutExpired:
                cli.kill()
                cli.wait(timeout=10)
                pytest.fail("`ckptfs commit` hung after the daemon was killed")
        m.start()
        # Recovery finishes a commit whose trigger survived (the marker's close, a
        # `ckptfs commit` that reached the daemon): it may still be running.
        deadline = time.monotonic() + 60
        state = m.state(rel)
        while state == "writing" and time.monotonic() < deadline:
            time.sleep(0.1)
            state = m.state(rel)
        outcomes.append((delay, state, cli_rc))
        assert state in ("committed", "incomplete"), f"delay {delay}: state {state!r}"
        if trigger == "marker":
            # The marker's close() returned before the kill: recovery finishes the commit
            # (issue 15: it used to stay incomplete up to ~140 ms after the close).
            assert state == "committed", \
                f"delay {delay}: the marker was closed before the kill, but the step is {state!r} " \
                f"({m.xattr(rel, 'user.ckptfs.error')!r})"
        if cli_rc == 0:
            assert state == "committed", \
                f"`ckptfs commit` exited 0 but the step was not committed after the crash"
        present = set(os.listdir(d))
        assert set(sums) <= present, f"delay {delay}: files deleted: {set(sums) - present}"
        if state == "committed":
            got = {n: sha256_file(os.path.join(d, n)) for n in sums}
            assert got == sums, f"delay {delay}: committed with wrong bytes"
            assert m.xattr(rel, "user.ckptfs.bytes") == str(total)
            assert m.xattr(rel, "user.ckptfs.files") == str(len(sums))
            assert m.latest("run1") == f"step{step}"
        else:
            assert m.latest("run1") != f"step{step}"
        assert_step_unchanged(m, "run1/step100", snap100)
    print("kill -9 mid-commit outcomes (delay, state, cli rc):", outcomes)


@pytest.mark.timeout_s(300)
def test_crash_campaign_short(ckptfs_bin):
    """8 random kill -9 points of tests/crash/campaign.py (the long run's figures are in
    docs/crash-testing.md). CKPTFS_CRASH_SEED picks another seed."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "crash"))
    import campaign

    seed = int(os.environ.get("CKPTFS_CRASH_SEED", "15"))
    args = campaign.parse_args(["--rounds", "8", "--seed", str(seed), "--budget-s", "150"])
    c = campaign.Campaign(args)
    ok = c.run()
    print(c.summary())
    assert ok, c.summary()
    assert sum(s["survived"] for s in c.stats.values()) >= 4, c.summary()
