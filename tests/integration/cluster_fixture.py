"""Several ckptfs mounts on one bucket, standing in for the nodes of one job (cluster
mode, SPEC section 9; docs/cluster.md).

The bucket is on a private Ceph gateway (ceph_fixture.py), the real S3 server whose
conditional writes the cluster protocol relies on (SPEC section 9 requires them; a
mount with --node refuses s3rver, which ignores them: test_cluster_options.py).

Each node is a real mount of the real daemon with its own cache directory and
`--remote s3://ckpt/<prefix> --s3-endpoint <server> --node <name> --refresh 0.2`.
Nodes are named a, b, c, ... in order.

    @pytest.fixture
    def cluster(request, ckptfs_bin, monkeypatch):
        with cluster_fixture.clusters(request, monkeypatch) as make:
            yield make

    def test_x(cluster):
        c = cluster(2)                  # a bucket + nodes a and b, mounted
        c["a"].path("run/step1")        # a CkptfsMount per node (ckptfs_testlib)
        c.roots()                       # mountpoints, node order
        e = c.add("e")                  # one more node (a fresh, empty cache)

Teardown, also when the test or a mount fails: every node's daemon log is printed if
the test failed, every mount is unmounted (CkptfsMount.close: fusermount3 -u, a lazy
unmount, then the daemon is killed), and then the server is stopped and its data removed.
The conftest watchdog kills the daemons of a test that runs past its limit.
"""
import contextlib
import os
import signal
import sys

import pytest

import ceph_fixture
from ckptfs_testlib import (CkptfsMount, _pid_alive, _wait_pid_gone, force_unmount,
                            mounted_in_proc)

REFRESH_S = 0.2
PREFIX = "team/job"
NODE_NAMES = "abcdefgh"


class Cluster:
    def __init__(self, server, prefix=PREFIX, refresh=REFRESH_S):
        self.server = server
        self.prefix = prefix
        self.refresh = refresh
        self.nodes = {}              # name -> CkptfsMount, in the order added

    def node_args(self, name, *extra, endpoint=None):
        return ["--remote", f"s3://{self.server.bucket}/{self.prefix}",
                "--s3-endpoint", endpoint or self.server.endpoint,
                "--node", name, "--refresh", str(self.refresh), *map(str, extra)]

    def add(self, name, *extra, endpoint=None):
        """Mounts node `name` (a new cache) and returns its CkptfsMount; `endpoint`: the
        node reaches the bucket there (a fault proxy in front of the server) instead."""
        assert name not in self.nodes, f"node {name} exists"
        m = CkptfsMount(self.node_args(name, *extra, endpoint=endpoint))
        self.nodes[name] = m         # registered before start: closed even if start fails
        m.start()
        return m

    def start(self, n, *extra):
        for name in NODE_NAMES[:n]:
            self.add(name, *extra)
        return self

    def kill9(self, name, then=None):
        """SIGKILLs node `name`'s daemon (a node that dies), calls then() (say, to kill the
        trainer that held files open there: after the daemon, so that no release reaches
        it), then cleans up the dead FUSE mount (fusermount3 -u, else a lazy unmount).
        The cache is kept for restart()."""
        m = self.nodes[name]
        pid = m.pid
        assert pid and _pid_alive(pid), f"node {name}: daemon is not running"
        os.kill(pid, signal.SIGKILL)
        assert _wait_pid_gone(pid, 20), f"node {name}: daemon {pid} survived SIGKILL"
        m.pid = None
        if then is not None:
            then()
        assert force_unmount(m.mnt), f"node {name}: cannot clean up the dead mount {m.mnt}"

    def restart(self, name):
        """Mounts node `name` again on the same cache with the same options (--node name)."""
        m = self.nodes[name]
        m.history.append(f"---- node {name} restarted ----")
        return m.restart()

    def __getitem__(self, name):
        return self.nodes[name]

    def names(self):
        return list(self.nodes)

    def mounts(self):
        return list(self.nodes.values())

    def roots(self, names=None):
        """Mountpoints of `names` (default: every node), in that order."""
        return [self.nodes[n].mnt for n in (names or self.nodes)]

    def logs(self):
        return "".join(f"\n---- ckptfs log of node {n} ({m.mnt}) ----\n{m.daemon_log()}\n"
                       for n, m in self.nodes.items())

    def close(self):
        """Unmounts every node (never raises); returns the mountpoints left mounted."""
        left = []
        for m in reversed(self.mounts()):
            try:
                m.close()
            except Exception as e:  # noqa: BLE001
                sys.stdout.write(f"closing {m.mnt}: {e!r}\n")
            if mounted_in_proc(m.mnt):
                left.append(m.mnt)
        return left


def require_store():
    """Skips the test when Ceph is not installed (fails it under CI)."""
    if not ceph_fixture.ceph_available():
        what = "Ceph (ceph-mon, ceph-osd, radosgw)"
        if os.environ.get("CI"):
            pytest.fail(f"{what} is not installed (packaging/install-deps.sh installs it)")
        pytest.skip(f"{what} is not installed: the cluster tests need it (packaging/install-deps.sh)")


def start_store(monkeypatch):
    """A private Ceph gateway with its credentials in the environment."""
    require_store()
    return start_ceph_gateway(monkeypatch)


def start_ceph_gateway(monkeypatch):
    gw = ceph_fixture.CephGateway()
    try:
        gw.start()
    except Exception:
        gw.close()
        raise
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ceph_fixture.ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", ceph_fixture.SECRET_KEY)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return gw


@contextlib.contextmanager
def clusters(request, monkeypatch):
    """Starts one server and yields a factory make(n, *extra_mount_args) -> Cluster of n
    nodes (a, b, ...) on it. On exit, also after a failure: the nodes' daemon logs are
    printed if the test failed, every mount is unmounted, then the server is stopped.

    A test module turns it into a fixture (a fixture imported from another module
    would shadow the test functions' argument, which linters flag):

        @pytest.fixture
        def cluster(request, ckptfs_bin, monkeypatch):
            with cluster_fixture.clusters(request, monkeypatch) as make:
                yield make
    """
    server = start_store(monkeypatch)
    made = []

    def make(n, *extra, prefix=PREFIX, refresh=REFRESH_S):
        c = Cluster(server, prefix=prefix, refresh=refresh)
        made.append(c)
        return c.start(n, *extra)

    left = []
    try:
        yield make
    finally:
        try:
            rep = getattr(request.node, "rep_call", None)
            for c in made:
                if rep is not None and rep.failed:
                    sys.stdout.write(c.logs())
                left += c.close()
        finally:
            server.close()
    assert not left, f"mounts left behind: {left}"
