"""A fault-injecting HTTP proxy for the remote-tier tests (issue 15).

It stands between ckptfs and s3rver (``--s3-endpoint`` points at the proxy) and forwards each
request, or, with the probability configured for the request's method, does one thing wrong
with it instead:

  flip_request   flips one bit of the request body before forwarding it (what a bad NIC,
                 a broken middlebox or memory error does to a PUT)
  flip_response  forwards faithfully, then flips one bit of the response body (a GET's data)
  truncate       forwards, then sends the response headers and only half the body and closes
                 (for a response without a body: closes without answering; the request was
                 applied but the answer lost)
  reset          reads the request and resets the connection (TCP RST), forwarding nothing
  status_5xx     answers 500 InternalError or 503 SlowDown, forwarding nothing
  stall          waits ``stall_s`` before forwarding

At most one fault per request, drawn from a seeded RNG, so a run is repeatable as far as the
client's own timing allows. Which requests the draws land on depends on that timing, so a
test that needs a fault of some kind to happen at all names it in ``first``: the first
requests of the method (with a body, for a flip) get those faults, in order, before any draw. Every fault is counted (``counts()``: {"PUT flip_request": 3, ...}).
Only stdlib; threads; binds 127.0.0.1; stops injecting after ``fault_window_s`` and shuts down
for good after ``lifetime_s`` whatever the test does, so a hung test cannot leave it behind.

    proxy = FaultProxy(upstream_port, {"PUT": Faults(flip_request=0.1, reset=0.05)}, seed=7)
    proxy.start(); ...; proxy.stop_faults(); ...; proxy.close()
"""
import http.client
import http.server
import random
import socket
import socketserver
import struct
import threading
import time
from dataclasses import dataclass, fields

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
              "upgrade", "expect"}


@dataclass
class Faults:
    """Probabilities (0..1) of each fault for one method; their sum must stay <= 1."""
    flip_request: float = 0.0
    flip_response: float = 0.0
    truncate: float = 0.0
    reset: float = 0.0
    status_5xx: float = 0.0
    stall: float = 0.0
    stall_s: float = 2.0
    first: tuple = ()  # faults given for certain to the method's first requests, in order

    def kinds(self):
        return [(f.name, getattr(self, f.name)) for f in fields(self)
                if f.name not in ("stall_s", "first")]


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class FaultProxy:
    def __init__(self, upstream_port, faults, seed=0, fault_window_s=600, lifetime_s=900,
                 upstream_host="127.0.0.1"):
        for method, f in faults.items():
            total = sum(p for _, p in f.kinds())
            if total > 1.0:
                raise ValueError(f"{method}: fault probabilities add up to {total} > 1")
        self.upstream = (upstream_host, upstream_port)
        self.faults = dict(faults)
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._counts = {}
        self._requests = {}
        self._forced = {method: list(f.first) for method, f in faults.items()}
        self._faults_until = time.monotonic() + fault_window_s
        self._lifetime_s = lifetime_s
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, and 100-continue for curl's PUTs
            timeout = 60  # an idle client connection is dropped

            def log_message(self, *args):
                pass

            def _any(self):
                proxy._handle(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        self._server = _Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = None
        self._timer = None

    # -- control
    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def start(self):
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self._timer = threading.Timer(self._lifetime_s, self.close)
        self._timer.daemon = True
        self._timer.start()
        return self

    def set_faults(self, faults):
        """Replaces the per-method faults (e.g. to start GET flips once a mount is up)."""
        with self._lock:
            self.faults = dict(faults)
            self._forced = {method: list(f.first) for method, f in faults.items()}

    def stop_faults(self):
        with self._lock:
            self._faults_until = 0

    def close(self):
        if self._timer:
            self._timer.cancel()
        self._server.shutdown()
        self._server.server_close()

    def counts(self):
        with self._lock:
            return dict(self._counts)

    def requests(self):
        """Requests seen, by method."""
        with self._lock:
            return dict(self._requests)

    # -- the work
    def _draw(self, method, has_body):
        with self._lock:
            self._requests[method] = self._requests.get(method, 0) + 1
            f = self.faults.get(method)
            if f is None or time.monotonic() >= self._faults_until:
                return None, None
            r = self._rng.random()
            bit = self._rng.getrandbits(62)
            forced = self._forced.get(method)
            if forced and (has_body or forced[0] != "flip_request"):
                return forced.pop(0), bit
            for kind, p in f.kinds():
                if r < p:
                    return kind, bit
                r -= p
            return None, None

    def _count(self, method, kind):
        with self._lock:
            key = f"{method} {kind}"
            self._counts[key] = self._counts.get(key, 0) + 1

    @staticmethod
    def _flip(body, bit):
        if not body:
            return body, False
        b = bytearray(body)
        i = bit % (len(b) * 8)
        b[i // 8] ^= 1 << (i % 8)
        return bytes(b), True

    def _handle(self, h):
        method = h.command
        n = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(n) if n else b""
        kind, bit = self._draw(method, bool(body))

        if kind == "reset":
            self._count(method, kind)
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.connection.close()
            h.close_connection = True
            return
        if kind == "status_5xx":
            self._count(method, kind)
            status, code = (503, "SlowDown") if bit & 1 else (500, "InternalError")
            doc = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>"
                   f"<Message>injected by fault_proxy</Message></Error>").encode()
            h.send_response(status)
            h.send_header("Content-Type", "application/xml")
            h.send_header("Content-Length", str(len(doc)))
            h.end_headers()
            if method != "HEAD":
                h.wfile.write(doc)
            return
        if kind == "stall":
            self._count(method, kind)
            time.sleep(self.faults[method].stall_s)
        if kind == "flip_request":
            body, flipped = self._flip(body, bit)
            if flipped:
                self._count(method, kind)
            else:
                kind = None

        # Forward, with the client's own Host (it is signed).
        up = http.client.HTTPConnection(*self.upstream, timeout=120)
        try:
            up.putrequest(method, h.path, skip_host=True, skip_accept_encoding=True)
            for name, value in h.headers.items():
                if name.lower() not in HOP_BY_HOP and name.lower() != "content-length":
                    up.putheader(name, value)
            if body or method in ("PUT", "POST"):
                up.putheader("Content-Length", str(len(body)))
            up.endheaders(body if body else None)
            resp = up.getresponse()
            data = resp.read()
            status, headers = resp.status, resp.getheaders()
        finally:
            up.close()

        if kind == "flip_response":
            data, flipped = self._flip(data, bit)
            if flipped:
                self._count(method, kind)
        truncated = kind == "truncate"
        if truncated:
            self._count(method, kind)
            if not data:  # applied, but the answer is lost
                h.close_connection = True
                return
        h.send_response_only(status)
        for name, value in headers:
            if name.lower() not in HOP_BY_HOP and name.lower() != "content-length":
                h.send_header(name, value)
        h.send_header("Content-Length", (resp.getheader("Content-Length") or "0") if method == "HEAD"
                      else str(len(data)))
        if truncated:
            h.send_header("Connection", "close")
        h.end_headers()
        if method != "HEAD":
            h.wfile.write(data[:len(data) // 2] if truncated else data)
        if truncated:
            h.wfile.flush()
            h.close_connection = True
