"""FUSE over io_uring (issue 29: small files at speed) on a real mount.

The kernel offers io_uring only while the fuse module's enable_uring parameter is set;
these tests set it for their own mounts and put it back. The proof that requests took the
rings is status.json's count of requests served through them, which a mount that fell back
to /dev/fuse leaves at zero. The whole of test_posix.py and test_passthrough.py also runs
over io_uring in the suite's 'integration-io-uring' test (tests/meson.build).
"""
import hashlib
import os
import shutil
import signal
import subprocess
import time

import pytest

from ckptfs_testlib import CKPTFS_BIN, MountError, read_file, tree_digest, write_file

PARAM = "/sys/module/fuse/parameters/enable_uring"


def _set(value):
    with open(PARAM, "w") as f:
        f.write(value + "\n")


@pytest.fixture
def uring_param():
    """Sets enable_uring for the test; yields a setter; restores it afterwards."""
    if not os.path.exists(PARAM):
        pytest.skip(f"this kernel has no FUSE over io_uring ({PARAM} is missing; Linux 6.14+ "
                    "built with CONFIG_FUSE_IO_URING)")
    with open(PARAM) as f:
        was = f.read().strip()
    _set("Y")
    yield _set
    _set(was)


def ring_requests(m):
    return m.status()["fuse"]["io_uring"].get("requests", 0)


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def test_a_step_of_small_files_goes_through_the_rings_and_commits(uring_param, make_ckptfs):
    m = make_ckptfs()
    fuse = m.status()["fuse"]
    assert fuse["transport"] == "io_uring", fuse
    assert fuse["io_uring"]["active"] and fuse["io_uring"]["mode"] == "auto"
    before = ring_requests(m)

    step = m.path("run", "step10")
    os.makedirs(step)
    files = {}
    for i in range(400):
        data = os.urandom(1024 + i)
        write_file(os.path.join(step, f"rank{i:03d}.pt"), data)
        files[f"rank{i:03d}.pt"] = data
    # Namespace operations with argument structs and names of every shape.
    os.rename(os.path.join(step, "rank000.pt"), os.path.join(step, "renamed.pt"))
    files["renamed.pt"] = files.pop("rank000.pt")
    os.symlink("renamed.pt", os.path.join(step, "link"))
    assert os.readlink(os.path.join(step, "link")) == "renamed.pt"
    os.setxattr(os.path.join(step, "renamed.pt"), "user.note", b"x" * 300)
    assert os.getxattr(os.path.join(step, "renamed.pt"), "user.note") == b"x" * 300
    assert "user.note" in os.listxattr(os.path.join(step, "renamed.pt"))
    os.truncate(os.path.join(step, "rank001.pt"), 10)
    files["rank001.pt"] = files["rank001.pt"][:10]
    os.chmod(os.path.join(step, "rank002.pt"), 0o600)
    os.unlink(os.path.join(step, "rank003.pt"))
    del files["rank003.pt"]
    os.unlink(os.path.join(step, "link"))
    # A listing of 400 entries with their attributes (READDIRPLUS replies fill the payload).
    with os.scandir(step) as it:
        listed = {e.name: e.stat().st_size for e in it}
    assert listed == {name: len(data) for name, data in files.items()}

    r = m.commit(step)
    assert r.returncode == 0, r.stderr
    assert m.state(step) == "committed"
    for name, data in files.items():
        assert read_file(os.path.join(step, name)) == data, name
    served = ring_requests(m) - before
    # Each file took at least a LOOKUP, a CREATE and a RELEASE.
    assert served >= 3 * 400, m.status()["fuse"]
    assert m.status()["fuse"]["io_uring"]["entries_used"] >= 1

    digest = tree_digest(m.path("run"))
    m.restart()
    assert m.status()["fuse"]["transport"] == "io_uring"
    assert tree_digest(m.path("run")) == digest
    assert m.state(step) == "committed"


def test_reads_and_writes_served_by_the_daemon_go_through_the_rings(uring_param, make_ckptfs):
    # Without passthrough every byte is a WRITE or READ request: large payloads both ways,
    # and reads that libfuse would splice into /dev/fuse.
    m = make_ckptfs("--passthrough", "off")
    assert m.status()["fuse"]["transport"] == "io_uring"
    data = os.urandom(9 * (1 << 20) + 12345)
    path = m.path("run", "step1", "model.pt")
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        for at in range(0, len(data), 1 << 20):
            f.write(data[at:at + (1 << 20)])
    before = ring_requests(m)
    drop_caches()
    assert hashlib.sha256(read_file(path)).digest() == hashlib.sha256(data).digest()
    with open(path, "rb") as f:
        f.seek(5 * (1 << 20) + 7)
        assert f.read(4096) == data[5 * (1 << 20) + 7:5 * (1 << 20) + 7 + 4096]
    assert ring_requests(m) - before >= 9 * (1 << 20) // (128 << 10)


def test_io_uring_off_keeps_dev_fuse(uring_param, make_ckptfs):
    m = make_ckptfs("--io-uring", "off")
    fuse = m.status()["fuse"]
    assert fuse["transport"] == "/dev/fuse"
    assert fuse["io_uring"]["active"] is False
    assert "--io-uring off" in fuse["io_uring"]["reason"]
    write_file(m.path("a"), b"hello")
    assert read_file(m.path("a")) == b"hello"
    out = subprocess.run([CKPTFS_BIN, "status", m.mnt], capture_output=True, text=True, timeout=30)
    assert "fuse transport: /dev/fuse" in out.stdout, out.stdout


def test_io_uring_on_fails_the_mount_where_the_kernel_does_not_offer_it(uring_param, make_ckptfs):
    uring_param("N")
    m = make_ckptfs(start=False)
    with pytest.raises(MountError) as err:
        m.start(args=["--io-uring", "on"])
    assert "--io-uring on" in str(err.value) and "enable_uring" in str(err.value), err.value
    assert not os.path.ismount(m.mnt)
    # auto falls back to /dev/fuse and says why.
    m.start(args=[])
    fuse = m.status()["fuse"]
    assert fuse["transport"] == "/dev/fuse" and "enable_uring" in fuse["io_uring"]["reason"]
    out = subprocess.run([CKPTFS_BIN, "status", m.mnt], capture_output=True, text=True, timeout=30)
    assert "fuse transport: /dev/fuse (io_uring: the kernel does not offer" in out.stdout, out.stdout


@pytest.mark.timeout_s(120)
def test_a_daemon_killed_while_ranks_write_loses_nothing_committed(uring_param, make_ckptfs):
    m = make_ckptfs()
    assert m.status()["fuse"]["transport"] == "io_uring"
    done = m.path("run", "step1")
    os.makedirs(done)
    for i in range(50):
        write_file(os.path.join(done, f"f{i}"), bytes([i]) * 2048)
    assert m.commit(done).returncode == 0
    digest = tree_digest(done)
    # A writer keeps creating small files in the next step while the daemon dies.
    writer = subprocess.Popen(
        ["python3", "-c",
         "import os,sys\n"
         "d=sys.argv[1]; os.makedirs(d, exist_ok=True)\n"
         "i=0\n"
         "while True:\n"
         "    try:\n"
         "        open(os.path.join(d,'f%d'%i),'wb').write(b'y'*1024)\n"
         "    except OSError as e:\n"
         "        print(e.errno); break\n"
         "    i+=1\n",
         m.path("run", "step2")],
        stdout=subprocess.PIPE, text=True)
    time.sleep(1.0)
    m.kill9()
    out, _ = writer.communicate(timeout=30)  # fails with an errno, never hangs
    assert out.strip(), "the writer saw no error"
    m.start()
    assert m.state(done) == "committed"
    assert tree_digest(m.path("run", "step1")) == digest
    assert m.state(m.path("run", "step2")) != "committed"


def test_unmount_ends_the_daemon_promptly(uring_param, make_ckptfs):
    m = make_ckptfs()
    assert m.status()["fuse"]["transport"] == "io_uring"
    os.makedirs(m.path("d"))
    for i in range(20):
        write_file(m.path("d", str(i)), b"z")
    pid = m.pid
    t = time.monotonic()
    m.umount(timeout=20)
    assert time.monotonic() - t < 10
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    shutil.rmtree(m.base, ignore_errors=True)


def test_one_sigterm_ends_a_daemon_serving_over_io_uring(uring_param, make_ckptfs):
    # The ring threads block signals, as libfuse's workers do: a SIGTERM they took
    # would never reach libfuse's loop. Several rounds, since the kernel picks a thread.
    for _ in range(3):
        m = make_ckptfs()
        assert m.status()["fuse"]["transport"] == "io_uring"
        os.makedirs(m.path("run", "step1"))
        write_file(m.path("run", "step1", "a"), b"a")
        pid = m.pid
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().split()[2] == "Z":
                        break
            except FileNotFoundError:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the daemon did not end within 15 s of one SIGTERM")
        m.close()
