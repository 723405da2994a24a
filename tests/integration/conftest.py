"""Fixtures for the ckptfs integration tests: real FUSE mounts of the real daemon.

Run (as root, with /dev/fuse):
    CKPTFS_BIN=/path/to/ckptfs /usr/bin/python3 -m pytest -v tests/integration

With CKPTFS_TEST_FUSE_URING=1 the run sets the fuse module's enable_uring parameter (and
puts it back at the end), so every mount serves its requests over io_uring; where the
kernel has no such parameter the run ends at once, saying so, with nothing run. With
CKPTFS_TEST_FUSE_URING=0 it clears the parameter for the run instead (every mount over
/dev/fuse, whatever the machine is set to); unset, the machine's setting stands.

Every mount made here lives in its own directory /tmp/ckptfs-it-XXXX/{mnt,cache} and is
ALWAYS unmounted at teardown, whatever happened (fusermount3 -u, then a lazy umount -l,
then the daemon is killed).  A per-test watchdog SIGKILLs the daemons of a test that runs
past its time limit, so a hung FUSE request fails the test (ENOTCONN) instead of hanging
the whole run.  Mark a test with @pytest.mark.timeout_s(N) to change its limit.
"""
import os
import signal
import subprocess
import sys
import tempfile
import shutil
import threading
import time

import pytest

from ckptfs_testlib import (  # noqa: F401
    CKPTFS_BIN, HERE, PYTHON, DEFAULT_TIMEOUT_S, _BIN_FROM_ENV, _ALL_LOCK, _ALL_MOUNTS,
    CkptfsMount, _cleanup_all, mounted_in_proc, torch_available,
)


_URING_PARAM = "/sys/module/fuse/parameters/enable_uring"
_uring_was = None


def _set_uring(value):
    with open(_URING_PARAM, "w") as f:
        f.write(value + "\n")


def pytest_configure(config):
    global _uring_was
    config.addinivalue_line("markers", "timeout_s(n): per-test watchdog limit in seconds")
    want = os.environ.get("CKPTFS_TEST_FUSE_URING")
    if want == "1":
        if not os.path.exists(_URING_PARAM):
            pytest.exit(f"CKPTFS_TEST_FUSE_URING=1: skipped, this kernel has no FUSE over io_uring "
                        f"({_URING_PARAM} is missing)", returncode=0)
        with open(_URING_PARAM) as f:
            _uring_was = f.read().strip()
        _set_uring("Y")
    elif want == "0" and os.path.exists(_URING_PARAM):
        with open(_URING_PARAM) as f:
            _uring_was = f.read().strip()
        _set_uring("N")

    # A pytest killed with SIGTERM/SIGHUP (CI timeout, Ctrl-C'ed wrapper) runs no atexit
    # handlers: kill our daemons and unmount before dying.
    def on_signal(sig, frame):
        with _ALL_LOCK:
            mounts = list(_ALL_MOUNTS)
        for m in mounts:
            m.abort()
        _cleanup_all()
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)


def pytest_sessionfinish(session, exitstatus):
    _cleanup_all()
    if _uring_was is not None:
        _set_uring(_uring_was)


# ----------------------------------------------------------------------------- fixtures

@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture(scope="session")
def ckptfs_bin():
    if not os.path.exists("/dev/fuse"):
        pytest.skip("/dev/fuse is missing: FUSE integration tests need the fuse device")
    if os.geteuid() != 0:
        pytest.skip("the ckptfs integration tests run as root")
    if shutil.which("fusermount3") is None:
        pytest.skip("fusermount3 is missing (apt install fuse3)")
    if not os.access(CKPTFS_BIN, os.X_OK):
        if _BIN_FROM_ENV:
            pytest.fail(f"CKPTFS_BIN={_BIN_FROM_ENV} is not an executable file")
        pytest.skip(f"ckptfs binary not built at {CKPTFS_BIN} (build it or set CKPTFS_BIN)")
    return CKPTFS_BIN


@pytest.fixture(autouse=True)
def _watchdog(request):
    """Kill the daemons of a test that runs past its limit so blocked syscalls return."""
    marker = request.node.get_closest_marker("timeout_s")
    limit = marker.args[0] if marker else DEFAULT_TIMEOUT_S
    fired = []

    def fire():
        fired.append(time.monotonic())
        with _ALL_LOCK:
            mounts = list(_ALL_MOUNTS)
        for m in mounts:
            m.abort()

    t = threading.Timer(limit, fire)
    t.daemon = True
    t.start()
    yield
    t.cancel()
    if fired:
        pytest.fail(f"watchdog: test exceeded {limit}s; the ckptfs daemons were killed")


@pytest.fixture
def make_ckptfs(request, ckptfs_bin):
    """Factory: make_ckptfs(*mount_args, foreground=False, start=True) -> CkptfsMount."""
    mounts = []

    def make(*args, foreground=False, start=True):
        m = CkptfsMount(args, foreground=foreground)
        mounts.append(m)
        if start:
            m.start()
        return m

    yield make
    rep = getattr(request.node, "rep_call", None)
    for m in mounts:
        if rep is not None and rep.failed:
            sys.stdout.write(f"\n---- ckptfs log for {m.mnt} ----\n{m.daemon_log()}\n")
        m.close()
        assert not mounted_in_proc(m.mnt), f"mount {m.mnt} left behind"


@pytest.fixture
def ckptfs(make_ckptfs):
    """A fresh mount with default options."""
    return make_ckptfs()


@pytest.fixture
def outside_dir():
    """A scratch directory outside any mount."""
    d = tempfile.mkdtemp(prefix="ckptfs-it-plain-", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def dcp_reference(tmp_path_factory):
    """A real 2-rank torch DCP checkpoint written to a plain directory (session cached)."""
    if not torch_available():
        pytest.skip(f"torch is not importable by {PYTHON}: DCP tests need torch")
    d = str(tmp_path_factory.mktemp("dcpref") / "ckpt")
    r = subprocess.run([PYTHON, os.path.join(HERE, "dcp_save.py"), "save", d, "--world-size", "2"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"dcp_save.py failed: {r.stderr[-3000:]}"
    return d


