"""What the Ceph RADOS Gateway of ceph_fixture.py honours, pinned down for ckptfs.

ckptfs's cluster protocol creates keys at most once with `PUT` + `If-None-Match: *` and
guards uploads with `Content-MD5`; s3rver (the other test server) ignores both, so the
tests that depend on them run against this gateway.  These tests check those facts on
the real server, with curl (its --aws-sigv4 signer) and awscli as the clients:

  * `If-None-Match: *` on an existing key is refused with 412 PreconditionFailed and
    leaves the object alone; after a DELETE the key can be created again;
  * of 16 concurrent `If-None-Match: *` PUTs of a new key exactly one gets 200, the
    rest 412, and the stored object is the winner's body (also for bodies above RGW's
    4 MiB head chunk, where the object is written as head + tail);
  * a `Content-MD5` that does not match the body is rejected with 400 BadDigest and
    nothing is stored;
  * a 6 MiB object round-trips byte for byte (ETag = MD5), and LIST with a prefix
    returns exactly the keys under it;
  * the fixture's stop() and start() take the endpoint away and bring it back with the
    data kept (the monitor and the memstore OSD stay up).

Each test gets a fresh bucket on the module's gateway (the ceph_s3 fixture); the tests
skip when Ceph is not installed.
"""
import base64
import hashlib
import os

import pytest

# The ceph_gateway (per module) and ceph_s3 (fresh bucket per test) fixtures.
pytest_plugins = ["ceph_fixture"]

MiB = 1 << 20


def body_file(tmp_path, name, data):
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


def payload(n, seed):
    # Distinct per seed, so the stored object tells which writer won.
    block = hashlib.sha256(str(seed).encode()).digest() * 128          # 4 KiB
    return (block * (n // len(block) + 1))[:n]


def get(gw, key):
    return gw.curl("GET", f"{gw.bucket}/{key}")


def test_if_none_match_refuses_existing_key(ceph_s3, tmp_path):
    gw = ceph_s3
    key = f"{gw.bucket}/commit/step-1"
    first = body_file(tmp_path, "first", b"first writer")
    second = body_file(tmp_path, "second", b"second writer")

    assert gw.curl("PUT", key, "-H", "If-None-Match: *", body=first)[0] == 200
    status, text = gw.curl("PUT", key, "-H", "If-None-Match: *", body=second)
    assert status == 412 and "<Code>PreconditionFailed</Code>" in text, (status, text)
    assert get(gw, "commit/step-1") == (200, "first writer")

    # A plain PUT still overwrites (the condition is per request, not per key) ...
    assert gw.curl("PUT", key, body=second)[0] == 200
    assert get(gw, "commit/step-1") == (200, "second writer")
    # ... and once the key is deleted it can be created again.
    assert gw.curl("DELETE", key)[0] == 204
    assert gw.curl("PUT", key, "-H", "If-None-Match: *", body=first)[0] == 200
    assert get(gw, "commit/step-1") == (200, "first writer")


@pytest.mark.parametrize("size, rounds", [(64, 4), (5 * MiB, 1)], ids=["64B", "5MiB"])
def test_if_none_match_race_has_one_winner(ceph_s3, tmp_path, size, rounds):
    gw = ceph_s3
    writers = 16
    bodies = [payload(size, i) for i in range(writers)]
    files = [body_file(tmp_path, f"w{i}", b) for i, b in enumerate(bodies)]
    for r in range(rounds):
        key = f"race/{size}/{r}"
        # One curl opens all 16 connections at once, so the PUTs really overlap
        # (separate curl processes would start some milliseconds apart).
        out = gw.curl_parallel([
            gw.curl_op("PUT", f"{gw.bucket}/{key}", "-H", "If-None-Match: *", body=f,
                       output="/dev/null", write_out=f"%{{http_code}} {i}\n")
            for i, f in enumerate(files)])
        results = sorted((int(code), int(i)) for code, i in (line.split() for line in out.splitlines()))
        codes = [code for code, _ in results]
        assert len(codes) == writers, out
        assert codes.count(200) == 1 and codes.count(412) == writers - 1, \
            f"round {r}: {codes}"
        winner = next(i for code, i in results if code == 200)
        assert gw.get(key) == bodies[winner], f"round {r}: stored object is not the winner's"


def test_content_md5_mismatch_is_rejected(ceph_s3, tmp_path):
    gw = ceph_s3
    data = payload(100_000, 1)
    f = body_file(tmp_path, "data", data)

    def md5_b64(b):
        return base64.b64encode(hashlib.md5(b).digest()).decode()

    status, text = gw.curl("PUT", f"{gw.bucket}/obj", "-H", f"Content-MD5: {md5_b64(data + b'x')}",
                           body=f)
    assert status == 400 and "<Code>BadDigest</Code>" in text, (status, text)
    status, text = get(gw, "obj")
    assert status == 404 and "<Code>NoSuchKey</Code>" in text, (status, text)

    # The same upload with the right digest is stored.
    assert gw.curl("PUT", f"{gw.bucket}/obj", "-H", f"Content-MD5: {md5_b64(data)}", body=f)[0] == 200
    assert gw.get("obj") == data


def test_round_trip_and_list_prefix(ceph_s3, tmp_path):
    gw = ceph_s3
    assert gw.keys("") == [], "each test gets an empty bucket"
    big = os.urandom(6 * MiB)
    gw.put("run/step-2/shard-0", big)
    for key in ("run/step-2/meta.json", "run/step-1/meta.json", "run2/x", "other/y"):
        # curl for the small ones: an awscli run costs half a second.
        assert gw.curl("PUT", f"{gw.bucket}/{key}", body=body_file(tmp_path, "small", key.encode()))[0] == 200

    assert gw.get("run/step-2/shard-0") == big
    head = gw.aws("s3api", "head-object", "--bucket", gw.bucket, "--key", "run/step-2/shard-0",
                  "--output", "json")
    assert f'"ETag": "\\"{hashlib.md5(big).hexdigest()}\\""' in head.stdout, head.stdout
    assert f'"ContentLength": {6 * MiB}' in head.stdout, head.stdout

    assert gw.keys("run/") == ["run/step-1/meta.json", "run/step-2/meta.json", "run/step-2/shard-0"]
    assert gw.keys("run") == ["run/step-1/meta.json", "run/step-2/meta.json",
                              "run/step-2/shard-0", "run2/x"]
    assert gw.keys("none/") == []


def test_stop_takes_the_endpoint_away_and_start_brings_the_data_back(ceph_s3, tmp_path):
    """The fault tests take the server away mid-upload (stop) and bring it back (start):
    only the gateway stops, so the memstore OSD keeps what was stored."""
    gw = ceph_s3
    data = payload(64 * 1024, 7)
    assert gw.curl("PUT", f"{gw.bucket}/kept", body=body_file(tmp_path, "kept", data))[0] == 200
    gw.stop()
    try:
        assert not gw._http_up(), "the endpoint still answers after stop()"
    finally:
        gw.start()
    assert gw.get("kept") == data
