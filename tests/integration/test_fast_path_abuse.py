"""A writer fast-path client that misbehaves (SPEC section 7, issue 15): it keeps the
descriptor the daemon handed over and writes, truncates or allocates through it after
CLOSE; it reports a wrong CRC32C; it holds many idle connections so that nobody else
gets one. A raw client speaks the wire protocol (src/fastpath/wire.h) to keep the
descriptor; the library (c_api_check, CKPTFS_WRITER_CHECK) shows what a well-behaved
writer sees meanwhile."""
import errno
import fcntl
import json
import mmap
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from ckptfs_testlib import get_xattr, read_file

CHECK = os.environ.get("CKPTFS_WRITER_CHECK", "")
NOBODY = 65534


def crc32c(data):
    table = []
    for b in range(256):
        c = b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    crc = 0xFFFFFFFF
    for byte in data:
        crc = (crc >> 8) ^ table[(crc ^ byte) & 0xFF]
    return crc ^ 0xFFFFFFFF


# The raw client, also run as another user in a child: it prints what each
# attempt after CLOSE did (0 or the errno) as JSON.
RAW_CLIENT = textwrap.dedent("""
    import errno, fcntl, json, mmap, os, socket, sys

    def open_file(sock_path, rel, mode=0o644):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect(sock_path)
        s.send(b"\\0".join([b"OPEN", b"1", str(mode).encode(), rel.encode()]))
        msg, fds, _, _ = socket.recv_fds(s, 8192, 4)
        fields = msg.split(b"\\0")
        if fields[0] != b"OK":
            raise SystemExit("OPEN refused: %r" % (fields,))
        return s, fds[0]

    def close_file(s, size, crc):
        s.send(b"\\0".join([b"CLOSE", str(size).encode(), str(crc).encode()]))
        fields = s.recv(8192).split(b"\\0")
        s.close()
        return [f.decode() for f in fields]

    def attempt(fn):
        try:
            fn()
            return 0
        except OSError as e:
            return e.errno

    def main(sock_path, rel, size, crc):
        s, fd = open_file(sock_path, rel)
        out = {"accmode": fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE}
        data = bytes((i * 131 + 7) % 251 for i in range(size))
        os.pwrite(fd, data, 0)
        # (after the write: Python checks the file's size before it maps)
        out["mmap"] = attempt(lambda: mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_WRITE))
        os.fsync(fd)
        out["close"] = close_file(s, size, crc)
        # What a client that kept its descriptor can do afterwards.
        out["pwrite"] = attempt(lambda: os.pwrite(fd, b"X" * 4096, 0))
        out["append"] = attempt(lambda: os.pwrite(fd, b"Y", size))
        out["ftruncate"] = attempt(lambda: os.ftruncate(fd, 1))
        out["fallocate"] = attempt(lambda: os.posix_fallocate(fd, 0, size + (1 << 20)))
        os.close(fd)
        print(json.dumps(out))

    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
""")


def pattern(size):
    return bytes((i * 131 + 7) % 251 for i in range(size))


@pytest.fixture
def fast_path_mount(make_ckptfs):
    """A mount whose writer socket is where every user can reach it (the base
    directory is 0755), with a short idle timeout."""
    def make(*args):
        m = make_ckptfs(start=False)
        m.socket = os.path.join(m.base, "writer.sock")
        m.start(args=["--writer-socket", m.socket, *args])
        return m
    return make


def revocation_mode(m):
    for line in read_file(m.path(".ckptfs/events")).decode().splitlines():
        e = json.loads(line)
        if e.get("event") == "writer_fast_path":
            return e["revocation"]
    raise AssertionError("no writer_fast_path event")


def run_raw_client(m, rel, size, crc=None, user=None):
    crc = crc32c(pattern(size)) if crc is None else crc
    kw = {}
    if user is not None:
        kw["preexec_fn"] = lambda: (os.setgroups([]), os.setgid(user), os.setuid(user))
    r = subprocess.run([sys.executable, "-c", RAW_CLIENT, m.socket, rel, str(size), str(crc)],
                       capture_output=True, text=True, timeout=60, **kw)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("user", [None, NOBODY], ids=["root", "file-owner-not-root"])
def test_descriptor_is_write_only_and_revoked_at_close(fast_path_mount, user):
    m = fast_path_mount()
    os.makedirs(m.path("run/step1"))
    os.chmod(m.path("run/step1"), 0o777)
    size = 200000
    out = run_raw_client(m, "run/step1/rank0.bin", size, user=user)
    assert out["accmode"] == os.O_WRONLY
    assert out["mmap"] in (errno.EACCES, errno.EINVAL)  # no mapping of a write-only descriptor
    assert out["close"] == ["OK"], out
    mode = revocation_mode(m)
    assert mode in ("immutable", "staging-copy")
    if mode == "immutable":
        # The backing file refuses every change through the kept descriptor.
        for what in ("pwrite", "append", "ftruncate", "fallocate"):
            assert out[what] == errno.EPERM, (what, out)
    target = m.path("run/step1/rank0.bin")
    assert os.stat(target).st_size == size
    assert read_file(target) == pattern(size)
    assert get_xattr(target, "user.ckptfs.crc32c") == f"{crc32c(pattern(size)):08x}"
    # It commits as written, and stays so across a restart and fsck.
    os.setxattr(m.path("run/step1"), "user.ckptfs.commit", b"1")
    deadline = time.monotonic() + 20
    while get_xattr(m.path("run/step1"), "user.ckptfs.state") != "committed" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert get_xattr(m.path("run/step1"), "user.ckptfs.state") == "committed"
    m.restart()
    assert read_file(target) == pattern(size)
    assert get_xattr(m.path("run/step1"), "user.ckptfs.state") == "committed"


def test_wrong_checksum_is_refused_and_the_daemons_own_is_recorded(fast_path_mount):
    m = fast_path_mount()
    size = 50000
    out = run_raw_client(m, "f.bin", size, crc=0)
    assert out["close"][0] == "ERR" and int(out["close"][1]) == errno.EIO, out
    real = f"{crc32c(pattern(size)):08x}"
    assert f"reported CRC32C 00000000 but the file holds {real}" in out["close"][2]
    assert get_xattr(m.path("f.bin"), "user.ckptfs.crc32c") == real
    events = [json.loads(line) for line in read_file(m.path(".ckptfs/events")).decode().splitlines()]
    assert any(e.get("kind") == "checksum_mismatch" and e.get("path") == "f.bin" for e in events), events


def test_idle_connections_are_closed_after_the_timeout(fast_path_mount):
    m = fast_path_mount("--writer-idle-timeout", "0.5")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(10)
    s.connect(m.socket)
    started = time.monotonic()
    fields = s.recv(8192).split(b"\0")
    assert fields[0] == b"ERR" and int(fields[1]) == errno.ETIMEDOUT, fields
    assert b"idle" in fields[2]
    assert 0.4 < time.monotonic() - started < 5
    assert s.recv(8192) == b""  # closed
    s.close()


# Holds N connections as another user, without sending anything, and reports
# how many the daemon kept and how many it refused at once.
HOLDER = textwrap.dedent("""
    import json, select, socket, sys, time
    held, refused = [], []
    for _ in range(int(sys.argv[2])):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect(sys.argv[1])
        if select.select([s], [], [], 0.2)[0]:
            refused.append(s.recv(8192).split(b"\\0")[2].decode())
            s.close()
        else:
            held.append(s)
    print(json.dumps({"held": len(held), "refused": len(refused), "why": refused[:1]}), flush=True)
    time.sleep(600)
""")


def copy_writer_for_other_users(tmp):
    """c_api_check and its library where uid 65534 can run them."""
    os.chmod(tmp, 0o755)
    lib = os.environ.get("CKPTFS_WRITER_LIB", "")
    for src in (CHECK, lib):
        if src:
            shutil.copy(os.path.realpath(src), tmp)
    if lib:
        os.symlink(os.path.basename(os.path.realpath(lib)), os.path.join(tmp, "libckptfs-writer.so.1"))
    return os.path.join(tmp, os.path.basename(CHECK)), dict(os.environ, LD_LIBRARY_PATH=tmp)


@pytest.mark.skipif(not (CHECK and os.access(CHECK, os.X_OK)),
                    reason="CKPTFS_WRITER_CHECK (the c_api_check program) is not set: run through meson test")
def test_idle_connections_of_one_user_lock_nobody_out(fast_path_mount):
    m = fast_path_mount("--writer-idle-timeout", "30")
    os.chmod(m.mnt, 0o777)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, m.socket, "1100"], stdout=subprocess.PIPE,
                              text=True, preexec_fn=lambda: (os.setgroups([]), os.setgid(NOBODY), os.setuid(NOBODY)))
    tmp = tempfile.mkdtemp(prefix="ckptfs-writer-")
    try:
        counts = json.loads(holder.stdout.readline())
        # The per-user limit (64), refused with a reason on the wire.
        assert counts["held"] == 64 and counts["refused"] == 1100 - 64, counts
        assert "too many writer connections from uid 65534" in counts["why"][0]
        # Root's writer still gets the fast path.
        r = subprocess.run([CHECK, m.path("root.bin"), "100000"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["fast_path"] == 1
        assert read_file(m.path("root.bin")) == pattern(100000)
        # The same user's own writer is refused the fast path: it writes through the
        # mount instead, correctly, and says so.
        prog, env = copy_writer_for_other_users(tmp)
        r = subprocess.run([prog, m.path("mine.bin"), "100000"], capture_output=True, text=True, env=env,
                           timeout=60,
                           preexec_fn=lambda: (os.setgroups([]), os.setgid(NOBODY), os.setuid(NOBODY)))
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["fast_path"] == 0
        assert "fast path unavailable" in r.stderr and "writing through the mount" in r.stderr, r.stderr
        assert read_file(m.path("mine.bin")) == pattern(100000)
        # Once the idle connections are gone, the fast path is back for that user.
        holder.kill()
        holder.wait()
        deadline = time.monotonic() + 10
        while True:
            r = subprocess.run([prog, m.path("again.bin"), "1000"], capture_output=True, text=True, env=env,
                               timeout=60,
                               preexec_fn=lambda: (os.setgroups([]), os.setgid(NOBODY), os.setuid(NOBODY)))
            assert r.returncode == 0, r.stderr
            if json.loads(r.stdout)["fast_path"] == 1 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert json.loads(r.stdout)["fast_path"] == 1
    finally:
        holder.kill()
        holder.wait()
        shutil.rmtree(tmp, ignore_errors=True)
