"""libckptfs-writer against a real mount (SPEC section 7): the fast path (the daemon
hands out backing-file descriptors), the fallback without it, permissions, checksums,
metrics, and that a file written this way behaves like any other.

The writer is tests/writer/c_api_check.c (a C program on the public header), found
through CKPTFS_WRITER_CHECK (set by meson); the tests skip with a message without it."""
import json
import os
import shutil
import stat
import subprocess
import tempfile

import pytest

from ckptfs_testlib import get_xattr, read_file

CHECK = os.environ.get("CKPTFS_WRITER_CHECK", "")

pytestmark = pytest.mark.skipif(
    not (CHECK and os.access(CHECK, os.X_OK)),
    reason="CKPTFS_WRITER_CHECK (the c_api_check program) is not set: run through meson test")

try:
    import crcmod.predefined
    _crc32c_fn = crcmod.predefined.mkCrcFun("crc-32c")
except ImportError:  # pragma: no cover - install-deps.sh installs python3-crcmod
    _crc32c_fn = None


def crc32c(data):
    """CRC32C independent of ckptfs's: crcmod's (C extension), else a table in Python."""
    if _crc32c_fn:
        return _crc32c_fn(data)
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


def pattern(size):
    """What c_api_check writes: byte i = (i * 131 + 7) % 251."""
    period = bytes((i * 131 + 7) % 251 for i in range(251))
    return (period * (size // 251 + 1))[:size]


def write_with_library(path, size, *flags, user=None, check=True):
    cmd = [CHECK, path, str(size), *flags]
    kw = {}
    if user is not None:
        kw["preexec_fn"] = lambda: (os.setgroups([]), os.setgid(user), os.setuid(user))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    if check:
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)
    return r


def metric(mnt, name):
    for line in read_file(mnt.path(".ckptfs/metrics")).decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in metrics")


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, (1 << 20) + 1])
def test_fast_path_writes_records_and_checksums(ckptfs, size):
    os.makedirs(ckptfs.path("run/step1"))
    target = ckptfs.path("run/step1/rank0.bin")
    out = write_with_library(target, size)
    assert out["fast_path"] == 1, out
    assert out["bytes"] == size
    data = pattern(size)
    assert out["crc32c"] == crc32c(data)
    assert os.stat(target).st_size == size
    assert read_file(target) == data
    assert get_xattr(target, "user.ckptfs.crc32c") == f"{crc32c(data):08x}"
    assert metric(ckptfs, "ckptfs_writer_fastpath_bytes_total") == size
    # Recorded in the manifest: still there after a restart.
    ckptfs.restart()
    assert os.stat(target).st_size == size
    assert get_xattr(target, "user.ckptfs.crc32c") == f"{crc32c(data):08x}"


def test_one_gib_through_the_fast_path(ckptfs):
    size = 1 << 30
    out = write_with_library(ckptfs.path("big.bin"), size, "--async")
    assert out["fast_path"] == 1 and out["bytes"] == size
    data = pattern(size)
    assert out["crc32c"] == crc32c(data)
    assert get_xattr(ckptfs.path("big.bin"), "user.ckptfs.crc32c") == f"{crc32c(data):08x}"
    with open(ckptfs.path("big.bin"), "rb") as f:
        assert f.read() == data


def test_rewrite_invalidates_what_the_kernel_cached(ckptfs):
    target = ckptfs.path("f.bin")
    with open(target, "wb") as f:
        f.write(b"x" * 10000)
    assert read_file(target) == b"x" * 10000  # now in the kernel's page cache
    write_with_library(target, 5000)
    assert os.stat(target).st_size == 5000
    assert read_file(target) == pattern(5000)


def test_marker_written_by_the_library_commits_the_step(make_ckptfs):
    # A marker of our own: .metadata would be parsed as DCP metadata.
    ckptfs = make_ckptfs("--commit-marker", "COMMITTED")
    os.makedirs(ckptfs.path("run/step7"))
    write_with_library(ckptfs.path("run/step7/__0_0.distcp"), 100000)
    write_with_library(ckptfs.path("run/step7/COMMITTED"), 10)
    ckptfs.wait_state("run/step7", "committed")
    assert os.readlink(ckptfs.path("run/latest")) == "step7"
    # Committed files are read-only for the library too.
    r = write_with_library(ckptfs.path("run/step7/__0_0.distcp"), 5, check=False)
    assert r.returncode == 1
    assert "read-only" in r.stderr or "committed" in r.stderr, r.stderr
    assert read_file(ckptfs.path("run/step7/__0_0.distcp")) == pattern(100000)


def test_permission_denied_for_a_user_who_may_not_write(ckptfs):
    os.makedirs(ckptfs.path("private"))
    os.chmod(ckptfs.path("private"), 0o755)  # root's; others may not create files
    # The check program must be reachable for uid 65534: copy it with its library.
    tmp = tempfile.mkdtemp(prefix="ckptfs-writer-")
    try:
        os.chmod(tmp, 0o755)
        for src in (CHECK, os.environ.get("CKPTFS_WRITER_LIB", "")):
            if src:
                shutil.copy(os.path.realpath(src), tmp)
        lib = os.environ.get("CKPTFS_WRITER_LIB")
        if lib:
            os.symlink(os.path.basename(os.path.realpath(lib)), os.path.join(tmp, "libckptfs-writer.so.1"))
        prog = os.path.join(tmp, os.path.basename(CHECK))
        env = dict(os.environ, LD_LIBRARY_PATH=tmp)
        r = subprocess.run([prog, ckptfs.path("private/x.bin"), "100"], capture_output=True, text=True,
                           env=env, preexec_fn=lambda: (os.setgroups([]), os.setgid(65534), os.setuid(65534)),
                           timeout=60)
        assert r.returncode == 1, r.stdout
        assert "ermission" in r.stderr, r.stderr
        assert not os.path.exists(ckptfs.path("private/x.bin"))
        # The same user may write where the directory lets them.
        os.makedirs(ckptfs.path("open"))
        os.chmod(ckptfs.path("open"), 0o777)
        r = subprocess.run([prog, ckptfs.path("open/x.bin"), "100"], capture_output=True, text=True,
                           env=env, preexec_fn=lambda: (os.setgroups([]), os.setgid(65534), os.setuid(65534)),
                           timeout=60)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["fast_path"] == 1
        st = os.stat(ckptfs.path("open/x.bin"))
        assert (st.st_uid, st.st_gid) == (65534, 65534)
        assert stat.S_IMODE(st.st_mode) == 0o644  # 0666 less the umask 022
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_without_the_socket_the_library_writes_through_fuse(make_ckptfs):
    m = make_ckptfs("--writer-socket", "none")
    out = write_with_library(m.path("f.bin"), (1 << 20) + 1)
    assert out["fast_path"] == 0
    assert read_file(m.path("f.bin")) == pattern((1 << 20) + 1)
    assert get_xattr(m.path("f.bin"), "user.ckptfs.crc32c") is None
    assert get_xattr(m.mnt, "user.ckptfs.writer_socket") is None
    assert metric(m, "ckptfs_writer_fastpath_bytes_total") == 0


def test_outside_a_mount_the_library_writes_the_path(outside_dir):
    out = write_with_library(os.path.join(outside_dir, "f.bin"), 12345)
    assert out["fast_path"] == 0
    with open(os.path.join(outside_dir, "f.bin"), "rb") as f:
        assert f.read() == pattern(12345)


def test_socket_is_discoverable_and_a_dead_daemon_does_not_block_a_new_one(make_ckptfs):
    m = make_ckptfs()
    sock = get_xattr(m.mnt, "user.ckptfs.writer_socket")
    assert sock == os.path.join(m.cache, "writer.sock")
    assert stat.S_ISSOCK(os.stat(sock).st_mode)
    m.kill9()  # leaves the socket file behind
    m.start()
    out = write_with_library(m.path("after.bin"), 100)
    assert out["fast_path"] == 1


def test_python_binding_uses_the_fast_path(ckptfs):
    """ckptfs.writer (ctypes) in a mount: save_safetensors and a file-like Writer."""
    lib = os.environ.get("CKPTFS_WRITER_LIB")
    if not lib:
        pytest.skip("CKPTFS_WRITER_LIB is not set: run through meson test")
    os.makedirs(ckptfs.path("run/step3"))
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from ckptfs.writer import Writer, save_safetensors
info = save_safetensors({"w": np.arange(1000, dtype=np.float32)}, sys.argv[2] + "/model.safetensors")
with Writer(sys.argv[2] + "/blob.bin") as f:
    f.write(b"abc" * 1000)
print(json.dumps({"fast_path": info.fast_path, "crc32c": info.crc32c}))
"""
    r = subprocess.run(["/usr/bin/python3", "-c", script, os.path.join(repo, "python"), ckptfs.path("run/step3")],
                       capture_output=True, text=True, timeout=120, env=dict(os.environ, CKPTFS_WRITER_LIB=lib))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["fast_path"] is True
    data = read_file(ckptfs.path("run/step3/model.safetensors"))
    assert out["crc32c"] == crc32c(data)
    assert get_xattr(ckptfs.path("run/step3/model.safetensors"), "user.ckptfs.crc32c") == f"{crc32c(data):08x}"
    assert read_file(ckptfs.path("run/step3/blob.bin")) == b"abc" * 1000
    assert get_xattr(ckptfs.path("run/step3/blob.bin"), "user.ckptfs.crc32c") == f"{crc32c(b'abc' * 1000):08x}"
