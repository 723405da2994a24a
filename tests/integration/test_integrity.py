"""End-to-end integrity of uploads under injected faults (issue 15).

A fault-injecting proxy (fault_proxy.py) sits between ckptfs and s3rver and, at about 30% of
requests, flips bits in PUT bodies, resets connections, answers 5xx and truncates answers.
Afterwards every object s3rver stored must be byte-identical to what was written (read from
s3rver's own files), every flipped body must have been caught by ckptfs's checksums (its
count of damaged uploads equals the proxy's count of flips), and a cold mount reads every
step back byte-identical.

s3rver 3.7.1 checks neither Content-MD5 nor x-amz-checksum-crc32c; it answers with the MD5
of what it received as the ETag, which is what catches the flips here (docs/operations.md,
"Integrity of uploads").
"""
import os

import pytest

from ckptfs_testlib import read_file, tree_digest, write_file
from fault_proxy import FaultProxy, Faults
from test_remote import MiB, payload, s3, wait_persisted, write_step  # noqa: F401 (fixture)

PREFIX = "team/exp"


def s3rver_object(server, key):
    """The bytes s3rver keeps for key, read from its data directory (no HTTP in between)."""
    parts = f"{PREFIX}/{key}".split("/")
    path = os.path.join(server.dir, "data", server.bucket, *parts[:-1], parts[-1] + "._S3rver_object")
    return read_file(path)


def steps_and_files():
    steps = {}
    for i in range(4):
        files = {f"shard{j}.bin": payload(3 * MiB + 1000 * i + j, 7 * i + j) for j in range(2)}
        if i == 0:
            files["big.bin"] = payload(20 * MiB + 17, 99)  # multipart: three parts of 8 MiB
        steps[f"run/step{i + 1}"] = files
    return steps


@pytest.mark.timeout_s(500)
def test_put_bit_flips_resets_5xx_and_truncation_never_persist_a_damaged_byte(make_ckptfs, s3):
    faults = {
        # The first PUTs get one fault of each kind the checks below count on, whatever
        # order the draws reach the requests in (a run with no flip at all checks nothing).
        "PUT": Faults(flip_request=0.12, reset=0.06, status_5xx=0.06, truncate=0.06,
                      first=("flip_request", "reset", "flip_request", "status_5xx")),
        "POST": Faults(reset=0.1, status_5xx=0.1, truncate=0.1),
        "GET": Faults(reset=0.1, status_5xx=0.1, truncate=0.1),
    }
    proxy = FaultProxy(s3.port, faults, seed=15, fault_window_s=400, lifetime_s=480).start()
    try:
        m = make_ckptfs("--remote", f"s3://{s3.bucket}/{PREFIX}", "--s3-endpoint", proxy.endpoint)
        steps = steps_and_files()
        for step, files in steps.items():
            write_step(m, step, files)
            assert m.commit(step).returncode == 0
        for step in steps:
            wait_persisted(m, step, timeout=300)
        proxy.stop_faults()
        counts = proxy.counts()
        remote = m.status()["remote"]

        # Every object s3rver holds is what was written, the commit objects too.
        for step, files in steps.items():
            for name, data in files.items():
                assert s3rver_object(s3, f"{step}/{name}") == data, f"{step}/{name} stored damaged"
            assert s3rver_object(s3, f"{step}/.ckptfs-commit.json")

        # Faults of every kind happened, and each flipped body was caught.
        flips = counts.get("PUT flip_request", 0)
        assert flips > 0, counts
        for kind in ("PUT reset", "PUT status_5xx"):
            assert counts.get(kind, 0) > 0, counts
        injected = sum(counts.values())
        assert injected >= 0.15 * sum(proxy.requests().values()), (counts, proxy.requests())
        assert remote["upload_checksum_mismatches"] == flips, (remote, counts)
        print(f"injected {counts} in {proxy.requests()} requests; ckptfs caught "
              f"{remote['upload_checksum_mismatches']} damaged uploads")
        log = read_file(os.path.join(m.cache, "ckptfs.log")).decode(errors="replace")
        assert log.count("checksum mismatch") >= flips, log[-3000:]
    finally:
        proxy.close()

    # A cold mount (its own empty cache, straight to s3rver) reads every step back.
    b = make_ckptfs("--remote", f"s3://{s3.bucket}/{PREFIX}", "--s3-endpoint", s3.endpoint)
    for step, files in steps.items():
        assert b.xattr(step, "user.ckptfs.persisted") == "true"
        for name, data in files.items():
            assert read_file(b.path(step, name)) == data


@pytest.mark.timeout_s(300)
def test_get_bit_flips_are_never_served(make_ckptfs, s3):
    a = make_ckptfs("--remote", f"s3://{s3.bucket}/{PREFIX}", "--s3-endpoint", s3.endpoint)
    files = {f"shard{j}.bin": payload(4 * MiB + j, 40 + j) for j in range(3)}
    write_step(a, "run/step1", files)
    assert a.commit("run/step1").returncode == 0
    wait_persisted(a, "run/step1")

    proxy = FaultProxy(s3.port, {}, seed=16, fault_window_s=200, lifetime_s=280).start()
    try:
        b = make_ckptfs("--remote", f"s3://{s3.bucket}/{PREFIX}", "--s3-endpoint", proxy.endpoint)
        assert b.xattr("run/step1", "user.ckptfs.persisted") == "true"
        # Flips start once the mount is up: they hit the data fetched by reads.
        proxy.set_faults({"GET": Faults(flip_response=0.5)})
        for name, data in files.items():
            got = None
            for _ in range(20):  # a damaged fetch may be EIO; reading again must heal it
                try:
                    got = read_file(b.path("run/step1", name))
                    break
                except OSError:
                    continue
            assert got == data, f"{name}: damaged bytes served"
        assert proxy.counts().get("GET flip_response", 0) > 0
        with open(b.path(".ckptfs", "metrics")) as f:
            caught = sum(int(float(line.split()[-1])) for line in f
                         if line.startswith("ckptfs_remote_checksum_mismatches_total"))
        print(f"injected {proxy.counts()}; ckptfs caught {caught} damaged range(s), served "
              f"none; every file read back byte-identical")
    finally:
        proxy.close()
