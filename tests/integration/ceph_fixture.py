"""A real Ceph RADOS Gateway (S3) on 127.0.0.1 for the integration tests.

s3rver (s3rver_fixture.py) ignores conditional writes, so anything that depends on
`If-None-Match: *` being honoured (the cluster protocol's create-once keys) needs a
server that implements them.  This runs a one-node Ceph cluster from Debian's packages
(ceph-mon, ceph-osd, radosgw, ceph-common; packaging/install-deps.sh installs them):

  * one monitor (mon.a), msgr2 only, on a free port of 127.0.0.1;
  * one OSD (osd.0) with the memstore object store: the data lives in the OSD's memory,
    `memstore device bytes` is only a cap, and nothing touches a disk but the temp dir;
  * one radosgw (client.rgw) with the beast frontend on another free port of 127.0.0.1,
    path-style addressing only (no `rgw dns name`).

Everything (ceph.conf, mon and osd data, logs, admin sockets, pid files) lives in a fresh
directory /tmp/ckptfs-ceph-XXXX with its own fsid and ports, and every command gets
`-c <that ceph.conf>`, so several gateways can run at once and /etc/ceph and
/var/lib/ceph are never read or written.  There is no cephx (auth ... = none) and no
keyring.  stop() takes the S3 endpoint away and start() brings it back, as S3rver's do
(only the gateway stops: the monitor and the OSD keep the data); shutdown() takes the
daemons down gateway, OSD, monitor (SIGTERM, then SIGKILL), which memstore does not
survive, and close() also removes the directory.  A test or fixture that starts one
always closes it, also on failure.  Each daemon runs in its own process group (a stop
signals the whole group), with PR_SET_PDEATHSIG set, so even a pytest killed with SIGKILL takes the daemons with
it (only the temp dir is left); the flip side is that a gateway must be started from a
thread that outlives it (the main thread, as fixtures are).

Facts this relies on (Ceph 16.2 "pacific", bookworm), pinned by test_ceph_gateway.py:

  * PUT with `If-None-Match: *` on an existing key answers 412 PreconditionFailed, and
    of concurrent such PUTs of a new key exactly one succeeds;
  * a PUT whose Content-MD5 does not match the body answers 400 BadDigest;
  * plain PUT/GET/LIST-with-prefix behave as on AWS S3.

Start-up takes about 1.2 s on 2 cores (most of it the OSD booting and the gateway
creating its pools); the three daemons start with about 130 MiB resident together
(mon 35, osd 50, radosgw 46 MiB), plus what is stored (memstore holds it in the OSD).

    gw = CephGateway().start()      # user ACCESS_KEY/SECRET_KEY, bucket gw.bucket
    gw.endpoint                     # "http://127.0.0.1:<port>", for --s3-endpoint
    gw.aws("s3api", "list-objects-v2", "--bucket", gw.bucket)
    gw.close()

or, in a test, the `ceph_s3` fixture: one gateway per test module, a fresh bucket per
test (a test module gets the fixtures with `pytest_plugins = ["ceph_fixture"]`).
"""
import atexit
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest

ACCESS_KEY = "CKPTFSCEPHTESTKEY000"
SECRET_KEY = "ckptfs-ceph-test-secret-0000000000000000"
REGION = "us-east-1"
UID = "ckptfs"

CEPH_BINARIES = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "monmaptool", "ceph")
# How much of each daemon's log goes into a start-up error.
LOG_TAIL = 3000

# Every gateway started by this process and not yet stopped, so an exiting pytest that
# skipped a finalizer (an internal error, a KeyboardInterrupt) still stops them.
_LIVE = set()
_LIVE_LOCK = threading.Lock()


def ceph_available():
    """True when the Ceph daemons and tools this needs are installed."""
    return all(shutil.which(b) for b in CEPH_BINARIES) and shutil.which("curl") is not None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent():
    """A command prefix that makes the kernel SIGKILL the command when the thread that
    started it exits (PR_SET_PDEATHSIG, kept across exec), so a pytest killed with
    SIGKILL leaves no daemon behind.  setpriv (util-linux, essential in Debian) sets it
    just before exec, which a preexec_fn in a threaded pytest could not do safely."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


def _tail(path, n=LOG_TAIL):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n))
            return f.read().decode(errors="replace")
    except OSError as e:
        return f"({e})"


class CephStartError(RuntimeError):
    pass


class CephGateway:
    def __init__(self, bucket="ckpt", memstore_bytes=4 << 30):
        """memstore_bytes: the OSD's `memstore device bytes`, the size it reports (writes
        stop once it is about 95% full); memory is used only for what is stored."""
        self.bucket = bucket
        self.memstore_bytes = memstore_bytes
        self.dir = tempfile.mkdtemp(prefix="ckptfs-ceph-", dir="/tmp")
        self.fsid = str(uuid.uuid4())
        self.mon_port = free_port()
        self.port = free_port()
        self.conf = os.path.join(self.dir, "ceph.conf")
        self.procs = {}              # daemon name -> Popen, in start order (stops reverse it)
        self.startup_s = None
        self._bucket_seq = itertools.count(1)

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def log_path(self, name):
        return os.path.join(self.dir, "log", f"{name}.log")

    # ------------------------------------------------------------------ configuration
    def _write_conf(self):
        d = self.dir
        conf = f"""\
[global]
fsid = {self.fsid}
mon host = v2:127.0.0.1:{self.mon_port}
# Nothing outside the temp dir: data, logs, admin sockets, pid files.
run dir = {d}/run
admin socket = {d}/run/$name.asok
pid file = {d}/run/$name.pid
log file = {d}/log/$name.log
# The monitor's cluster and audit logs (default /var/log/ceph/ceph.$channel.log).
mon cluster log file = {d}/log/$channel.log
mon data = {d}/mon/$name
osd data = {d}/osd/$name
rgw data = {d}/rgw/$name
keyring = /dev/null
# A test cluster: no cephx at all.
auth cluster required = none
auth service required = none
auth client required = none
# Without cephx there are no session keys for "secure" mode; the default ("secure crc")
# makes daemons fail to talk to the monitor.
ms mon client mode = crc secure
# msgr2 only: one listening socket per daemon fewer.
ms bind msgr1 = false
# One OSD: one replica.  CRUSH places replicas on distinct OSDs rather than hosts
# (with one replica either works; this keeps a second OSD, if ever added, usable).
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon warn on pool no redundancy = false
osd crush chooseleaf type = 0
# RGW creates about 7 pools; 8 PGs each is plenty (there is no mgr to autoscale them).
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
# Commit monitor proposals at once instead of every second: start-up 14 s -> 1.2 s.
paxos propose interval = 0.05
# The monitor shuts down when its disk has less than this % free; a test cluster on a
# busy /tmp should not.
mon data avail crit = 1
mon data avail warn = 2
# Without cephx there is nothing to reclaim; keep it out of `ceph health`.
mon warn on insecure global id reclaim allowed = false

[osd]
osd objectstore = memstore
# memstore keeps objects in RAM; this is only the cap the OSD reports as its size.
memstore device bytes = {self.memstore_bytes}
# CRUSH weight 1 rather than the size in TiB (0.004 for a 4 GiB memstore).
osd crush initial weight = 1
public addr = 127.0.0.1
cluster addr = 127.0.0.1

[client.rgw]
# beast on 127.0.0.1 only.  tcp_nodelay=1: without it every request after the first
# on a kept-alive connection takes ~43 ms instead of 1-2 ms (the response's second
# write waits for the client's delayed ACK).  ms_tcp_nodelay, the messenger's option,
# is true by default and does not touch the HTTP socket.
rgw frontends = beast endpoint=127.0.0.1:{self.port} tcp_nodelay=1
# The default, 512 threads, costs ~8 MiB more and a test never needs that many.
rgw thread pool size = 64
# Not needed for tests, and they would otherwise wake up in the background.
rgw dynamic resharding = false
"""
        with open(self.conf, "w") as f:
            f.write(conf)

    # ------------------------------------------------------------------ processes
    def _run(self, *args, timeout=60):
        """Runs a Ceph tool against this cluster; raises CephStartError on failure."""
        return self._run_plain(args[0], "-c", self.conf, *args[1:], timeout=timeout)

    def _run_plain(self, *cmd, timeout=60):
        try:
            r = subprocess.run([*_die_with_parent(), *cmd], capture_output=True, text=True,
                               timeout=timeout, stdin=subprocess.DEVNULL, start_new_session=True,
                               cwd=self.dir)
        except subprocess.TimeoutExpired:
            raise self._error(f"{' '.join(cmd)} timed out after {timeout}s")
        if r.returncode != 0:
            raise self._error(f"{' '.join(cmd)} exited {r.returncode}: "
                              f"{(r.stderr or r.stdout)[-LOG_TAIL:]}")
        return r.stdout

    def _spawn(self, name, *args):
        out = open(os.path.join(self.dir, "log", f"{name}.out"), "ab")
        try:
            # -f: stay in the foreground (so we own the process) and log to `log file`.
            self.procs[name] = subprocess.Popen(
                _die_with_parent() + [args[0], "-f", "-c", self.conf, *args[1:]],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, cwd=self.dir)
        finally:
            out.close()

    def _check_alive(self):
        for name, p in self.procs.items():
            if p.poll() is not None:
                raise self._error(f"{name} exited with status {p.returncode}")

    def _error(self, what):
        parts = [f"Ceph gateway start-up failed in {self.dir}: {what}"]
        for name in self.procs:
            for path in (self.log_path(name), os.path.join(self.dir, "log", f"{name}.out")):
                if os.path.exists(path) and os.path.getsize(path):
                    parts.append(f"---- tail of {path} ----\n{_tail(path)}")
        return CephStartError("\n".join(parts))

    def _wait(self, what, pred, deadline):
        while True:
            self._check_alive()
            v = pred()
            if v:
                return v
            if time.monotonic() > deadline:
                raise self._error(f"timed out waiting for {what}")
            time.sleep(0.05)

    # ------------------------------------------------------------------ start / stop
    def start(self, timeout=60):
        """Starts the cluster; after stop(), only the gateway again (the data is kept)."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        if "osd.0" in self.procs:
            self._spawn("client.rgw", "radosgw", "-n", "client.rgw")
            self._wait("the gateway to answer HTTP", self._http_up, deadline)
            return self
        with _LIVE_LOCK:
            _LIVE.add(self)
        try:
            self._start(deadline)
        except BaseException:
            self.shutdown()
            raise
        self.startup_s = time.monotonic() - t0
        return self

    def _start(self, deadline):
        for sub in ("run", "log", "mon/mon.a", "osd/osd.0", "rgw/client.rgw"):
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
        self._write_conf()

        # The monitor, from a monmap naming just it.
        monmap = os.path.join(self.dir, "monmap")
        self._run_plain("monmaptool", "--create", "--fsid", self.fsid, "--enable-all-features",
                        "--addv", "a", f"[v2:127.0.0.1:{self.mon_port}]", monmap)
        self._run("ceph-mon", "--mkfs", "-i", "a", "--monmap", monmap)
        self._spawn("mon.a", "ceph-mon", "-i", "a")

        # The OSD: the monitor allocates its id (the first, 0) and then it boots into the
        # cluster and adds itself to the CRUSH map (osd crush update on start).
        osd_uuid = str(uuid.uuid4())
        osd_id = self._run("ceph", "--connect-timeout", "30", "osd", "new", osd_uuid).strip()
        if osd_id != "0":
            raise self._error(f"'ceph osd new' gave id {osd_id!r}, expected 0")
        self._run("ceph-osd", "--no-mon-config", "-i", "0", "--mkfs", "--osd-uuid", osd_uuid)
        self._spawn("osd.0", "ceph-osd", "-i", "0")

        # The gateway creates its pools once the OSD is up and then starts listening.
        self._spawn("client.rgw", "radosgw", "-n", "client.rgw")
        self._wait("the gateway to answer HTTP", self._http_up, deadline)

        self._run("radosgw-admin", "user", "create", "--uid", UID, "--display-name", "ckptfs tests",
                  "--access-key", ACCESS_KEY, "--secret", SECRET_KEY)
        self.create_bucket(self.bucket)

    def _http_up(self):
        try:
            urllib.request.urlopen(self.endpoint + "/", timeout=1).read()
            return True
        except urllib.error.HTTPError:
            return True          # any S3 answer (anonymous ListBuckets): up
        except OSError:
            return False

    def stop(self):
        """Takes the S3 endpoint away, as S3rver.stop() does: the gateway stops, the
        monitor and the OSD (memstore: the data) stay, and start() brings it back."""
        self._stop_daemons(["client.rgw"])

    def shutdown(self):
        """Stops every daemon, gateway first and monitor last (each SIGTERM, then SIGKILL).
        The data is gone (memstore)."""
        self._stop_daemons(list(self.procs))
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def _stop_daemons(self, names):
        for name in reversed([n for n in self.procs if n in names]):
            p = self.procs.pop(name)
            for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
                try:
                    # The whole group: anything the daemon forked goes too.
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass
                try:
                    p.wait(timeout=wait_s)
                    break
                except subprocess.TimeoutExpired:
                    continue

    def close(self):
        self.shutdown()
        shutil.rmtree(self.dir, ignore_errors=True)

    def rss_kib(self):
        """{daemon name: resident set size in KiB} of the running daemons."""
        out = {}
        for name, p in self.procs.items():
            try:
                with open(f"/proc/{p.pid}/status") as f:
                    for line in f:
                        if line.startswith("VmRSS:"):
                            out[name] = int(line.split()[1])
            except OSError:
                pass
        return out

    # ------------------------------------------------------------------ S3 clients
    def aws_env(self):
        env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
                   AWS_DEFAULT_REGION=REGION, AWS_EC2_METADATA_DISABLED="true",
                   # botocore >= 1.36 adds CRC32 checksums to every upload (over https
                   # in an aws-chunked trailer, which pacific's RGW rejects); ask for
                   # them only where an operation requires one, like older awscli.
                   AWS_REQUEST_CHECKSUM_CALCULATION="when_required",
                   AWS_RESPONSE_CHECKSUM_VALIDATION="when_required")
        for k in ("AWS_SESSION_TOKEN", "AWS_PROFILE"):
            env.pop(k, None)
        return env

    def aws(self, *args, check=True, timeout=120):
        r = subprocess.run(["aws", "--endpoint-url", self.endpoint, *args], env=self.aws_env(),
                           capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"aws {' '.join(args)} failed: {r.stderr[-2000:]}")
        return r

    def curl_op(self, method, path, *extra, body=None, output="-", write_out="\n%{http_code}"):
        """curl's arguments (without "curl") for one SigV4-signed request to /path, path-style.

        curl 7.88's --aws-sigv4 signs only Host and X-Amz-Date and, lacking an
        x-amz-content-sha256 header, signs the hash of an empty payload, which RGW
        rejects for a PUT with a body (SignatureDoesNotMatch); UNSIGNED-PAYLOAD is what
        it signs instead.  `body` is a file name, uploaded with -T (no form Content-Type)."""
        args = ["-sS", "-o", output, "-w", write_out, "-X", method,
                "--aws-sigv4", f"aws:amz:{REGION}:s3", "--user", f"{ACCESS_KEY}:{SECRET_KEY}",
                "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", *extra]
        if body is not None:
            args += ["-T", body]
        return args + [f"{self.endpoint}/{path.lstrip('/')}"]

    def curl(self, method, path, *extra, body=None, timeout=60):
        """One signed request with curl: (HTTP status, response body as text)."""
        r = subprocess.run(["curl", *self.curl_op(method, path, *extra, body=body)],
                           capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise AssertionError(f"curl {method} {path} failed: {r.stderr[-2000:]}")
        text, _, code = r.stdout.rpartition("\n")
        return int(code), text

    def curl_parallel(self, ops, timeout=120):
        """Runs several curl_op()s at once from one curl (all connections opened
        together, none waiting for another to finish); returns curl's stdout."""
        cmd = ["curl", "--parallel", "--parallel-immediate", "--parallel-max", str(len(ops))]
        for i, op in enumerate(ops):
            cmd += (["--next"] if i else []) + op
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise AssertionError(f"parallel curl failed: {r.stderr[-2000:]}")
        return r.stdout

    def create_bucket(self, name):
        status, text = self.curl("PUT", name)
        if status != 200:
            raise self._error(f"creating bucket {name}: HTTP {status} {text[-500:]}")
        return name

    def new_bucket(self, prefix="t"):
        """Creates a fresh bucket, makes it self.bucket and returns its name."""
        self.bucket = self.create_bucket(f"{prefix}-{next(self._bucket_seq)}")
        return self.bucket

    def keys(self, prefix):
        """Every key under s3://bucket/prefix, via awscli."""
        r = self.aws("s3api", "list-objects-v2", "--bucket", self.bucket, "--prefix", prefix,
                     "--output", "json")
        out = json.loads(r.stdout or "{}")
        return sorted(o["Key"] for o in out.get("Contents", []))

    def put(self, key, data):
        """PUTs `data` (bytes) at s3://bucket/key with awscli, as another writer would."""
        with tempfile.NamedTemporaryFile() as f:
            f.write(data)
            f.flush()
            self.aws("s3api", "put-object", "--bucket", self.bucket, "--key", key, "--body", f.name)

    def get(self, key):
        with tempfile.NamedTemporaryFile() as f:
            self.aws("s3api", "get-object", "--bucket", self.bucket, "--key", key, f.name)
            return open(f.name, "rb").read()


@atexit.register
def _stop_all():
    with _LIVE_LOCK:
        live = list(_LIVE)
    for gw in live:
        gw.close()


# ----------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def ceph_gateway():
    """One Ceph gateway for the whole test module (start-up costs a few seconds)."""
    if not ceph_available():
        msg = ("Ceph is not installed (apt install ceph-mon ceph-osd radosgw ceph-common; "
               "packaging/install-deps.sh installs it)")
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    gw = CephGateway()
    try:
        gw.start()
        yield gw
    finally:
        gw.close()


@pytest.fixture
def ceph_s3(ceph_gateway, monkeypatch):
    """The module's gateway with a fresh, empty bucket (ceph_s3.bucket) for this test, and
    its credentials in the environment for ckptfs and awscli."""
    ceph_gateway.new_bucket()
    for k, v in ceph_gateway.aws_env().items():
        if k.startswith("AWS_"):
            monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    yield ceph_gateway
