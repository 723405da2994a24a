"""Verified reads and `fsck --crc --remote` on real mounts (issue 15, part B).

A remote object is corrupted directly in a file:// remote after its step was persisted,
as a bad disk or a corrupting upload path would leave it. A cold mount (another machine:
an empty cache on the same remote) must never serve those bytes: the read gets EIO, a
`checksum_mismatch` event names the object and the range, other files read fine. Then
`fsck --crc --remote` says which copy is bad: on the cold cache the object is lost, on the
writing machine's cache the local copy is good and `--repair` queues the re-upload that
the next mount performs.
"""
import errno
import os

import pytest

from ckptfs_testlib import read_file, run_cli, write_file
from test_remote import MiB, payload, wait_for, wait_persisted, write_step


@pytest.fixture
def remote_dir(tmp_path):
    d = tmp_path / "remote"
    d.mkdir()
    return str(d)


def flip_bit(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x10]))


@pytest.mark.timeout_s(180)
def test_a_corrupt_remote_object_is_never_served_and_fsck_names_it(make_ckptfs, remote_dir):
    remote = f"file://{remote_dir}"
    a = make_ckptfs("--remote", remote)
    files = {"big.distcp": payload(20 * MiB + 3, 1), "other.distcp": payload(5 * MiB, 2),
             "small.json": b'{"step": 10}'}
    write_step(a, "run/step10", files)
    assert a.commit("run/step10").returncode == 0
    wait_persisted(a, "run/step10")
    a.umount()
    # The bad bit is in the second 8 MiB chunk of big.distcp.
    flip_bit(os.path.join(remote_dir, "run/step10/big.distcp"), 9 * MiB + 5)

    b = make_ckptfs("--remote", remote)
    assert b.state("run/step10") == "committed"
    with open(b.path("run/step10/big.distcp"), "rb") as f:
        assert f.read(8 * MiB) == files["big.distcp"][:8 * MiB]  # the first chunk is good
        with pytest.raises(OSError) as e:
            f.read(1 * MiB)
        assert e.value.errno == errno.EIO
    for name in ("other.distcp", "small.json"):
        assert read_file(b.path("run/step10", name)) == files[name]
    bad = [e for e in b.events() if e.get("event") == "checksum_mismatch"]
    assert len(bad) == 1, bad
    assert bad[0]["key"] == "run/step10/big.distcp"
    assert bad[0]["offset"] == 8 * MiB and bad[0]["length"] == 8 * MiB
    assert bad[0]["expected"] != bad[0]["got"]
    from test_lifecycle import parse_metrics
    metrics = parse_metrics(read_file(b.path(".ckptfs", "metrics")).decode())
    # Read-ahead may meet the bad chunk before the reader does: one EIO each.
    assert metrics[("ckptfs_remote_checksum_failures_total", frozenset())] >= 1
    assert metrics[("ckptfs_remote_checksum_mismatches_total", frozenset())] >= 2  # fetched twice
    b.umount()

    # The cold cache holds no copy of big.distcp: fsck reads the remote and calls it lost.
    r = run_cli("fsck", b.cache, "--crc", "--remote", remote)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "run/step10/big.distcp" in r.stdout
    assert "remote object corrupt and no local copy" in r.stdout
    assert "bytes 8388608-16777216" in r.stdout
    # Without the remote, fsck has nothing to say about a file it holds no copy of.
    assert run_cli("fsck", b.cache, "--crc").returncode == 0

    # The writing machine's cache has the good copy: re-upload fixes the remote.
    r = run_cli("fsck", a.cache, "--crc", "--remote", remote)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "remote object corrupt (local good: re-upload fixes it)" in r.stdout
    r = run_cli("fsck", a.cache, "--crc", "--remote", remote, "--repair")
    assert r.returncode == 3, r.stdout + r.stderr
    a.start()
    wait_for(lambda: read_file(os.path.join(remote_dir, "run/step10/big.distcp")) == files["big.distcp"],
             60, "the re-upload of big.distcp")
    a.umount()
    assert run_cli("fsck", a.cache, "--crc", "--remote", remote).returncode == 0


def test_fsck_remote_needs_crc(make_ckptfs, remote_dir):
    m = make_ckptfs("--remote", f"file://{remote_dir}")
    m.umount()
    r = run_cli("fsck", m.cache, "--remote", f"file://{remote_dir}")
    assert r.returncode == 2
    assert "--crc" in r.stderr
