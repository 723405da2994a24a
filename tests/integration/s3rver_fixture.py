"""s3rver (a real S3 protocol server, npm s3rver@3.7.1) for the remote-tier tests.

It listens on 127.0.0.1 only, on a port chosen here, keeps its data in a temp dir, and is
always stopped by the test that started it (also when the test fails).  stop()/start()
keep the data, so a test can take the server away mid-upload and bring it back.
"""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
S3RVER_BIN = os.environ.get("CKPTFS_S3RVER",
                            os.path.join(REPO, "tests", "s3rver", "node_modules", ".bin", "s3rver"))
ACCESS_KEY = "S3RVER"
SECRET_KEY = "S3RVER"


def s3rver_available():
    return os.access(S3RVER_BIN, os.X_OK) and shutil.which("node") is not None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3rver:
    def __init__(self, bucket="ckpt"):
        self.bucket = bucket
        self.dir = tempfile.mkdtemp(prefix="ckptfs-s3rver-", dir="/tmp")
        self.port = free_port()
        self.proc = None
        self.log = os.path.join(self.dir, "s3rver.log")

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout=30):
        data = os.path.join(self.dir, "data")
        os.makedirs(data, exist_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                # s3rver 3.7.1 makes continuation tokens with DES, which Node 20's
                # OpenSSL 3 only offers from its legacy provider.
                ["node", "--openssl-legacy-provider", S3RVER_BIN, "-d", data, "-a", "127.0.0.1", "-p", str(self.port),
                 "--silent", "--configure-bucket", self.bucket],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"s3rver exited: {open(self.log).read()[-2000:]}")
            try:
                urllib.request.urlopen(self.endpoint + "/", timeout=1).read()
                return self
            except urllib.error.HTTPError:
                return self  # it answers (403 without credentials): up
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("s3rver did not come up")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)
        self.proc = None

    def close(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- awscli, the independent reader of what we upload
    def aws(self, *args, check=True, timeout=300):
        env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
                   AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true")
        env.pop("AWS_SESSION_TOKEN", None)
        r = subprocess.run(["aws", "--endpoint-url", self.endpoint, *args], env=env,
                           capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"aws {' '.join(args)} failed: {r.stderr[-2000:]}")
        return r

    def keys(self, prefix):
        """Every key under s3://bucket/prefix, via awscli."""
        r = self.aws("s3api", "list-objects-v2", "--bucket", self.bucket, "--prefix", prefix,
                     "--output", "json", check=True)
        import json
        out = json.loads(r.stdout or "{}")
        return sorted(o["Key"] for o in out.get("Contents", []))

    def put(self, key, data):
        """PUTs `data` (bytes) at s3://bucket/key with awscli, as another writer would."""
        with tempfile.NamedTemporaryFile() as f:
            f.write(data)
            f.flush()
            self.aws("s3api", "put-object", "--bucket", self.bucket, "--key", key,
                     "--body", f.name)

    def get(self, key):
        with tempfile.NamedTemporaryFile() as f:
            self.aws("s3", "cp", f"s3://{self.bucket}/{key}", f.name, "--quiet")
            return open(f.name, "rb").read()
