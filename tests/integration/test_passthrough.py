"""Kernel FUSE passthrough (issue 18) on a real mount.

With passthrough the kernel reads and writes the backing files itself: the
proof is the daemon's FUSE byte counters staying at zero while every byte is
right. The correctness tests run twice, with the default (passthrough, where
the kernel offers it) and with --passthrough off (the daemon path).
"""
import errno
import hashlib
import json
import mmap
import os
import shutil
import subprocess
import tempfile
import time

import pytest

from ckptfs_testlib import CKPTFS_BIN, get_xattr, run_cli

MIB = 1 << 20


def metrics(m):
    out = {}
    with open(m.path(".ckptfs", "metrics")) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def daemon_bytes(m):
    got = metrics(m)
    return got["ckptfs_fuse_write_bytes_total"], got["ckptfs_fuse_read_bytes_total"]


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


@pytest.fixture(params=["auto", "off", "off-no-channel"])
def mount(request, make_ckptfs):
    """A mount with passthrough as the default gives it, one with it off, and
    one with the passthrough channel not installed at all (passthrough and
    io_uring both off)."""
    args = ["--passthrough", request.param.split("-")[0]]
    if request.param == "off-no-channel":
        args += ["--io-uring", "off"]
    m = make_ckptfs(*args)
    pt = m.status()["passthrough"]
    if request.param == "auto" and not pt["active"]:
        pytest.skip(f"passthrough not available here: {pt['reason']}")
    m.passthrough = pt["active"]
    return m


def test_status_says_what_is_in_force(mount):
    pt = mount.status()["passthrough"]
    if mount.passthrough:
        assert pt == {**pt, "mode": "auto", "active": True, "reason": ""}
    else:
        assert pt["mode"] == "off" and pt["active"] is False
        assert "--passthrough off" in pt["reason"]
    events = [e for e in mount.events() if e.get("event") == "passthrough"]
    assert events and events[-1]["active"] == mount.passthrough


def test_a_step_bypasses_the_daemon_and_every_byte_is_right(mount):
    step = mount.path("run", "step1")
    os.makedirs(step)
    blobs = {f"__{r}_0.distcp": os.urandom(4 * MIB + 4096 * r + 7) for r in range(3)}
    for name, data in blobs.items():
        fd = os.open(os.path.join(step, name), os.O_CREAT | os.O_WRONLY, 0o644)
        for off in range(0, len(data), MIB):
            os.write(fd, data[off:off + MIB])
        os.fsync(fd)
        os.close(fd)
    mount.commit(step)
    assert mount.state(step) == "committed"
    assert get_xattr(step, "user.ckptfs.bytes") == str(sum(map(len, blobs.values())))
    drop_caches()
    for name, data in blobs.items():
        with open(os.path.join(step, name), "rb") as f:
            assert hashlib.sha256(f.read()).digest() == hashlib.sha256(data).digest(), name
        assert os.stat(os.path.join(step, name)).st_size == len(data)
    written, read = daemon_bytes(mount)
    if mount.passthrough:
        assert (written, read) == (0, 0), "data went through the daemon"
        assert metrics(mount)["ckptfs_passthrough_opens_total"] >= 2 * len(blobs)
    else:
        assert written == sum(map(len, blobs.values()))
        assert read >= written
    # Committed files stay read-only.
    with pytest.raises(OSError) as e:
        os.open(os.path.join(step, "__0_0.distcp"), os.O_WRONLY)
    assert e.value.errno == errno.EROFS


def test_sizes_mtimes_and_step_bytes_follow_writes_while_open(mount):
    step = mount.path("run", "step2")
    os.makedirs(step)
    path = os.path.join(step, "shard")
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.write(fd, b"a" * MIB)
        assert os.fstat(fd).st_size == MIB
        assert os.stat(path).st_size == MIB
        assert os.lseek(fd, 0, os.SEEK_END) == MIB
        assert get_xattr(step, "user.ckptfs.bytes") == str(MIB)
        before = os.stat(path).st_mtime_ns
        time.sleep(0.05)
        os.write(fd, b"b" * 100)
        st = os.stat(path)
        assert st.st_size == MIB + 100
        assert st.st_mtime_ns > before
    finally:
        os.close(fd)
    assert os.stat(path).st_size == MIB + 100
    assert get_xattr(step, "user.ckptfs.bytes") == str(MIB + 100)


def test_mixed_opens_mmap_truncate_append_and_o_direct(mount):
    step = mount.path("run", "step3")
    os.makedirs(step)
    # A writer and, while it is open, a reader and a second writer.
    path = os.path.join(step, "mixed")
    w = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(w, b"x" * 8192)
    r = os.open(path, os.O_RDONLY)
    assert os.pread(r, 8192, 0) == b"x" * 8192
    w2 = os.open(path, os.O_WRONLY)
    os.pwrite(w2, b"y" * 10, 8192)
    assert os.pread(r, 20, 8190) == b"xx" + b"y" * 10
    for fd in (w, w2, r):
        os.close(fd)
    # mmap: a shared writable mapping of a file sized with ftruncate.
    mpath = os.path.join(step, "mapped")
    fd = os.open(mpath, os.O_CREAT | os.O_RDWR, 0o644)
    os.ftruncate(fd, 2 * MIB)
    with mmap.mmap(fd, 2 * MIB) as mm:
        mm[:4] = b"head"
        mm[-4:] = b"tail"
        mm.flush()
    os.close(fd)
    with open(mpath, "rb") as f:
        data = f.read()
    assert len(data) == 2 * MIB and data[:4] == b"head" and data[-4:] == b"tail"
    # truncate by path while open, then append.
    apath = os.path.join(step, "appended")
    fd = os.open(apath, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
    os.write(fd, b"1" * 1000)
    os.truncate(apath, 10)
    os.write(fd, b"2" * 5)
    os.close(fd)
    with open(apath, "rb") as f:
        assert f.read() == b"1" * 10 + b"2" * 5
    # O_DIRECT with aligned buffers.
    dpath = os.path.join(step, "direct")
    buf = mmap.mmap(-1, MIB)
    buf.write(os.urandom(MIB))
    fd = os.open(dpath, os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o644)
    assert os.write(fd, buf) == MIB
    os.close(fd)
    fd = os.open(dpath, os.O_RDONLY | os.O_DIRECT)
    back = mmap.mmap(-1, MIB)
    assert os.readv(fd, [back]) == MIB
    os.close(fd)
    assert back[:] == buf[:]
    mount.commit(step)
    assert mount.state(step) == "committed"
    assert get_xattr(step, "user.ckptfs.bytes") == str(8202 + 2 * MIB + 15 + MIB)


def test_rename_of_open_files_and_a_commit_while_the_kernel_holds_them(mount):
    step = mount.path("run", "step4")
    os.makedirs(step)
    fd = os.open(os.path.join(step, "tmp.part"), os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b"first ")
    os.rename(os.path.join(step, "tmp.part"), os.path.join(step, "model.pt"))
    os.write(fd, b"second")
    os.close(fd)
    with open(os.path.join(step, "model.pt"), "rb") as f:
        assert f.read() == b"first second"
    # A reader keeps the file open across the commit.
    reader = os.open(os.path.join(step, "model.pt"), os.O_RDONLY)
    try:
        mount.commit(step)
        assert mount.state(step) == "committed"
        assert os.pread(reader, 100, 0) == b"first second"
    finally:
        os.close(reader)
    with open(os.path.join(step, "model.pt"), "rb") as f:
        assert f.read() == b"first second"
    if mount.passthrough:
        assert daemon_bytes(mount) == (0, 0)
        assert mount.status()["passthrough"]["files_open"] == 0


def test_kill9_with_passthrough_files_open(make_ckptfs):
    m = make_ckptfs()
    if not m.status()["passthrough"]["active"]:
        pytest.skip("passthrough not available here")
    done = m.path("run", "step1")
    os.makedirs(done)
    with open(os.path.join(done, "w.pt"), "wb") as f:
        f.write(b"c" * MIB)
    m.commit(done)
    half = m.path("run", "step2")
    os.makedirs(half)
    fds = []
    for i in range(3):
        fd = os.open(os.path.join(half, f"__{i}_0.distcp"), os.O_CREAT | os.O_RDWR, 0o644)
        os.write(fd, bytes([65 + i]) * MIB)
        os.fsync(fd)
        fds.append(fd)
    reader = os.open(os.path.join(done, "w.pt"), os.O_RDONLY)
    fds.append(reader)
    m.kill9()
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
    m.restart()
    assert m.state(done) == "committed"
    with open(os.path.join(done, "w.pt"), "rb") as f:
        assert f.read() == b"c" * MIB
    # The half-written step is not committed, and its synced data survived.
    assert m.state(half) != "committed"
    for i in range(3):
        with open(os.path.join(half, f"__{i}_0.distcp"), "rb") as f:
            assert f.read() == bytes([65 + i]) * MIB
    # The restarted daemon serves passthrough again.
    third = m.path("run", "step3")
    os.makedirs(third)
    with open(os.path.join(third, "x"), "wb") as f:
        f.write(b"z" * 1000)
    m.commit(third)
    assert m.status()["passthrough"]["active"]
    assert daemon_bytes(m) == (0, 0)


# --- a daemon without CAP_SYS_ADMIN ----------------------------------------

NOBODY = 65534


def test_writes_pay_no_security_capability_round_trip(mount):
    """Before every write() the kernel asks the daemon for
    security.capability (to drop file capabilities), unless the daemon took
    that job at INIT (FUSE_HANDLE_KILLPRIV_V2, which the passthrough channel
    accepts): then it asks once per inode, and passthrough writes reach the
    daemon not at all."""
    step = mount.path("run", "step1")
    os.makedirs(step)
    block = os.urandom(MIB)
    before = metrics(mount)["ckptfs_fuse_getxattr_requests_total"]
    fd = os.open(os.path.join(step, "x"), os.O_CREAT | os.O_WRONLY, 0o644)
    for _ in range(64):
        os.write(fd, block)
    os.close(fd)
    asked = metrics(mount)["ckptfs_fuse_getxattr_requests_total"] - before
    pt = mount.status()["passthrough"]
    # The channel is installed unless both passthrough and io_uring are off.
    assert pt["handles_killpriv"] is (mount.passthrough or mount.status()["fuse"]["io_uring"]["mode"] != "off")
    if pt["handles_killpriv"]:
        assert asked <= 2, f"{asked} GETXATTR requests for 64 writes"
    else:
        # No channel, so the kernel keeps the job, and asks on every write.
        assert asked >= 64, asked
    with open(os.path.join(step, "x"), "rb") as f:
        assert hashlib.sha256(f.read()).digest() == hashlib.sha256(block * 64).digest()


def as_nobody(*cmd):
    r = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *cmd],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"{cmd}: {r.stdout}{r.stderr}"


def test_setuid_and_setgid_bits_drop_as_linux_drops_them(mount):
    """A write or truncate by a process without CAP_FSETID drops setuid, and
    setgid where group execute is set; root's writes keep them (whether the
    kernel or, with the passthrough channel, the daemon does it)."""
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")
    run = mount.path("run")
    os.makedirs(run)
    os.chmod(run, 0o777)
    tool = os.path.join(run, "tool")
    with open(tool, "wb") as f:
        f.write(b"#!/bin/sh\n")
    os.chown(tool, NOBODY, NOBODY)
    os.chmod(tool, 0o6777)

    def bits():
        return os.stat(tool).st_mode & 0o7777

    with open(tool, "ab") as f:  # root: CAP_FSETID
        f.write(b"# root\n")
    assert bits() == 0o6777
    as_nobody("/bin/sh", "-c", f"echo '# nobody' >> {tool}")
    assert bits() == 0o0777
    # Setgid without group execute is mandatory locking, not privilege: kept.
    os.chmod(tool, 0o6767)
    as_nobody("/bin/sh", "-c", f"echo '# again' >> {tool}")
    assert bits() == 0o2767
    os.chmod(tool, 0o4777)
    as_nobody("truncate", "-s", "3", tool)
    assert bits() == 0o0777 and os.path.getsize(tool) == 3
    os.chmod(tool, 0o4777)
    as_nobody("/bin/sh", "-c", f": > {tool}")  # open(O_TRUNC)
    assert os.path.getsize(tool) == 0
    if mount.status()["passthrough"]["handles_killpriv"]:
        # The kernel marks the OPEN (FUSE_OPEN_KILL_SUIDGID) for the daemon.
        assert bits() == 0o0777
    else:
        # Without the channel the kernel keeps the job, and with atomic
        # O_TRUNC (which ckptfs negotiates) it drops its own mode change:
        # the bit stays, as on any FUSE filesystem without KILLPRIV_V2.
        assert bits() == 0o4777
    # The record says so after a restart too.
    os.chmod(tool, 0o4777)
    as_nobody("/bin/sh", "-c", f"echo x >> {tool}")
    mount.restart()
    assert bits() == 0o0777


@pytest.fixture
def unprivileged():
    """Runs commands as nobody, whose daemon mounts through fusermount3 and
    lacks CAP_SYS_ADMIN. /dev/fuse is 0666 on a stock Debian system; where
    it is not, it is made so for the test and put back."""
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")
    base = tempfile.mkdtemp(prefix="ckptfs-it-nobody-", dir="/tmp")
    os.chmod(base, 0o755)
    os.chown(base, NOBODY, NOBODY)
    mode = os.stat("/dev/fuse").st_mode & 0o777
    os.chmod("/dev/fuse", 0o666)
    mounts = []

    def run(*cmd, check=True):
        r = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                            "env", f"HOME={base}", *cmd], capture_output=True, text=True, timeout=60)
        if check:
            assert r.returncode == 0, f"{cmd} failed: {r.stdout}{r.stderr}"
        return r

    def mount(name, *args):
        mnt, cache = os.path.join(base, name), os.path.join(base, name + ".cache")
        run("mkdir", "-p", mnt, cache)
        r = run(run.binary, "mount", mnt, "--cache", cache, *args, check=False)
        if r.returncode == 0:
            mounts.append(mnt)
        return mnt, r

    # The checkout may sit where nobody cannot reach (/root/...): nobody runs
    # a copy of the daemon (it links only system libraries).
    binary = os.path.join(base, "ckptfs")
    shutil.copy2(CKPTFS_BIN, binary)
    os.chmod(binary, 0o755)
    run.binary = binary
    run.mount = mount
    try:
        yield run
    finally:
        for mnt in mounts:
            run("fusermount3", "-u", mnt, check=False)
        os.chmod("/dev/fuse", mode)
        shutil.rmtree(base, ignore_errors=True)


def test_without_cap_sys_admin_the_daemon_path_serves_and_says_why(unprivileged):
    mnt, r = unprivileged.mount("m")
    assert r.returncode == 0, r.stderr
    script = (
        "import json, os\n"
        f"m = {mnt!r}\n"
        "os.makedirs(m + '/run/step1')\n"
        "data = os.urandom(3 << 20)\n"
        "open(m + '/run/step1/x', 'wb').write(data)\n"
        "assert open(m + '/run/step1/x', 'rb').read() == data\n"
        "print(json.dumps(json.load(open(m + '/.ckptfs/status.json'))['passthrough']))\n"
    )
    out = unprivileged("/usr/bin/python3", "-c", script)
    pt = json.loads(out.stdout)
    assert pt["active"] is False
    assert "CAP_SYS_ADMIN" in pt["reason"]
    assert pt["opens"] == 0
    metrics_text = unprivileged("cat", os.path.join(mnt, ".ckptfs", "metrics")).stdout
    assert f"ckptfs_fuse_write_bytes_total {3 << 20}" in metrics_text


def test_passthrough_on_fails_the_mount_with_the_reason(unprivileged):
    mnt, r = unprivileged.mount("m", "--passthrough", "on")
    assert r.returncode == 1
    assert "--passthrough on" in r.stderr and "CAP_SYS_ADMIN" in r.stderr, r.stderr
    assert not os.path.ismount(mnt)


def test_bad_passthrough_values_are_refused():
    r = run_cli("mount", "/nonexistent", "--passthrough", "sometimes")
    assert r.returncode == 2
    assert "--passthrough takes auto, on or off" in r.stderr
