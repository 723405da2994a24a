#!/usr/bin/env python3
"""Builds the seed corpora of the fuzz targets from real inputs (stdlib only).

Usage: make_seeds.py SHARED_DIR SOURCE_DIR OUT_DIR

Writes OUT_DIR/<target>/<name> for the targets pickle_reader, dcp_metadata,
torch_zip, safetensors_header and olmo_metadata, from:
  - SHARED_DIR/testdata/dcp/**/.metadata (and SOURCE_DIR/tests/fixtures/**)
                                                 -> dcp_metadata, pickle_reader
  - each torch.save zip inside SHARED_DIR/testdata/dcp/**/*.distcp (found by
    its end-of-central-directory record) and each **/*.pt -> torch_zip, and
    their data.pkl records -> pickle_reader
  - the first 8 + N bytes of each **/*.safetensors -> safetensors_header
  - **/metadata.json and **/.metadata.json under SHARED_DIR/testdata and
    SOURCE_DIR/tests/fixtures -> olmo_metadata
  - SOURCE_DIR/src/formats/testdata/* (pickles, .metadata, safetensors, json)
  - pickles of Python values this script makes (protocols 2-5, memo sharing,
    cycles, OrderedDict, sets, bytearray, big ints) -> pickle_reader
Missing inputs are skipped; nothing here is fatal except an unwritable OUT_DIR.
"""
import collections
import hashlib
import io
import os
import pickle
import struct
import sys
import zipfile

TARGETS = ("pickle_reader", "dcp_metadata", "torch_zip", "safetensors_header", "olmo_metadata",
           "s3_xml", "cluster_records")


def walk(root, match):
    if not os.path.isdir(root):
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            if match(name):
                yield os.path.join(dirpath, name)


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


class Corpus:
    def __init__(self, out):
        self.out = out
        self.counts = collections.Counter()
        for t in TARGETS:
            os.makedirs(os.path.join(out, t), exist_ok=True)

    def add(self, target, data, max_len=1 << 20):
        if data is None or len(data) == 0 or len(data) > max_len:
            return
        name = hashlib.sha1(data).hexdigest()
        path = os.path.join(self.out, target, name)
        if not os.path.exists(path):
            with open(path, "wb") as f:
                f.write(data)
            self.counts[target] += 1


def zips_in(blob):
    """Each complete ZIP archive inside blob (torch.save items of a .distcp)."""
    found = []
    pos = blob.find(b"PK\x05\x06")
    while pos >= 0:
        if pos + 22 <= len(blob):
            cd_size, cd_offset = struct.unpack_from("<II", blob, pos + 12)
            comment = struct.unpack_from("<H", blob, pos + 20)[0]
            end = pos + 22 + comment
            cd_start = pos - cd_size
            loc = pos - 20
            if loc >= 0 and blob[loc:loc + 4] == b"PK\x06\x07":
                z64 = loc - 56
                if z64 >= 0 and blob[z64:z64 + 4] == b"PK\x06\x06":
                    cd_size, cd_offset = struct.unpack_from("<QQ", blob, z64 + 40)
                    cd_start = z64 - cd_size
            start = cd_start - cd_offset
            if 0 <= start < pos and blob[start:start + 4] == b"PK\x03\x04" and end <= len(blob):
                found.append(blob[start:end])
        pos = blob.find(b"PK\x05\x06", pos + 1)
    return found


def data_pickles(archive):
    try:
        with zipfile.ZipFile(io.BytesIO(archive)) as z:
            return [z.read(n) for n in z.namelist() if n.endswith("/data.pkl")]
    except Exception:  # not a zip Python can read: fine, the zip itself is a seed
        return []


def safetensors_head(blob):
    if blob is None or len(blob) < 8:
        return None
    n = struct.unpack_from("<Q", blob)[0]
    return blob[:8 + n] if 8 + n <= len(blob) else None


def generated_pickles():
    shared = ["shared"] * 3
    cyclic = [1, 2]
    cyclic.append(cyclic)
    values = [
        None, True, False, 0, 255, 256, 65535, 65536, -1, 2**31, -2**31 - 1, 2**63 - 1, -2**63,
        1.5, float("inf"), "text", "x" * 300, b"bytes", b"y" * 300, bytearray(b"ba"),
        (), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4), [], [shared, shared], {}, {"a": 1, 2: "b"},
        set(), {1, 2}, frozenset({3}), collections.OrderedDict([("k", [1.0]), ("j", (None,))]),
        cyclic, {"nested": {"deeper": [{"deepest": (b"",)}]}},
    ]
    out = []
    for proto in (2, 3, 4, 5):
        for v in values:
            out.append(pickle.dumps(v, protocol=proto))
        out.append(pickle.dumps(values, protocol=proto))
    return out


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    shared, source, out = sys.argv[1:]
    c = Corpus(out)
    testdata = os.path.join(shared, "testdata")
    dcp = os.path.join(testdata, "dcp")
    fixtures = os.path.join(source, "src", "formats", "testdata")

    # Checkpoints: the shared real ones, and any under tests/fixtures.
    ckpt_roots = (dcp, os.path.join(source, "tests", "fixtures"))
    for root in ckpt_roots:
        for path in walk(root, lambda n: n == ".metadata"):
            blob = read(path)
            c.add("dcp_metadata", blob)
            c.add("pickle_reader", blob)
    for path in walk(fixtures, lambda n: n.endswith(".metadata") or n.endswith(".pickle")):
        blob = read(path)
        c.add("pickle_reader", blob)
        if path.endswith(".metadata"):
            c.add("dcp_metadata", blob)

    for root in ckpt_roots:
        for path in walk(root, lambda n: n.endswith(".distcp") or n.endswith(".pt")):
            blob = read(path) or b""
            archives = [blob] if path.endswith(".pt") else zips_in(blob)
            for a in archives:
                c.add("torch_zip", a)
                for p in data_pickles(a):
                    c.add("pickle_reader", p)

    for root in (testdata, fixtures, ckpt_roots[1]):
        for path in walk(root, lambda n: n.endswith(".safetensors")):
            c.add("safetensors_header", safetensors_head(read(path)))

    for root in (testdata, fixtures, os.path.join(source, "tests", "fixtures")):
        for path in walk(root, lambda n: n in ("metadata.json", ".metadata.json")
                         or (root == fixtures and n.endswith(".json"))):
            c.add("olmo_metadata", read(path))

    for p in generated_pickles():
        c.add("pickle_reader", p)

    print("make_seeds: " + ", ".join("%s %d" % (t, c.counts[t]) for t in TARGETS))


if __name__ == "__main__":
    main()
