"""POSIX behaviour of the ckptfs mount root (an ordinary writable tree).

Each test runs against a fresh mount (the `ckptfs` fixture) and asserts real results:
contents read back, stat fields, and errnos.
"""
import ctypes
import errno
import json
import mmap
import os
import shutil
import stat
import subprocess
import time

import pytest

from ckptfs_testlib import (expect_errno, PYTHON, RENAME_EXCHANGE, RENAME_NOREPLACE, UTIME_NOW, UTIME_OMIT,
                            read_file, renameat2, utimensat, write_file)


# --------------------------------------------------------------------------- files

def test_create_write_read(ckptfs):
    p = ckptfs.path("hello.txt")
    data = os.urandom(200_000)
    write_file(p, data)
    st = os.stat(p)
    assert stat.S_ISREG(st.st_mode)
    assert st.st_size == len(data)
    assert read_file(p) == data
    assert "hello.txt" in os.listdir(ckptfs.mnt)


def test_pwrite_pread_offsets_and_holes(ckptfs):
    p = ckptfs.path("sparse.bin")
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        assert os.pwrite(fd, b"A" * 10, 0) == 10
        assert os.pwrite(fd, b"B" * 10, 1 << 20) == 10          # hole in between
        assert os.pwrite(fd, b"C" * 3, 5) == 3                   # overwrite inside
        assert os.fstat(fd).st_size == (1 << 20) + 10
        assert os.pread(fd, 16, 0) == b"AAAAACCCAA" + b"\0" * 6
        assert os.pread(fd, 100, 4096) == b"\0" * 100
        assert os.pread(fd, 100, (1 << 20) + 5) == b"B" * 5      # short read at EOF
        assert os.pread(fd, 100, (1 << 20) + 10) == b""
    finally:
        os.close(fd)


def test_large_offset_sparse_file(ckptfs):
    p = ckptfs.path("big_sparse.bin")
    off = 5 * (1 << 30) + 123
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, b"tail", off)
        assert os.fstat(fd).st_size == off + 4
        assert os.pread(fd, 8, off - 4) == b"\0\0\0\0tail"
    finally:
        os.close(fd)
    assert os.path.getsize(p) == off + 4


def test_large_file_roundtrip(ckptfs):
    p = ckptfs.path("large.bin")
    chunk = os.urandom(1 << 20)
    with open(p, "wb") as f:
        for i in range(48):
            f.write(bytes([i]) + chunk[1:])
    assert os.path.getsize(p) == 48 << 20
    with open(p, "rb") as f:
        for i in range(48):
            assert f.read(1 << 20) == bytes([i]) + chunk[1:], f"MiB {i} differs"


def test_append_mode(ckptfs):
    p = ckptfs.path("log.txt")
    write_file(p, b"one\n")
    fd = os.open(p, os.O_WRONLY | os.O_APPEND)
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, b"two\n")
    finally:
        os.close(fd)
    with open(p, "ab") as f:
        f.write(b"three\n")
    assert read_file(p) == b"one\ntwo\nthree\n"


def test_truncate_shrink_and_extend(ckptfs):
    p = ckptfs.path("t.bin")
    write_file(p, b"0123456789")
    os.truncate(p, 4)
    assert os.path.getsize(p) == 4
    assert read_file(p) == b"0123"
    os.truncate(p, 8)
    assert read_file(p) == b"0123\0\0\0\0"
    fd = os.open(p, os.O_RDWR)
    try:
        os.ftruncate(fd, 2)
        assert os.fstat(fd).st_size == 2
        os.pwrite(fd, b"Z", 5)
    finally:
        os.close(fd)
    assert read_file(p) == b"01\0\0\0Z"
    # O_TRUNC empties the file
    os.close(os.open(p, os.O_WRONLY | os.O_TRUNC))
    assert os.path.getsize(p) == 0
    assert read_file(p) == b""


def _truncate_outcome(path, size):
    try:
        os.truncate(path, size)
        return 0
    except OSError as e:
        return e.errno


@pytest.mark.parametrize("size", [1 << 40, 999999999999999])
def test_sparse_extension_answers_as_the_cache_filesystem(ckptfs, size):
    # pjdfstest truncate/12: extending a file allocates nothing (a hole), so
    # the metadata reserve has no say; the answer is the cache filesystem's
    # own (success, or EFBIG beyond its largest file), never ENOSPC.
    plain = os.path.join(ckptfs.cache, "plain-truncate-probe")
    write_file(plain, b"x")
    expected = _truncate_outcome(plain, size)
    os.unlink(plain)
    p = ckptfs.path("sparse.bin")
    write_file(p, b"head")
    got = _truncate_outcome(p, size)
    assert got == expected, f"truncate to {size}: {errno.errorcode.get(got, got)}, " \
                            f"the cache filesystem gives {errno.errorcode.get(expected, expected)}"
    fd = os.open(p, os.O_RDWR)
    try:
        try:  # ftruncate/12 alike
            os.ftruncate(fd, size)
            got = 0
        except OSError as e:
            got = e.errno
        assert got == expected, f"ftruncate to {size}: {errno.errorcode.get(got, got)}"
        os.ftruncate(fd, 4)
    finally:
        os.close(fd)
    assert read_file(p) == b"head"


def test_fsync_and_fdatasync(ckptfs):
    p = ckptfs.path("durable.bin")
    fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"x" * 100_000)
        os.fsync(fd)
        os.write(fd, b"y" * 10)
        os.fdatasync(fd)
    finally:
        os.close(fd)
    # fsync on a directory too (what careful writers do after rename)
    dfd = os.open(ckptfs.mnt, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    assert read_file(p) == b"x" * 100_000 + b"y" * 10


def test_create_excl_and_missing(ckptfs):
    p = ckptfs.path("excl")
    os.close(os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    expect_errno(errno.EEXIST, os.open, p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    expect_errno(errno.ENOENT, os.open, ckptfs.path("nope"), os.O_RDONLY)
    expect_errno(errno.ENOENT, os.stat, ckptfs.path("nope"))
    expect_errno(errno.ENOENT, os.open, ckptfs.path("nodir", "f"), os.O_CREAT | os.O_WRONLY)
    expect_errno(errno.ENOTDIR, os.open, ckptfs.path("excl", "f"), os.O_CREAT | os.O_WRONLY)
    expect_errno(errno.EISDIR, os.open, ckptfs.mnt + "/", os.O_WRONLY)


def test_create_mode_respects_umask(ckptfs):
    old = os.umask(0o022)
    try:
        os.close(os.open(ckptfs.path("m"), os.O_CREAT | os.O_WRONLY, 0o666))
        os.mkdir(ckptfs.path("d"), 0o777)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(ckptfs.path("m")).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(ckptfs.path("d")).st_mode) == 0o755
    st = os.stat(ckptfs.path("m"))
    assert (st.st_uid, st.st_gid) == (os.geteuid(), os.getegid())


def test_unlinked_open_file_stays_readable(ckptfs):
    p = ckptfs.path("ghost")
    write_file(p, b"still here")
    fd = os.open(p, os.O_RDWR)
    try:
        os.unlink(p)
        assert not os.path.exists(p)
        assert "ghost" not in os.listdir(ckptfs.mnt)
        assert os.pread(fd, 100, 0) == b"still here"
        os.pwrite(fd, b"!", 10)
        assert os.pread(fd, 100, 0) == b"still here!"
        assert os.fstat(fd).st_nlink == 0
    finally:
        os.close(fd)
    # the name can be reused at once
    write_file(p, b"new")
    assert read_file(p) == b"new"


def test_mmap_read_and_write(ckptfs):
    p = ckptfs.path("mm.bin")
    data = os.urandom(3 * 4096 + 17)
    write_file(p, data)
    with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
        assert m[:] == data
    with open(p, "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
        m[4096:4100] = b"WXYZ"
        m.flush()
    assert read_file(p) == data[:4096] + b"WXYZ" + data[4100:]


def test_copy_into_and_within_mount(ckptfs, outside_dir):
    src = os.path.join(outside_dir, "src.bin")
    data = os.urandom(3 << 20)
    write_file(src, data)
    shutil.copyfile(src, ckptfs.path("copy1"))
    shutil.copyfile(ckptfs.path("copy1"), ckptfs.path("copy2"))   # copy_file_range / sendfile
    r = subprocess.run(["cp", ckptfs.path("copy2"), ckptfs.path("copy3")], capture_output=True)
    assert r.returncode == 0, r.stderr
    for n in ("copy1", "copy2", "copy3"):
        assert read_file(ckptfs.path(n)) == data, n


# --------------------------------------------------------------------------- directories

def test_mkdir_rmdir_errors(ckptfs):
    d = ckptfs.path("d")
    os.mkdir(d)
    assert stat.S_ISDIR(os.stat(d).st_mode)
    expect_errno(errno.EEXIST, os.mkdir, d)
    write_file(os.path.join(d, "f"), b"x")
    expect_errno(errno.ENOTEMPTY, os.rmdir, d)
    expect_errno(errno.ENOTDIR, os.rmdir, os.path.join(d, "f"))
    expect_errno(errno.ENOTDIR, os.mkdir, os.path.join(d, "f", "sub"))
    expect_errno(errno.EISDIR, os.unlink, d)
    expect_errno(errno.ENOENT, os.rmdir, ckptfs.path("missing"))
    expect_errno(errno.ENOENT, os.unlink, ckptfs.path("missing"))
    expect_errno(errno.ENOENT, os.mkdir, ckptfs.path("missing", "sub"))
    os.unlink(os.path.join(d, "f"))
    os.rmdir(d)
    assert not os.path.exists(d)
    expect_errno(errno.ENOENT, os.stat, d)


def test_nested_tree_and_dir_nlink(ckptfs):
    os.makedirs(ckptfs.path("a", "b", "c"))
    write_file(ckptfs.path("a", "b", "c", "f"), b"deep")
    os.mkdir(ckptfs.path("a", "x"))
    assert read_file(ckptfs.path("a", "b", "c", "f")) == b"deep"
    assert sorted(os.listdir(ckptfs.path("a"))) == ["b", "x"]
    # classic directory link count: 2 + number of subdirectories
    assert os.stat(ckptfs.path("a")).st_nlink == 4
    assert os.stat(ckptfs.path("a", "b", "c")).st_nlink == 2
    shutil.rmtree(ckptfs.path("a"))
    assert "a" not in os.listdir(ckptfs.mnt)
    assert not os.path.exists(ckptfs.path("a"))


# --------------------------------------------------------------------------- rename

def test_rename_file(ckptfs):
    write_file(ckptfs.path("a"), b"AAA")
    ino = os.stat(ckptfs.path("a")).st_ino
    os.rename(ckptfs.path("a"), ckptfs.path("b"))
    assert not os.path.exists(ckptfs.path("a"))
    assert read_file(ckptfs.path("b")) == b"AAA"
    assert os.stat(ckptfs.path("b")).st_ino == ino
    expect_errno(errno.ENOENT, os.rename, ckptfs.path("a"), ckptfs.path("c"))


def test_rename_replaces_existing_file(ckptfs):
    write_file(ckptfs.path("new"), b"new contents")
    write_file(ckptfs.path("old"), b"old")
    fd = os.open(ckptfs.path("old"), os.O_RDONLY)
    try:
        os.rename(ckptfs.path("new"), ckptfs.path("old"))
        assert read_file(ckptfs.path("old")) == b"new contents"
        assert not os.path.exists(ckptfs.path("new"))
        # the replaced inode lives on for its open descriptor
        assert os.pread(fd, 100, 0) == b"old"
    finally:
        os.close(fd)
    assert sorted(n for n in os.listdir(ckptfs.mnt) if not n.startswith(".")) == ["old"]


def test_rename_atomic_replace_pattern(ckptfs):
    """write tmp + fsync + rename over the target, the way torch.save users do it."""
    target = ckptfs.path("model.pt")
    write_file(target, b"v1")
    for v in (b"v2", b"v3" * 1000):
        tmp = target + ".tmp"
        write_file(tmp, v, fsync=True)
        os.replace(tmp, target)
        assert read_file(target) == v
    assert not os.path.exists(target + ".tmp")


def test_move_directory_with_contents(ckptfs):
    os.makedirs(ckptfs.path("src", "inner"))
    write_file(ckptfs.path("src", "inner", "f"), b"payload")
    os.mkdir(ckptfs.path("dst"))
    os.rename(ckptfs.path("src"), ckptfs.path("dst", "moved"))
    assert not os.path.exists(ckptfs.path("src"))
    assert read_file(ckptfs.path("dst", "moved", "inner", "f")) == b"payload"
    assert os.listdir(ckptfs.path("dst")) == ["moved"]
    # '..' of the moved directory follows it
    assert os.stat(ckptfs.path("dst", "moved", "..")).st_ino == os.stat(ckptfs.path("dst")).st_ino
    # the file is still reachable after a fresh lookup of every component
    fd = os.open(ckptfs.path("dst", "moved", "inner", "f"), os.O_RDONLY)
    os.close(fd)


def test_rename_directory_errors(ckptfs):
    os.makedirs(ckptfs.path("d1", "sub"))
    os.mkdir(ckptfs.path("empty"))
    os.mkdir(ckptfs.path("full"))
    write_file(ckptfs.path("full", "x"), b"x")
    write_file(ckptfs.path("file"), b"f")
    expect_errno(errno.ENOTEMPTY, os.rename, ckptfs.path("d1"), ckptfs.path("full"))
    expect_errno(errno.EINVAL, os.rename, ckptfs.path("d1"), ckptfs.path("d1", "sub", "loop"))
    expect_errno(errno.ENOTDIR, os.rename, ckptfs.path("d1"), ckptfs.path("file"))
    expect_errno(errno.EISDIR, os.rename, ckptfs.path("file"), ckptfs.path("empty"))
    # a directory may replace an empty directory
    os.rename(ckptfs.path("d1"), ckptfs.path("empty"))
    assert os.listdir(ckptfs.path("empty")) == ["sub"]
    assert not os.path.exists(ckptfs.path("d1"))
    assert read_file(ckptfs.path("full", "x")) == b"x"


def test_rename_noreplace(ckptfs):
    write_file(ckptfs.path("a"), b"A")
    write_file(ckptfs.path("b"), b"B")
    expect_errno(errno.EEXIST, renameat2, ckptfs.path("a"), ckptfs.path("b"), RENAME_NOREPLACE)
    assert read_file(ckptfs.path("a")) == b"A"
    assert read_file(ckptfs.path("b")) == b"B"
    renameat2(ckptfs.path("a"), ckptfs.path("c"), RENAME_NOREPLACE)
    assert not os.path.exists(ckptfs.path("a"))
    assert read_file(ckptfs.path("c")) == b"A"
    # directories too
    os.mkdir(ckptfs.path("d"))
    os.mkdir(ckptfs.path("e"))
    expect_errno(errno.EEXIST, renameat2, ckptfs.path("d"), ckptfs.path("e"), RENAME_NOREPLACE)
    assert os.path.isdir(ckptfs.path("d")) and os.path.isdir(ckptfs.path("e"))


def test_rename_exchange(ckptfs):
    write_file(ckptfs.path("a"), b"A")
    write_file(ckptfs.path("b"), b"BB")
    ia, ib = os.stat(ckptfs.path("a")).st_ino, os.stat(ckptfs.path("b")).st_ino
    renameat2(ckptfs.path("a"), ckptfs.path("b"), RENAME_EXCHANGE)
    assert read_file(ckptfs.path("a")) == b"BB"
    assert read_file(ckptfs.path("b")) == b"A"
    assert os.stat(ckptfs.path("a")).st_ino == ib
    assert os.stat(ckptfs.path("b")).st_ino == ia
    # file <-> directory, across directories
    os.mkdir(ckptfs.path("dir"))
    write_file(ckptfs.path("dir", "inside"), b"I")
    os.mkdir(ckptfs.path("other"))
    write_file(ckptfs.path("other", "f"), b"F")
    renameat2(ckptfs.path("dir"), ckptfs.path("other", "f"), RENAME_EXCHANGE)
    assert read_file(ckptfs.path("dir")) == b"F"
    assert read_file(ckptfs.path("other", "f", "inside")) == b"I"
    expect_errno(errno.ENOENT, renameat2, ckptfs.path("a"), ckptfs.path("missing"),
                 RENAME_EXCHANGE)
    assert read_file(ckptfs.path("a")) == b"BB"


def test_exdev_across_filesystems(ckptfs, outside_dir):
    write_file(ckptfs.path("f"), b"x")
    expect_errno(errno.EXDEV, os.rename, ckptfs.path("f"), os.path.join(outside_dir, "f"))
    expect_errno(errno.EXDEV, os.link, ckptfs.path("f"), os.path.join(outside_dir, "f"))
    # mv falls back to copy + unlink
    r = subprocess.run(["mv", ckptfs.path("f"), os.path.join(outside_dir, "f")],
                       capture_output=True)
    assert r.returncode == 0, r.stderr
    assert read_file(os.path.join(outside_dir, "f")) == b"x"
    assert not os.path.exists(ckptfs.path("f"))


# --------------------------------------------------------------------------- links

def test_symlink_readlink(ckptfs):
    write_file(ckptfs.path("target"), b"T")
    os.symlink("target", ckptfs.path("rel"))
    os.symlink("does/not/exist", ckptfs.path("dangling"))
    long_target = "x/" * 1000 + "y"
    os.symlink(long_target, ckptfs.path("long"))
    assert os.readlink(ckptfs.path("rel")) == "target"
    assert os.readlink(ckptfs.path("dangling")) == "does/not/exist"
    assert os.readlink(ckptfs.path("long")) == long_target
    st = os.lstat(ckptfs.path("rel"))
    assert stat.S_ISLNK(st.st_mode)
    assert st.st_size == len("target")
    assert read_file(ckptfs.path("rel")) == b"T"
    assert not os.path.exists(ckptfs.path("dangling"))
    assert os.path.lexists(ckptfs.path("dangling"))
    expect_errno(errno.EEXIST, os.symlink, "x", ckptfs.path("rel"))
    expect_errno(errno.EINVAL, os.readlink, ckptfs.path("target"))
    # a symlink to a directory works as a path component
    os.mkdir(ckptfs.path("dir"))
    write_file(ckptfs.path("dir", "f"), b"F")
    os.symlink("dir", ckptfs.path("dirlink"))
    assert read_file(ckptfs.path("dirlink", "f")) == b"F"
    os.unlink(ckptfs.path("rel"))
    assert read_file(ckptfs.path("target")) == b"T"


def test_hard_links_and_counts(ckptfs):
    a = ckptfs.path("a")
    write_file(a, b"shared")
    assert os.stat(a).st_nlink == 1
    os.mkdir(ckptfs.path("sub"))
    b = ckptfs.path("sub", "b")
    os.link(a, b)
    c = ckptfs.path("c")
    os.link(b, c)
    for p in (a, b, c):
        st = os.stat(p)
        assert st.st_nlink == 3, p
        assert st.st_ino == os.stat(a).st_ino
    with open(b, "r+b") as f:
        f.write(b"SHARED")
    assert read_file(a) == b"SHARED" and read_file(c) == b"SHARED"
    expect_errno(errno.EEXIST, os.link, a, c)
    expect_errno(errno.EPERM, os.link, ckptfs.path("sub"), ckptfs.path("sublink"))
    expect_errno(errno.ENOENT, os.link, ckptfs.path("missing"), ckptfs.path("x"))
    os.unlink(a)
    assert os.stat(b).st_nlink == 2
    # rename over one of the names drops a link
    write_file(ckptfs.path("other"), b"other")
    os.rename(ckptfs.path("other"), c)
    assert os.stat(b).st_nlink == 1
    assert read_file(b) == b"SHARED"
    assert read_file(c) == b"other"


# --------------------------------------------------------------------------- attributes

def _times(p):
    st = os.stat(p, follow_symlinks=False)
    return st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns


def test_chmod_chown(ckptfs):
    p = ckptfs.path("f")
    write_file(p, b"x")
    os.chmod(p, 0o640)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o640
    os.chmod(p, 0o4755)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o4755
    os.chown(p, 1234, 5678)
    st = os.stat(p)
    assert (st.st_uid, st.st_gid) == (1234, 5678)
    os.chown(p, -1, 42)                       # -1 leaves the uid
    st = os.stat(p)
    assert (st.st_uid, st.st_gid) == (1234, 42)
    os.mkdir(ckptfs.path("d"))
    os.chmod(ckptfs.path("d"), 0o1777)
    assert stat.S_IMODE(os.stat(ckptfs.path("d")).st_mode) == 0o1777
    os.symlink("f", ckptfs.path("l"))
    os.chown(ckptfs.path("l"), 7, 8, follow_symlinks=False)
    assert (os.lstat(ckptfs.path("l")).st_uid, os.lstat(ckptfs.path("l")).st_gid) == (7, 8)
    assert os.stat(p).st_uid == 1234


def test_ctime_rules(ckptfs):
    p = ckptfs.path("f")
    write_file(p, b"x")
    a0, m0, c0 = _times(p)
    time.sleep(0.05)
    os.chmod(p, 0o600)                       # ctime moves, mtime does not
    a1, m1, c1 = _times(p)
    assert m1 == m0 and c1 > c0
    time.sleep(0.05)
    os.chown(p, 0, 0)
    _, m2, c2 = _times(p)
    assert m2 == m0 and c2 > c1
    time.sleep(0.05)
    with open(p, "ab") as f:                 # write: mtime and ctime move
        f.write(b"y")
    _, m3, c3 = _times(p)
    assert m3 > m2 and c3 > c2
    time.sleep(0.05)
    os.truncate(p, 1)                        # truncate: both move
    _, m4, c4 = _times(p)
    assert m4 > m3 and c4 > c3
    time.sleep(0.05)
    os.link(p, ckptfs.path("g"))             # link: ctime moves
    _, m5, c5 = _times(p)
    assert m5 == m4 and c5 > c4
    time.sleep(0.05)
    os.utime(p, ns=(1_000_000_000, 2_000_000_000))   # utimes: ctime moves to now
    a6, m6, c6 = _times(p)
    assert (a6, m6) == (1_000_000_000, 2_000_000_000)
    assert c6 > c5
    # directory mtime/ctime move when entries are added or removed
    d = ckptfs.path("dir")
    os.mkdir(d)
    _, dm0, dc0 = _times(d)
    time.sleep(0.05)
    write_file(os.path.join(d, "new"), b"")
    _, dm1, dc1 = _times(d)
    assert dm1 > dm0 and dc1 > dc0
    time.sleep(0.05)
    os.unlink(os.path.join(d, "new"))
    _, dm2, dc2 = _times(d)
    assert dm2 > dm1 and dc2 > dc1


def test_utimensat_now_and_omit(ckptfs):
    p = ckptfs.path("f")
    write_file(p, b"x")
    utimensat(p, (1_600_000_000, 123_456_789), (1_500_000_000, 987_654_321))
    a, m, c = _times(p)
    assert a == 1_600_000_000_123_456_789
    assert m == 1_500_000_000_987_654_321
    time.sleep(0.05)
    # UTIME_OMIT for atime, explicit mtime
    utimensat(p, UTIME_OMIT, (1_400_000_000, 5))
    a2, m2, c2 = _times(p)
    assert a2 == a and m2 == 1_400_000_000_000_000_005 and c2 > c
    time.sleep(0.05)
    # UTIME_NOW for mtime, omit atime
    before = time.time_ns()
    utimensat(p, UTIME_OMIT, UTIME_NOW)
    after = time.time_ns()
    a3, m3, c3 = _times(p)
    assert a3 == a
    assert before - 20_000_000 <= m3 <= after + 20_000_000, (before, m3, after)
    assert c3 >= c2
    # both omitted: nothing changes (not even ctime, per POSIX)
    time.sleep(0.05)
    utimensat(p, UTIME_OMIT, UTIME_OMIT)
    assert _times(p) == (a3, m3, c3)
    # UTIME_NOW for both
    time.sleep(0.05)
    before = time.time_ns()
    utimensat(p, UTIME_NOW, UTIME_NOW)
    after = time.time_ns()
    a4, m4, c4 = _times(p)
    for v in (a4, m4):
        assert before - 20_000_000 <= v <= after + 20_000_000
    # a symlink's own times (AT_SYMLINK_NOFOLLOW)
    os.symlink("f", ckptfs.path("l"))
    utimensat(ckptfs.path("l"), (10, 0), (20, 0), follow=False)
    st = os.lstat(ckptfs.path("l"))
    assert (st.st_atime_ns, st.st_mtime_ns) == (10_000_000_000, 20_000_000_000)
    assert os.stat(p).st_mtime_ns == m4


_PERM_CHILD = r"""
import errno, json, os, sys
os.setgroups([])
os.setgid(65534)
os.setuid(65534)
res = {}
def attempt(name, fn):
    try:
        r = fn()
        res[name] = "ok" if r is None or not isinstance(r, bytes) else r.decode()
    except OSError as e:
        res[name] = errno.errorcode.get(e.errno, str(e.errno))
def rd(p):
    with open(p, "rb") as f:
        return f.read()
def wr(p):
    with open(p, "ab") as f:
        f.write(b"z")
m = sys.argv[1]
attempt("read_0600", lambda: rd(m + "/secret"))
attempt("read_0644", lambda: rd(m + "/public"))
attempt("write_0644", lambda: wr(m + "/public"))
attempt("create_in_0755_dir", lambda: os.close(os.open(m + "/rootdir/new", os.O_CREAT | os.O_WRONLY, 0o644)))
attempt("create_in_0777_dir", lambda: os.close(os.open(m + "/shared/new", os.O_CREAT | os.O_WRONLY, 0o644)))
attempt("list_0700_dir", lambda: os.listdir(m + "/private"))
attempt("chmod_not_owner", lambda: os.chmod(m + "/public", 0o777))
attempt("unlink_in_0755_dir", lambda: os.unlink(m + "/rootdir/victim"))
attempt("utime_now_not_owner_no_write", lambda: os.utime(m + "/public"))
print(json.dumps(res))
"""


def test_kernel_permission_checks(make_ckptfs):
    # allow_other so that another uid may use the mount at all; the checks themselves are
    # the kernel's (default_permissions).
    m = make_ckptfs("-o", "allow_other")
    write_file(m.path("secret"), b"s")
    os.chmod(m.path("secret"), 0o600)
    write_file(m.path("public"), b"p")
    os.chmod(m.path("public"), 0o644)
    os.mkdir(m.path("rootdir"), 0o755)
    os.chmod(m.path("rootdir"), 0o755)
    write_file(m.path("rootdir", "victim"), b"v")
    os.mkdir(m.path("shared"))
    os.chmod(m.path("shared"), 0o777)
    os.mkdir(m.path("private"))
    os.chmod(m.path("private"), 0o700)
    os.chmod(m.mnt, 0o755)
    r = subprocess.run([PYTHON, "-c", _PERM_CHILD, m.mnt], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res == {
        "read_0600": "EACCES",
        "read_0644": "p",
        "write_0644": "EACCES",
        "create_in_0755_dir": "EACCES",
        "create_in_0777_dir": "ok",
        "list_0700_dir": "EACCES",
        "chmod_not_owner": "EPERM",
        "unlink_in_0755_dir": "EACCES",
        "utime_now_not_owner_no_write": "EACCES",
    }
    st = os.stat(m.path("shared", "new"))
    assert (st.st_uid, st.st_gid) == (65534, 65534)
    assert read_file(m.path("public")) == b"p"
    assert os.path.exists(m.path("rootdir", "victim"))


# --------------------------------------------------------------------------- xattrs

def test_user_xattrs(ckptfs):
    p = ckptfs.path("f")
    write_file(p, b"x")
    os.setxattr(p, "user.alpha", b"1")
    os.setxattr(p, "user.beta", b"\x00binary\xff" * 100)
    assert os.getxattr(p, "user.alpha") == b"1"
    assert os.getxattr(p, "user.beta") == b"\x00binary\xff" * 100
    assert {"user.alpha", "user.beta"} <= set(os.listxattr(p))
    os.setxattr(p, "user.alpha", b"22")                  # replace
    assert os.getxattr(p, "user.alpha") == b"22"
    expect_errno(errno.EEXIST, os.setxattr, p, "user.alpha", b"3", os.XATTR_CREATE)
    expect_errno(errno.ENODATA, os.setxattr, p, "user.gamma", b"3", os.XATTR_REPLACE)
    expect_errno(errno.ENODATA, os.getxattr, p, "user.gamma")
    os.setxattr(p, "user.empty", b"")
    assert os.getxattr(p, "user.empty") == b""
    os.removexattr(p, "user.alpha")
    expect_errno(errno.ENODATA, os.getxattr, p, "user.alpha")
    expect_errno(errno.ENODATA, os.removexattr, p, "user.alpha")
    assert "user.alpha" not in os.listxattr(p)
    # xattrs on directories, and they follow a rename
    os.mkdir(ckptfs.path("d"))
    os.setxattr(ckptfs.path("d"), "user.tag", b"dir")
    os.rename(ckptfs.path("d"), ckptfs.path("d2"))
    assert os.getxattr(ckptfs.path("d2"), "user.tag") == b"dir"
    # a small buffer gets ERANGE from the raw syscall
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(2)
    n = libc.getxattr(os.fsencode(p), b"user.beta", buf, ctypes.c_size_t(2))
    assert n == -1 and ctypes.get_errno() == errno.ERANGE


def test_non_user_xattr_namespaces(ckptfs):
    p = ckptfs.path("f")
    write_file(p, b"x")
    expect_errno(errno.EOPNOTSUPP, os.setxattr, p, "trusted.foo", b"1")
    expect_errno(errno.ENODATA, os.getxattr, p, "trusted.foo")
    assert not [n for n in os.listxattr(p) if not n.startswith("user.")]


def test_large_xattr_value(ckptfs):
    p = ckptfs.path("f")
    write_file(p, b"")
    v = os.urandom(4000)
    os.setxattr(p, "user.big", v)
    assert os.getxattr(p, "user.big") == v


# --------------------------------------------------------------------------- readdir

def _names(d):
    return sorted(e.name for e in os.scandir(d))


def test_readdir_types(ckptfs):
    os.mkdir(ckptfs.path("d"))
    write_file(ckptfs.path("f"), b"")
    os.symlink("f", ckptfs.path("l"))
    entries = {e.name: e for e in os.scandir(ckptfs.mnt)}
    assert entries["d"].is_dir(follow_symlinks=False)
    assert entries["f"].is_file(follow_symlinks=False)
    assert entries["l"].is_symlink()
    assert entries["f"].inode() == os.stat(ckptfs.path("f")).st_ino
    # getdents also returns . and .. (scandir hides them)
    r = subprocess.run(["ls", "-fa", ckptfs.mnt], capture_output=True, text=True)
    names = r.stdout.split()
    assert names.count(".") == 1 and names.count("..") == 1


def test_readdir_many_entries_exactly_once(ckptfs):
    d = ckptfs.path("many")
    os.mkdir(d)
    names = [f"file_{i:05d}_{'p' * 40}" for i in range(1000)]
    for n in names:
        os.close(os.open(os.path.join(d, n), os.O_CREAT | os.O_WRONLY, 0o644))
    listed = [e.name for e in os.scandir(d)]
    assert len(listed) == 1000
    assert sorted(listed) == sorted(names)


def test_readdir_stable_while_deleting(ckptfs):
    """Delete entries between readdir calls: every surviving entry is returned exactly once."""
    d = ckptfs.path("many")
    os.mkdir(d)
    names = [f"file_{i:05d}_{'p' * 40}" for i in range(1000)]
    for n in names:
        os.close(os.open(os.path.join(d, n), os.O_CREAT | os.O_WRONLY, 0o644))
    seen = []
    deleted = set()
    step = 0
    with os.scandir(d) as it:
        for e in it:
            seen.append(e.name)
            step += 1
            if step % 50 == 0:
                # delete some already-seen and some not-yet-seen entries
                victims = [n for n in names if n not in deleted][::7][:20]
                for v in victims:
                    os.unlink(os.path.join(d, v))
                    deleted.add(v)
    survivors = set(names) - deleted
    assert len(deleted) > 100
    dup = {n for n in seen if seen.count(n) > 1}
    assert not dup, f"entries returned twice: {sorted(dup)[:5]}"
    missing = survivors - set(seen)
    assert not missing, f"{len(missing)} surviving entries never returned, e.g. {sorted(missing)[:3]}"
    assert set(seen) <= set(names)
    assert sorted(os.listdir(d)) == sorted(survivors)


def test_readdir_stable_while_creating(ckptfs):
    """Creating entries while listing never makes an existing entry vanish or repeat."""
    d = ckptfs.path("grow")
    os.mkdir(d)
    names = [f"orig_{i:05d}_{'q' * 40}" for i in range(600)]
    for n in names:
        os.close(os.open(os.path.join(d, n), os.O_CREAT | os.O_WRONLY, 0o644))
    seen = []
    with os.scandir(d) as it:
        for i, e in enumerate(it):
            seen.append(e.name)
            if i % 40 == 0:
                for k in range(5):
                    os.close(os.open(os.path.join(d, f"added_{i:05d}_{k}"),
                                     os.O_CREAT | os.O_WRONLY, 0o644))
    assert len(seen) == len(set(seen)), "an entry was returned twice"
    assert set(names) <= set(seen)


class _Dirent(ctypes.Structure):
    _fields_ = [("d_ino", ctypes.c_uint64), ("d_off", ctypes.c_int64),
                ("d_reclen", ctypes.c_ushort), ("d_type", ctypes.c_ubyte),
                ("d_name", ctypes.c_char * 256)]


def test_telldir_seekdir(ckptfs):
    """Directory offsets are stable: seekdir(telldir()) resumes at the same entry."""
    d = ckptfs.path("dir")
    os.mkdir(d)
    for i in range(300):
        os.close(os.open(os.path.join(d, f"entry_{i:04d}_{'r' * 30}"), os.O_CREAT | os.O_WRONLY))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.opendir.restype = ctypes.c_void_p
    libc.opendir.argtypes = [ctypes.c_char_p]
    libc.readdir.restype = ctypes.POINTER(_Dirent)
    libc.readdir.argtypes = [ctypes.c_void_p]
    libc.telldir.restype = ctypes.c_long
    libc.telldir.argtypes = [ctypes.c_void_p]
    libc.seekdir.argtypes = [ctypes.c_void_p, ctypes.c_long]
    libc.closedir.argtypes = [ctypes.c_void_p]
    dp = libc.opendir(os.fsencode(d))
    assert dp

    def read_n(n):
        out = []
        for _ in range(n):
            ent = libc.readdir(dp)
            if not ent:
                break
            out.append(ent.contents.d_name.decode())
        return out

    try:
        first = read_n(120)
        pos = libc.telldir(dp)
        nxt = read_n(100)
        rest = read_n(1000)
        libc.seekdir(dp, pos)
        again = read_n(100)
        assert again == nxt
        libc.rewinddir.argtypes = [ctypes.c_void_p]
        libc.rewinddir(dp)
        assert read_n(120) == first
    finally:
        libc.closedir(dp)
    allnames = [n for n in first + nxt + rest if n not in (".", "..")]
    assert len(allnames) == 300 and len(set(allnames)) == 300


# --------------------------------------------------------------------------- statfs, names

def test_statfs_reflects_cache_disk(ckptfs):
    sm = os.statvfs(ckptfs.mnt)
    sc = os.statvfs(ckptfs.cache)
    total_m = sm.f_blocks * sm.f_frsize
    total_c = sc.f_blocks * sc.f_frsize
    assert total_m > 0
    assert abs(total_m - total_c) <= 0.01 * total_c, (total_m, total_c)
    free_m = sm.f_bavail * sm.f_frsize
    free_c = sc.f_bavail * sc.f_frsize
    assert abs(free_m - free_c) <= max(0.02 * total_c, 256 << 20), (free_m, free_c)
    assert sm.f_namemax == 255
    # df on the mount works
    r = subprocess.run(["df", "-P", ckptfs.mnt], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_name_too_long(ckptfs):
    ok = "a" * 255
    bad = "b" * 256
    write_file(ckptfs.path(ok), b"x")
    assert read_file(ckptfs.path(ok)) == b"x"
    assert ok in os.listdir(ckptfs.mnt)
    expect_errno(errno.ENAMETOOLONG, os.open, ckptfs.path(bad), os.O_CREAT | os.O_WRONLY, 0o644)
    expect_errno(errno.ENAMETOOLONG, os.mkdir, ckptfs.path(bad))
    expect_errno(errno.ENAMETOOLONG, os.stat, ckptfs.path(bad))
    expect_errno(errno.ENAMETOOLONG, os.symlink, "x", ckptfs.path(bad))
    expect_errno(errno.ENAMETOOLONG, os.link, ckptfs.path(ok), ckptfs.path(bad))
    expect_errno(errno.ENAMETOOLONG, os.rename, ckptfs.path(ok), ckptfs.path(bad))
    assert read_file(ckptfs.path(ok)) == b"x"
    assert bad not in os.listdir(ckptfs.mnt)


def test_control_dir_is_read_only(ckptfs):
    ctl = ckptfs.path(".ckptfs")
    assert os.path.isdir(ctl)
    assert {"status.json", "events"} <= set(os.listdir(ctl))
    expect_errno((errno.EROFS, errno.EACCES, errno.EPERM), os.open,
                 os.path.join(ctl, "new"), os.O_CREAT | os.O_WRONLY, 0o644)
    expect_errno((errno.EROFS, errno.EACCES, errno.EPERM), os.open,
                 os.path.join(ctl, "status.json"), os.O_WRONLY)
    expect_errno((errno.EROFS, errno.EACCES, errno.EPERM), os.unlink,
                 os.path.join(ctl, "status.json"))
    expect_errno((errno.EROFS, errno.EACCES, errno.EPERM), os.mkdir, os.path.join(ctl, "d"))
    expect_errno((errno.EROFS, errno.EACCES, errno.EPERM, errno.EBUSY), os.rename,
                 ctl, ckptfs.path("renamed"))
    json.loads(read_file(os.path.join(ctl, "status.json")))
    # moving into or out of the control directory is a cross-device move
    write_file(ckptfs.path("f"), b"x")
    expect_errno(errno.EXDEV, os.rename, ckptfs.path("f"), os.path.join(ctl, "f"))
    expect_errno(errno.EXDEV, os.rename, os.path.join(ctl, "events"), ckptfs.path("ev"))
    assert read_file(ckptfs.path("f")) == b"x"
