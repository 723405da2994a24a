"""A full cache filesystem never kills the daemon (issue 15).

The cache lives on a small ext4 image mounted through a loop device, so the
disk really fills: ckptfs's own data up to --metadata-reserve (data full),
then a file written straight into the loop filesystem past the reserve
(metadata full: RocksDB's WAL gets ENOSPC). Skips when loop devices or
mkfs.ext4 are not available (containers without CAP_SYS_ADMIN)."""

import errno
import os
import shutil
import subprocess
import tempfile
import time

import pytest

from ckptfs_testlib import CkptfsMount, read_file, run_cli, write_file

IMAGE_MIB = 64


def _run(*cmd, timeout=60):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def loop_base():
    """A base directory whose cache/ is a fresh 64 MiB ext4 on a loop device."""
    if os.geteuid() != 0 or not shutil.which("mkfs.ext4") or not shutil.which("losetup"):
        pytest.skip("needs root, mkfs.ext4 and losetup")
    base = os.path.realpath(tempfile.mkdtemp(prefix="ckptfs-full-", dir="/tmp"))
    os.chmod(base, 0o755)
    image = base + ".img"
    cache = os.path.join(base, "cache")
    os.makedirs(cache)
    mounted = False
    try:
        with open(image, "wb") as f:
            f.truncate(IMAGE_MIB << 20)
        r = _run("mkfs.ext4", "-q", "-F", "-m", "0", image)
        if r.returncode != 0:
            pytest.skip(f"mkfs.ext4 failed: {r.stderr.strip()}")
        r = _run("mount", "-o", "loop", image, cache)
        if r.returncode != 0:
            pytest.skip(f"loop devices do not work here: {r.stderr.strip()}")
        mounted = True
        yield base
    finally:
        if mounted:
            for _ in range(50):
                if _run("umount", cache).returncode == 0:
                    break
                time.sleep(0.1)
            else:
                _run("umount", "-l", cache)
        shutil.rmtree(base, ignore_errors=True)
        if os.path.exists(image):
            os.unlink(image)


@pytest.fixture
def full_mount(loop_base):
    mounts = []

    def make(*args):
        m = CkptfsMount(args, base=loop_base)
        mounts.append(m)
        m.start()
        return m

    yield make
    for m in mounts:
        # close() would rmtree the base, the loop filesystem's mountpoint
        # included: only stop the daemon here, the fixture above cleans up.
        m.base = os.path.join(loop_base, "kept")
        m.close()


def fill_through(path, chunk=1 << 20, limit=IMAGE_MIB << 20):
    """Writes chunks to path until an error; returns (bytes written, errno)."""
    data = b"\xab" * chunk
    done = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while done < limit:
            try:
                n = os.write(fd, data)
            except OSError as e:
                return done, e.errno
            done += n
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
    return done, None


def fill_outside(cache):
    """Another program fills the loop filesystem to the last block."""
    path = os.path.join(cache, "filler")
    done, err = fill_through(path, chunk=64 << 10)
    assert err == errno.ENOSPC, (done, err)
    # ext4 may still hold a few partial blocks: take them too.
    fill_through(path + "2", chunk=4096)
    return [path, path + "2"]


def daemon_alive(m):
    assert m.mounted
    return m.status()


def metadata_until_error(m, tries=3000):
    """Manifest writes (mkdir with a 32 KiB xattr) until one fails; its errno.
    Large values get past RocksDB's preallocated WAL and its 16 MiB memtable,
    whose flush then needs room the disk no longer has."""
    value = b"v" * (32 << 10)
    for i in range(tries):
        try:
            d = m.path(f"meta{i}")
            os.mkdir(d)
            os.setxattr(d, "user.pad", value)
        except OSError as e:
            return e.errno
    return None


def wait_until(fn, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        try:
            if fn():
                return True
        except OSError:
            pass
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


def test_data_full_refuses_data_but_metadata_and_commits_go_on(full_mount):
    # Writes through the daemon are held at the reserve; with kernel
    # passthrough they are not (the next test).
    m = full_mount("--metadata-reserve", "16M", "--passthrough", "off")
    os.makedirs(m.path("run", "step100"))
    write_file(m.path("run", "step100", "model.bin"), b"committed" * 1000)
    # The trainer fills the disk: ENOSPC at the reserve, not at the last block.
    done, err = fill_through(m.path("run", "big"))
    assert err == errno.ENOSPC, (done, err)
    free = os.statvfs(m.cache)
    assert free.f_bavail * free.f_frsize >= 12 << 20
    with pytest.raises(OSError) as e:
        write_file(m.path("run", "new.bin"), b"x" * (2 << 20))
    assert e.value.errno == errno.ENOSPC
    # Metadata is what the reserve keeps room for.
    os.mkdir(m.path("run", "step200"))
    os.setxattr(m.path("run"), "user.note", b"still here")
    r = m.commit(m.path("run", "step100"))
    assert r.returncode == 0, r.stderr
    m.wait_state("run/step100", "committed")
    assert daemon_alive(m)["manifest"]["state"] == "ok"
    assert read_file(m.path("run", "step100", "model.bin")) == b"committed" * 1000
    # Freeing the trainer's own data makes room again at once.
    os.unlink(m.path("run", "big"))
    assert wait_until(lambda: write_file(m.path("run", "new.bin"), b"x") or True, timeout=10)


def test_passthrough_writers_fill_the_disk_and_lose_nothing_committed(full_mount):
    # The kernel writes passthrough files without the daemon: the reserve is
    # checked when a file is opened for writing, not per write
    # (docs/operations.md, "Kernel passthrough").
    m = full_mount("--metadata-reserve", "16M")
    if not m.status()["passthrough"]["active"]:
        pytest.skip("passthrough not available here")
    os.makedirs(m.path("run", "step100"))
    write_file(m.path("run", "step100", "model.bin"), b"committed" * 1000, fsync=True)
    assert m.commit(m.path("run", "step100")).returncode == 0
    m.wait_state("run/step100", "committed")
    write_file(m.path("run", "later.bin"), b"")
    done, err = fill_through(m.path("run", "big"))
    assert err == errno.ENOSPC, (done, err)
    assert m.status()["passthrough"]["opens"] >= 2
    # Within the reserve: a new file is refused, and a file opened for
    # writing now is served by the daemon, which refuses its writes.
    with pytest.raises(OSError) as e:
        write_file(m.path("run", "new.bin"), b"x" * (2 << 20))
    assert e.value.errno == errno.ENOSPC
    with pytest.raises(OSError) as e:
        with open(m.path("run", "later.bin"), "ab") as f:
            f.write(b"x" * (2 << 20))
    assert e.value.errno == errno.ENOSPC
    assert m.status()["passthrough"]["daemon_opens"].get("metadata_reserve", 0) >= 1
    assert read_file(m.path("run", "step100", "model.bin")) == b"committed" * 1000
    # Freeing the data makes room again: metadata and commits go on.
    os.unlink(m.path("run", "big"))
    assert wait_until(lambda: daemon_alive(m)["manifest"]["state"] == "ok", timeout=30)
    os.makedirs(m.path("run", "step200"))
    # The space comes back once the kernel has released the file (RELEASE
    # follows close() asynchronously, and the unlink may come first).
    assert wait_until(lambda: write_file(m.path("run", "step200", "model.bin"), b"again") or True, timeout=10)
    assert m.commit(m.path("run", "step200")).returncode == 0
    m.wait_state("run/step200", "committed")
    assert read_file(m.path("run", "step100", "model.bin")) == b"committed" * 1000


def test_metadata_full_goes_read_only_and_recovers_when_space_is_freed(full_mount):
    m = full_mount("--metadata-reserve", "8M")
    os.makedirs(m.path("run", "step100"))
    payload = os.urandom(256 << 10)
    write_file(m.path("run", "step100", "model.bin"), payload, fsync=True)
    assert m.commit(m.path("run", "step100")).returncode == 0
    m.wait_state("run/step100", "committed")

    fillers = fill_outside(m.cache)
    err = metadata_until_error(m)
    assert err == errno.ENOSPC, err
    st = daemon_alive(m)
    assert st["manifest"]["state"] == "error", st["manifest"]
    assert st["manifest"]["errno"] == "ENOSPC"
    # Read-only: changes are refused with ENOSPC; committed data reads back.
    with pytest.raises(OSError) as e:
        os.mkdir(m.path("refused"))
    assert e.value.errno == errno.ENOSPC
    assert read_file(m.path("run", "step100", "model.bin")) == payload
    # The event is in the in-memory ring (/.ckptfs/events). ckptfs.log lives on
    # the full filesystem itself, so its line lands only where the log's last
    # block had room: not asserted.
    assert any(ev.get("event") == "manifest_error" for ev in m.events())

    for p in fillers:
        os.unlink(p)
    # RocksDB resumes once its SstFileManager sees room, ckptfs retries every
    # second: no remount, no manual cleanup.
    assert wait_until(lambda: os.mkdir(m.path("after")) or True, timeout=40), m.status()["manifest"]
    assert daemon_alive(m)["manifest"]["state"] == "ok"
    assert any(ev.get("event") == "manifest_recovered" for ev in m.events())
    os.makedirs(m.path("run", "step200"))
    write_file(m.path("run", "step200", "model.bin"), b"new")
    assert m.commit(m.path("run", "step200")).returncode == 0
    m.wait_state("run/step200", "committed")
    # Everything survives a remount.
    m.umount()
    m.start()
    assert read_file(m.path("run", "step100", "model.bin")) == payload
    assert os.path.isdir(m.path("after"))
    assert m.state("run/step200") == "committed"


def test_data_and_metadata_full_then_remount_and_fsck_do_not_abort(full_mount):
    m = full_mount("--metadata-reserve", "8M")
    os.makedirs(m.path("run", "step100"))
    payload = os.urandom(128 << 10)
    write_file(m.path("run", "step100", "model.bin"), payload, fsync=True)
    assert m.commit(m.path("run", "step100")).returncode == 0
    m.wait_state("run/step100", "committed")
    # Data full through ckptfs, then metadata full from outside.
    _, err = fill_through(m.path("run", "big"))
    assert err == errno.ENOSPC
    fillers = fill_outside(m.cache)
    assert metadata_until_error(m) in (errno.ENOSPC, None)
    daemon_alive(m)
    assert read_file(m.path("run", "step100", "model.bin")) == payload

    # Stop and start again on the full disk: a clear error or a mount, never
    # an abort.
    m.umount()
    cmd = ["mount", m.mnt, "--cache", m.cache, "--metadata-reserve", "8M"]
    r = run_cli(*cmd, timeout=60)
    assert r.returncode in (0, 1), (r.returncode, r.stderr)
    assert "Assertion" not in r.stderr
    if r.returncode == 1:
        assert "full" in r.stderr, r.stderr
    else:
        m.pid = m._pid_from_status(timeout=10)
        assert read_file(m.path("run", "step100", "model.bin")) == payload
        m.umount()
    f = run_cli("fsck", m.cache, timeout=120)
    assert f.returncode in (0, 1, 2), (f.returncode, f.stdout, f.stderr)
    assert "Assertion" not in f.stderr
    assert f.returncode != 2 or "full" in f.stderr, f.stderr

    # Space back: mount and fsck work, the committed step is intact.
    for p in fillers:
        os.unlink(p)
    m.start()
    assert read_file(m.path("run", "step100", "model.bin")) == payload
    assert m.state("run/step100") == "committed"
    m.umount()
    f = run_cli("fsck", m.cache, timeout=120)
    assert f.returncode == 0, (f.stdout, f.stderr)
