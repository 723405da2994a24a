"""Helpers shared by the ckptfs integration tests (mount management, xattrs, libc calls).
See conftest.py for the fixtures."""

import atexit
import ctypes
import errno
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time


HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
_BIN_FROM_ENV = os.environ.get("CKPTFS_BIN")
CKPTFS_BIN = os.path.abspath(_BIN_FROM_ENV or os.path.join(REPO, "build", "ckptfs"))
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
DEFAULT_TIMEOUT_S = 180

STATE_XATTR = "user.ckptfs.state"

# Every mount ever started by this process, so that nothing is left behind even if a
# fixture's own teardown does not run (atexit / session finish).
_ALL_MOUNTS = []
_ALL_LOCK = threading.Lock()


# ----------------------------------------------------------------------------- helpers

def _pid_alive(pid):
    """True while any thread of `pid` is not a zombie.  The thread-group leader
    can be a zombie while another thread (say, one inside fsync) still runs
    and holds the process's files and locks, so every task is checked."""
    if not pid:
        return False
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError):
        return False
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except (FileNotFoundError, ProcessLookupError):
            continue
        # the state letter follows the ")" closing the command name
        if stat[stat.rfind(")") + 2:].split()[0] not in ("Z", "X"):
            return True
    return False


def _wait_pid_gone(pid, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _pid_alive(pid):
            return True
        time.sleep(0.02)
    return not _pid_alive(pid)


def daemon_pids_for(mnt):
    """Pids of running processes whose command line names CKPTFS_BIN's basename and `mnt`."""
    # Never touch the mount here (no realpath/stat): it may be hung.
    mnt = os.path.normpath(mnt)
    base = os.path.basename(CKPTFS_BIN)
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        if not argv or os.path.basename(argv[0]) != base:
            continue
        if any(os.path.normpath(a) == mnt for a in argv[1:]):
            if _pid_alive(int(d)):
                found.append(int(d))
    return found


def mounted_in_proc(mnt):
    """True if /proc/mounts has an entry for mnt (works even when the mount is dead or hung:
    it never touches the mount itself)."""
    mnt = os.path.normpath(mnt)
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 1 and parts[1].replace("\\040", " ") == mnt:
                    return True
    except OSError:
        pass
    return False


def _quiet(cmd, timeout=30):
    try:
        return subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              stdin=subprocess.DEVNULL, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        return None


def force_unmount(mnt, tries=5):
    """Unmount `mnt` by any means: fusermount3 -u (a few tries), then a lazy unmount."""
    for i in range(tries):
        if not mounted_in_proc(mnt):
            return True
        _quiet(["fusermount3", "-u", mnt])
        if not mounted_in_proc(mnt):
            return True
        time.sleep(0.1 * (i + 1))
    _quiet(["fusermount3", "-u", "-z", mnt])
    if mounted_in_proc(mnt):
        _quiet(["umount", "-l", mnt])
    return not mounted_in_proc(mnt)


def sha256_file(path, bufsize=4 << 20):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(bufsize)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def tree_digest(root):
    """{relative path: sha256} of every regular file under root (symlinks not followed)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in filenames:
            p = os.path.join(dirpath, n)
            if os.path.islink(p):
                continue
            out[os.path.relpath(p, root)] = sha256_file(p)
    return out


def write_file(path, data, fsync=False):
    with open(path, "wb") as f:
        f.write(data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def get_xattr(path, name, follow=True):
    """Value of xattr `name` as str, or None if the attribute does not exist."""
    try:
        return os.getxattr(path, name, follow_symlinks=follow).decode()
    except OSError as e:
        if e.errno == errno.ENODATA:
            return None
        raise


def run_cli(*args, timeout=60, **kw):
    """Run the ckptfs binary; output goes through files, never pipes (a daemonising child
    that keeps a pipe open must not hang us)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.run([CKPTFS_BIN, *map(str, args)], stdout=out, stderr=err,
                           stdin=subprocess.DEVNULL, timeout=timeout, **kw)
        out.seek(0)
        err.seek(0)
        p.stdout = out.read().decode(errors="replace")
        p.stderr = err.read().decode(errors="replace")
    return p


class MountError(Exception):
    pass


# ----------------------------------------------------------------------------- the mount

class CkptfsMount:
    """One ckptfs mount: a private base dir with mnt/ and cache/."""

    def __init__(self, args=(), foreground=False, base=None):
        # realpath once, here: later code must never stat paths on a possibly hung mount
        self.base = os.path.realpath(base or tempfile.mkdtemp(prefix="ckptfs-it-", dir="/tmp"))
        os.chmod(self.base, 0o755)   # other uids must be able to reach mnt/
        self.mnt = os.path.join(self.base, "mnt")
        self.cache = os.path.join(self.base, "cache")
        os.makedirs(self.mnt, exist_ok=True)
        os.makedirs(self.cache, exist_ok=True)
        self.args = [str(a) for a in args]
        self.foreground = foreground
        self.pid = None
        self.proc = None
        self.dev = None
        self.log_path = os.path.join(self.base, "daemon.log")
        self.history = []          # daemon logs / mount outputs, for failure reports
        with _ALL_LOCK:
            _ALL_MOUNTS.append(self)

    # -- paths
    def path(self, *rel):
        return os.path.join(self.mnt, *rel)

    def __truediv__(self, rel):
        return self.path(rel)

    def _abs(self, p):
        return p if os.path.isabs(p) else self.path(p)

    # -- lifecycle
    def start(self, args=None, foreground=None, timeout=30):
        if args is not None:
            self.args = [str(a) for a in args]
        if foreground is not None:
            self.foreground = foreground
        cmd = [CKPTFS_BIN, "mount", self.mnt, "--cache", self.cache, *self.args]
        if self.foreground:
            cmd.append("--foreground")
            log = open(self.log_path, "ab")
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
            log.close()
            deadline = time.monotonic() + timeout
            while not os.path.ismount(self.mnt):
                if self.proc.poll() is not None:
                    raise MountError(f"ckptfs --foreground exited with {self.proc.returncode}: "
                                     f"{self.daemon_log()}")
                if time.monotonic() > deadline:
                    raise MountError(f"mount not ready after {timeout}s: {self.daemon_log()}")
                time.sleep(0.02)
            self.pid = self.proc.pid
        else:
            self.proc = None
            try:
                r = run_cli(*cmd[1:], timeout=timeout)
            except subprocess.TimeoutExpired:
                raise MountError(f"`ckptfs mount` did not return within {timeout}s")
            self.history.append(f"$ {' '.join(cmd)}\nrc={r.returncode}\n{r.stdout}{r.stderr}")
            if r.returncode != 0:
                raise MountError(f"`{' '.join(cmd)}` failed rc={r.returncode}: {r.stderr.strip()}")
            if not os.path.ismount(self.mnt):
                raise MountError("`ckptfs mount` returned 0 but the mountpoint is not mounted")
            self.pid = self._pid_from_status(timeout=10)
        self.dev = os.stat(self.mnt).st_dev
        return self

    def _pid_from_status(self, timeout):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                pid = int(self.status()["pid"])
                if _pid_alive(pid):
                    return pid
                last = f"pid {pid} from status.json is not alive"
            except Exception as e:  # noqa: BLE001
                last = repr(e)
            if time.monotonic() > deadline - timeout + 2:
                # status.json unusable: fall back to the process table (the status.json
                # contract itself is asserted by test_lifecycle)
                pids = daemon_pids_for(self.mnt)
                if len(pids) == 1:
                    return pids[0]
            time.sleep(0.05)
        pids = daemon_pids_for(self.mnt)
        if len(pids) == 1:
            return pids[0]
        raise MountError(f"cannot get the daemon pid from .ckptfs/status.json: {last}")

    @property
    def mounted(self):
        return mounted_in_proc(self.mnt)

    def umount(self, timeout=30):
        """Clean unmount with fusermount3 -u; waits for the daemon to exit.
        Returns the foreground process's exit code (or None in background mode)."""
        deadline = time.monotonic() + timeout
        while mounted_in_proc(self.mnt):
            r = subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True, timeout=30)
            if r.returncode == 0 or not mounted_in_proc(self.mnt):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"fusermount3 -u {self.mnt} keeps failing: {r.stderr!r}")
            time.sleep(0.2)
        rc = None
        if self.proc is not None:
            try:
                rc = self.proc.wait(timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise AssertionError("foreground daemon did not exit after unmount")
        elif self.pid and not _wait_pid_gone(self.pid, max(1, deadline - time.monotonic())):
            raise AssertionError(f"daemon pid {self.pid} still running {timeout}s after unmount")
        self.pid = None
        return rc

    def kill9(self):
        """SIGKILL the daemon and clean up the dead mount (fusermount3 -u / umount -l)."""
        pid = self.pid
        assert pid and _pid_alive(pid), "daemon is not running"
        os.kill(pid, signal.SIGKILL)
        assert _wait_pid_gone(pid, 20), f"daemon {pid} survived SIGKILL"
        if self.proc is not None:
            self.proc.wait(timeout=10)
        self.pid = None
        assert force_unmount(self.mnt), f"cannot clean up the dead mount {self.mnt}"

    def restart(self, args=None, timeout=30):
        if self.pid and _pid_alive(self.pid):
            self.umount()
        elif mounted_in_proc(self.mnt):
            force_unmount(self.mnt)
        return self.start(args=args, timeout=timeout)

    def abort(self):
        """Watchdog: kill the daemon so that blocked FUSE requests fail with ENOTCONN."""
        for pids in ([self.pid], daemon_pids_for(self.mnt)):
            for pid in pids:
                if pid and _pid_alive(pid):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass

    def close(self):
        """Teardown: never leave a mount or a daemon behind."""
        try:
            if mounted_in_proc(self.mnt):
                force_unmount(self.mnt)
        finally:
            pids = {self.pid, *daemon_pids_for(self.mnt)}
            for pid in pids:
                if pid and _pid_alive(pid):
                    try:
                        os.kill(pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
            for pid in pids:
                if pid and not _wait_pid_gone(pid, 5):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    _wait_pid_gone(pid, 5)
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
            if self.proc is not None:
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            if mounted_in_proc(self.mnt):
                force_unmount(self.mnt)
            if not mounted_in_proc(self.mnt):
                shutil.rmtree(self.base, ignore_errors=True)
            with _ALL_LOCK:
                if self in _ALL_MOUNTS:
                    _ALL_MOUNTS.remove(self)

    def daemon_log(self, tail=6000):
        """Mount commands run, the foreground daemon's output and <cache>/ckptfs.log."""
        data = ""
        for path in (self.log_path, os.path.join(self.cache, "ckptfs.log")):
            try:
                with open(path, "rb") as f:
                    data += f"[{path}]\n" + f.read()[-tail:].decode(errors="replace") + "\n"
            except OSError:
                pass
        return ("\n".join(self.history) + "\n" + data)[-tail:]

    # -- ckptfs views
    def state(self, path):
        return get_xattr(self._abs(path), STATE_XATTR)

    def xattr(self, path, name):
        return get_xattr(self._abs(path), name)

    def wait_state(self, path, state, timeout=30):
        """Poll user.ckptfs.state until it equals `state`; fail with the last state/error."""
        p = self._abs(path)
        deadline = time.monotonic() + timeout
        last = None
        while True:
            try:
                last = get_xattr(p, STATE_XATTR)
            except OSError as e:
                last = f"<{errno.errorcode.get(e.errno, e.errno)}>"
            if last == state:
                return
            if last == "broken" and state != "broken":
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        try:
            err = get_xattr(p, "user.ckptfs.error")
        except OSError:
            err = None
        raise AssertionError(f"{path}: state {last!r} (error {err!r}), expected {state!r} "
                             f"within {timeout}s")

    def status(self):
        with open(self.path(".ckptfs", "status.json")) as f:
            return json.load(f)

    def events(self):
        with open(self.path(".ckptfs", "events")) as f:
            return [json.loads(line) for line in f.read().splitlines() if line.strip()]

    def step_status(self, relpath):
        for s in self.status()["steps"]:
            if s.get("path") == relpath:
                return s
        return None

    def commit(self, path, timeout=120):
        return run_cli("commit", self._abs(path), timeout=timeout)

    def latest(self, run=""):
        return os.readlink(self.path(run, "latest"))


def _cleanup_all():
    with _ALL_LOCK:
        mounts = list(_ALL_MOUNTS)
    for m in mounts:
        try:
            m.close()
        except Exception:  # noqa: BLE001
            pass


atexit.register(_cleanup_all)


def torch_available():
    try:
        r = subprocess.run([PYTHON, "-c", "import torch"], capture_output=True, timeout=120)
        return r.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


# ----------------------------------------------------------------------------- libc

libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2


def renameat2(old, new, flags):
    libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                               ctypes.c_uint]
    r = libc.renameat2(AT_FDCWD, os.fsencode(old), AT_FDCWD, os.fsencode(new), flags)
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), old, None, new)


class _timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def utimensat(path, atime, mtime, follow=True):
    """atime/mtime: (sec, nsec) tuples or UTIME_NOW / UTIME_OMIT."""
    def ts(v):
        if v in (UTIME_NOW, UTIME_OMIT):
            return _timespec(0, v)
        return _timespec(v[0], v[1])

    arr = (_timespec * 2)(ts(atime), ts(mtime))
    flags = 0 if follow else 0x100  # AT_SYMLINK_NOFOLLOW
    libc.utimensat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int]
    r = libc.utimensat(AT_FDCWD, os.fsencode(path), ctypes.byref(arr), flags)
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)


def expect_errno(err, fn, *args, **kw):
    """Call fn and require OSError with errno `err` (an int or a tuple of accepted ones)."""
    import pytest
    accepted = err if isinstance(err, tuple) else (err,)
    with pytest.raises(OSError) as ei:
        fn(*args, **kw)
    got = ei.value.errno
    assert got in accepted, (f"{getattr(fn, '__name__', fn)}{args}: errno "
                             f"{errno.errorcode.get(got, got)}, expected "
                             f"{'/'.join(errno.errorcode[a] for a in accepted)}")
    return ei.value
