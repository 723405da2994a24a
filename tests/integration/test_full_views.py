"""Unsharded views (SPEC section 6): the hidden `.full/` directory of a committed step.

A real 2-rank and a real 4-rank torch 1.13 DCP checkpoint (full_views_gen.py: gloo
ranks, ChunkShardingSpec on dim 0 and dim 1, uneven chunks, float32 / bfloat16 /
float16 / int64, 0-D to 3-D, strided plain tensors, object and BytesIO items) are
written by the trainer THROUGH the mount and commit on `.metadata`; an OLMo-core
safetensors checkpoint (olmo_fixture.py) is copied in. Every view is compared with
the full tensors computed from the generators' recipes, never with anything ckptfs
made:

  .full/<fqn>              full tensor bytes, exact stat size, xattrs user.ckptfs.dtype
                           and user.ckptfs.shape; '%' -> "%25", '/' -> "%2F" in names
  .full/index.json         format, tensors (file, dtype, safetensors_dtype, shape,
                           bytes, shards), bytes, safetensors
  .full/all.safetensors    parsed by the independent reader below (header length,
  .full/<group>.safetensors  padding, tiling, dtype codes), tensor bytes compared
  .full/bytes/<name>       DCP non-tensor items as stored; torch.load gives them back

Also: `.full` is hidden from readdir unless --show-full, absent (ENOENT) in writing
steps, in committed steps without checkpoint metadata and outside steps; read-only;
shards arriving after `.metadata`; truncated shards and garbage metadata never commit;
a hostile item (zip central directory overwritten, sizes kept) gives EIO and a
view_error event on the affected views only; views of shards that are only in the
remote tier (evicted, or a cold mount).

The torch checkpoints are made once per module (spawning ranks is slow here); tests that
need a checkpoint written another way copy the committed step100's files.
"""
import errno
import io
import json
import math
import os
import pickle
import random
import shutil
import stat
import struct
import subprocess
import sys
import time
import zipfile

import pytest

from ckptfs_testlib import (HERE, PYTHON, CkptfsMount, expect_errno, get_xattr, read_file,
                            write_file)
from olmo_fixture import safetensors_bytes, write_olmo_checkpoint
from test_remote import remote_dir, wait_for, wait_persisted  # noqa: F401  (remote_dir: fixture)

GEN = os.path.join(HERE, "full_views_gen.py")
RO_ERRNOS = (errno.EROFS, errno.EACCES, errno.EPERM)
MiB = 1 << 20

ST_ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1,
               "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4,
               "C64": 8, "F64": 8, "I64": 8, "U64": 8}


def escape(fqn):
    return fqn.replace("%", "%25").replace("/", "%2F")


# ----------------------------------------------------------------------------- safetensors

class SafetensorsError(AssertionError):
    pass


def parse_safetensors(data, require_pt=True):
    """An independent safetensors reader (FORMATS.md 3.1): validates the 8-byte LE header
    length, the JSON header (starting with '{', no duplicate keys, right-padded with
    spaces to a multiple of 8), __metadata__ (str -> str, "format": "pt"), the dtype
    codes, each tensor's byte size against its shape, and that the tensors tile the data
    exactly. Returns {name: (dtype code, shape list, bytes)}."""
    def need(cond, why):
        if not cond:
            raise SafetensorsError(why)

    need(len(data) >= 8, f"{len(data)} bytes: no header length")
    (n,) = struct.unpack_from("<Q", data, 0)
    need(0 < n <= 100_000_000, f"header length {n}")
    need(8 + n <= len(data), f"header length {n} past the end of a {len(data)}-byte file")
    need(n % 8 == 0, f"header length {n} is not a multiple of 8")
    raw = data[8:8 + n]
    need(raw[:1] == b"{", "header does not start with '{'")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SafetensorsError(f"header is not UTF-8: {e}")
    body = text.rstrip(" ")
    need(body.endswith("}"), "header padded with something other than spaces")

    def no_dups(pairs):
        keys = [k for k, _ in pairs]
        need(len(keys) == len(set(keys)), f"duplicate keys in the header: {sorted(keys)}")
        return dict(pairs)

    try:
        header = json.loads(body, object_pairs_hook=no_dups)
    except ValueError as e:
        raise SafetensorsError(f"header is not JSON: {e}")
    need(isinstance(header, dict), "header is not an object")
    meta = header.pop("__metadata__", None)
    if meta is not None:
        need(isinstance(meta, dict) and all(isinstance(k, str) and isinstance(v, str)
                                            for k, v in meta.items()),
             f"__metadata__ must map str to str: {meta!r}")
    if require_pt:
        need(meta is not None and meta.get("format") == "pt",
             f'__metadata__ lacks "format": "pt": {meta!r}')
    entries = []
    for name, info in header.items():
        need(isinstance(info, dict) and set(info) == {"dtype", "shape", "data_offsets"},
             f"{name}: bad entry {info!r}")
        dtype, shape, offs = info["dtype"], info["shape"], info["data_offsets"]
        need(dtype in ST_ITEMSIZE, f"{name}: unknown dtype {dtype!r}")
        need(isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape),
             f"{name}: bad shape {shape!r}")
        need(isinstance(offs, list) and len(offs) == 2 and all(isinstance(o, int) for o in offs)
             and 0 <= offs[0] <= offs[1], f"{name}: bad data_offsets {offs!r}")
        need(offs[1] - offs[0] == math.prod(shape) * ST_ITEMSIZE[dtype],
             f"{name}: {offs[1] - offs[0]} bytes for {dtype}{shape}")
        entries.append((offs[0], offs[1], name, dtype, shape))
    entries.sort()
    pos = 0
    for b, e, name, _, _ in entries:
        need(b == pos, f"{name}: data at {b}, expected {pos} (hole or overlap)")
        pos = e
    need(8 + n + pos == len(data), f"data ends at {8 + n + pos}, file is {len(data)} bytes")
    base = 8 + n
    return {name: (dtype, shape, data[base + b:base + e]) for b, e, name, dtype, shape in entries}


def test_safetensors_reader_self_check():
    """The reader above accepts a valid file and rejects each kind of malformed one
    (so that the view checks cannot pass on a reader that accepts anything)."""
    entries = [("a.w", "F32", [2, 3], bytes(range(24))), ("a.b", "BF16", [5], bytes(10)),
               ("s", "I64", [], b"\x01" * 8), ("e", "U8", [0], b"")]
    good = safetensors_bytes(entries, metadata={"format": "pt"})
    got = parse_safetensors(good)
    assert {k: (d, s, b) for k, d, s, b in entries} == got
    (n,) = struct.unpack_from("<Q", good, 0)
    hdr = json.loads(good[8:8 + n])

    def rebuild(header, data=None, pad=True):
        text = json.dumps(header).encode()
        if pad:
            text += b" " * (-len(text) % 8)
        return struct.pack("<Q", len(text)) + text + (good[8 + n:] if data is None else data)

    assert parse_safetensors(rebuild(hdr)) == got
    bad = {
        "no format": rebuild({k: v for k, v in hdr.items() if k != "__metadata__"}),
        "unpadded": rebuild(dict(hdr, x={"dtype": "U8", "shape": [1], "data_offsets": [42, 43]}),
                            data=good[8 + n:] + b"\x00", pad=False),
        "trailing byte": good + b"\x00",
        "short data": good[:-1],
        "length past EOF": struct.pack("<Q", len(good)) + good[8:],
        "hole": rebuild(dict(hdr, **{"a.b": dict(hdr["a.b"], data_offsets=[
            hdr["a.b"]["data_offsets"][0] + 2, hdr["a.b"]["data_offsets"][1] + 2])})),
        "unknown dtype": rebuild(dict(hdr, s=dict(hdr["s"], dtype="Q8"))),
        "size vs shape": rebuild(dict(hdr, s=dict(hdr["s"], shape=[2]))),
        "not json": struct.pack("<Q", 8) + b"{abc    " + good[8 + n:],
        "padded with NULs": struct.pack("<Q", n) + good[8:8 + n].rstrip(b" ").ljust(n, b"\0")
                            + good[8 + n:],
    }
    dup_text = good[8:8 + n].rstrip(b" ")[:-1] + b',"s":' + json.dumps(hdr["s"]).encode() + b"}"
    dup_text += b" " * (-len(dup_text) % 8)
    bad["duplicate key"] = struct.pack("<Q", len(dup_text)) + dup_text + good[8 + n:]
    for why, data in bad.items():
        with pytest.raises(SafetensorsError):
            parse_safetensors(data)
            pytest.fail(f"the reader accepted a file with: {why}")


# ----------------------------------------------------------------------------- helpers

def run_gen(*args, timeout=300):
    r = subprocess.run([PYTHON, GEN, *map(str, args)], capture_output=True, text=True,
                       timeout=timeout)
    return r


def load_json(path):
    with open(path) as f:
        return json.load(f)


def expected_of(exp_dir):
    """(tensor index, bytes index) of an expected dir (bytes index {} if none)."""
    index = load_json(os.path.join(exp_dir, "index.json"))
    bpath = os.path.join(exp_dir, "bytes.json")
    return index, (load_json(bpath) if os.path.exists(bpath) else {})


def exp_bytes(exp_dir, index, fqn):
    return read_file(os.path.join(exp_dir, index[fqn]["file"]))


def groups_of(fqns):
    """{group: {relative name: fqn}} for FQNs with a '.'."""
    out = {}
    for fqn in fqns:
        if "." in fqn:
            g, rest = fqn.split(".", 1)
            out.setdefault(g, {})[rest] = fqn
    return out


def list_step_files(step_dir):
    out = []
    for dp, dns, fns in os.walk(step_dir):
        dns[:] = [d for d in dns if d != ".full"]
        out += [os.path.relpath(os.path.join(dp, f), step_dir) for f in fns]
    return sorted(out)


def copy_files(src, dst, names):
    for rel in names:
        os.makedirs(os.path.dirname(os.path.join(dst, rel)) or dst, exist_ok=True)
        shutil.copyfile(os.path.join(src, rel), os.path.join(dst, rel))


def copy_dcp(src, dst, marker_last=True, mutate=None):
    """Copies a DCP checkpoint dir into dst; `.metadata` last; mutate(rel, data) -> data."""
    os.makedirs(dst, exist_ok=True)
    names = sorted(os.listdir(src), key=lambda n: (n == ".metadata") == marker_last)
    for n in names:
        data = read_file(os.path.join(src, n))
        if mutate:
            data = mutate(n, data)
        write_file(os.path.join(dst, n), data)


def wait_not_committed(m, rel, secs=2.0):
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        st = m.state(rel)
        assert st != "committed", f"{rel} committed: {m.xattr(rel, 'user.ckptfs.error')!r}"
        time.sleep(0.1)
    return m.state(rel)


def check_tensor_files(full, exp_dir, index):
    """Every .full/<escaped fqn>: a read-only regular file, exact size and bytes, xattrs."""
    for fqn, e in sorted(index.items()):
        p = os.path.join(full, escape(fqn))
        try:
            st = os.stat(p)
        except OSError as ex:
            raise AssertionError(f".full/{escape(fqn)}: {ex}")
        assert stat.S_ISREG(st.st_mode), f"{fqn}: not a regular file"
        assert st.st_mode & 0o222 == 0, f"{fqn}: mode {oct(st.st_mode)} has write bits"
        assert st.st_size == e["bytes"], f"{fqn}: stat size {st.st_size}, expected {e['bytes']}"
        got = read_file(p)
        want = exp_bytes(exp_dir, index, fqn)
        assert len(got) == len(want), f"{fqn}: read {len(got)} bytes, expected {len(want)}"
        if got != want:
            first = next(i for i in range(len(want)) if got[i] != want[i])
            raise AssertionError(f"{fqn} ({e['dtype']}{e['shape']}): bytes differ from byte "
                                 f"{first} on")
        assert get_xattr(p, "user.ckptfs.dtype") == e["dtype"], fqn
        shape = get_xattr(p, "user.ckptfs.shape")
        assert shape is not None and json.loads(shape) == e["shape"], (fqn, shape)


def check_listing(full, index, bindex):
    names = set(os.listdir(full))
    want = {escape(f) for f in index} | {"index.json", "all.safetensors"}
    want |= {f"{g}.safetensors" for g in groups_of(index)}
    if bindex:
        want.add("bytes")
    extra = names - want - {"bytes"}
    assert want <= names, f".full lacks {sorted(want - names)}"
    assert not extra, f".full has unexpected entries {sorted(extra)}"
    if bindex:
        assert stat.S_ISDIR(os.stat(os.path.join(full, "bytes")).st_mode)
        assert set(os.listdir(os.path.join(full, "bytes"))) == {escape(f) for f in bindex}


def check_index_json(full, index, bindex, fmt, exact_chunks=True):
    p = os.path.join(full, "index.json")
    data = read_file(p)
    assert os.stat(p).st_size == len(data), "index.json: stat size differs from its contents"
    doc = json.loads(data)
    assert doc["format"] == fmt
    tensors = doc["tensors"]
    assert set(tensors) == set(index), f"index.json tensors differ: {set(tensors) ^ set(index)}"
    for fqn, e in index.items():
        t = tensors[fqn]
        assert t["file"] == escape(fqn), (fqn, t["file"])
        assert t["dtype"] == e["dtype"], (fqn, t["dtype"])
        assert t["safetensors_dtype"] == e["safetensors_dtype"], (fqn, t["safetensors_dtype"])
        assert t["shape"] == e["shape"], (fqn, t["shape"])
        assert t["bytes"] == e["bytes"], (fqn, t["bytes"])
        assert isinstance(t["shards"], list) and t["shards"], (fqn, t["shards"])
        if exact_chunks and "chunks" in e:
            assert len(t["shards"]) == e["chunks"], (fqn, len(t["shards"]), e["chunks"])
    assert set(doc.get("bytes") or {}) == set(bindex)
    for fqn, e in bindex.items():
        b = doc["bytes"][fqn]
        assert b["file"] == "bytes/" + escape(fqn), (fqn, b)
        assert b["bytes"] == e["bytes"], (fqn, b)
    st = doc["safetensors"]
    assert set(st["all.safetensors"]) == set(index)
    for g, rel in groups_of(index).items():
        assert set(st[f"{g}.safetensors"]) == set(rel), (g, st.get(f"{g}.safetensors"))
    for name in st:
        assert os.path.isfile(os.path.join(full, name)), f"index.json names missing {name}"
    return doc


def check_safetensors(full, exp_dir, index, groups=None, include_all=True):
    """all.safetensors (unless not include_all) and the group files (all groups, or
    `groups`) parse and hold exactly the expected tensors."""
    files = {"all.safetensors": {f: f for f in index}} if include_all else {}
    for g, rel in groups_of(index).items():
        if groups is None or g in groups:
            files[f"{g}.safetensors"] = rel
    for fname, names in files.items():
        p = os.path.join(full, fname)
        data = read_file(p)
        assert os.stat(p).st_size == len(data), f"{fname}: stat size differs from its contents"
        try:
            got = parse_safetensors(data)
        except SafetensorsError as e:
            raise AssertionError(f"{fname}: {e}")
        assert set(got) == set(names), f"{fname}: tensors differ: {set(got) ^ set(names)}"
        for name, fqn in names.items():
            dtype, shape, b = got[name]
            e = index[fqn]
            assert dtype == e["safetensors_dtype"] and shape == e["shape"], (fname, name, dtype, shape)
            assert b == exp_bytes(exp_dir, index, fqn), f"{fname}: {name} bytes differ"


def check_bytes_items(full, exp_dir, bindex):
    for fqn, e in bindex.items():
        p = os.path.join(full, "bytes", escape(fqn))
        data = read_file(p)
        assert os.stat(p).st_size == len(data)
        assert data == read_file(os.path.join(exp_dir, e["raw"])), f"bytes/{escape(fqn)} differs"
        # A torch.save zip whose data.pkl is plain pickle for these objects.
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            pkl = next(n for n in z.namelist() if n.endswith("/data.pkl"))
            value = pickle.loads(z.read(pkl))
        if e["kind"] == "bytesio":
            value = value.getvalue()
        with open(os.path.join(exp_dir, e["value"]), "rb") as f:
            assert value == pickle.load(f), fqn


def assert_full_views(full, exp_dir, fmt, exact_chunks=True):
    index, bindex = expected_of(exp_dir)
    check_listing(full, index, bindex)
    check_tensor_files(full, exp_dir, index)
    check_index_json(full, index, bindex, fmt, exact_chunks)
    check_safetensors(full, exp_dir, index)
    if bindex:
        check_bytes_items(full, exp_dir, bindex)


# ----------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def torch_gloo():
    try:
        r = run_gen("probe", timeout=180)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"{PYTHON} cannot run torch: {e}")
    if r.returncode != 0:
        pytest.skip(f"torch with gloo is not usable by {PYTHON}: "
                    f"{(r.stderr or r.stdout).strip().splitlines()[-1:]}")


@pytest.fixture(scope="module")
def fv(ckptfs_bin):
    """One mount (default options) for the module's DCP tests."""
    m = CkptfsMount()
    m.start()
    yield m
    m.close()


@pytest.fixture(autouse=True)
def _module_mount_log(request):
    yield
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed and "fv" in request.fixturenames:
        m = request.getfixturevalue("fv")
        sys.stdout.write(f"\n---- ckptfs log for {m.mnt} ----\n{m.daemon_log()}\n")


def _save_through_mount(m, rel, exp_dir, world, *extra):
    r = run_gen("save", m.path(rel), exp_dir, "--world-size", world, *extra)
    assert r.returncode == 0, f"full_views_gen.py save failed:\n{r.stderr[-4000:]}"
    m.wait_state(rel, "committed", timeout=60)
    return rel, exp_dir


@pytest.fixture(scope="module")
def dcp2(fv, torch_gloo, tmp_path_factory):
    """2 gloo ranks save into the mount (one file per item); (step rel path, expected dir)."""
    return _save_through_mount(fv, "run/step100", str(tmp_path_factory.mktemp("exp2")), 2)


@pytest.fixture(scope="module")
def dcp4(fv, torch_gloo, tmp_path_factory):
    """4 gloo ranks, single_file_per_rank (several items per .distcp)."""
    return _save_through_mount(fv, "run/step200", str(tmp_path_factory.mktemp("exp4")), 4,
                               "--single-file-per-rank")


@pytest.fixture(scope="module")
def dcp2_plain(fv, dcp2, tmp_path_factory):
    """A plain-directory copy of the committed 2-rank checkpoint: (dir, expected dir)."""
    d = str(tmp_path_factory.mktemp("plain2") / "ckpt")
    os.makedirs(d)
    copy_files(fv.path(dcp2[0]), d, list_step_files(fv.path(dcp2[0])))
    return d, dcp2[1]


@pytest.fixture(scope="module")
def olmo(tmp_path_factory):
    base = tmp_path_factory.mktemp("olmo")
    ckpt, exp = str(base / "ckpt"), str(base / "exp")
    write_olmo_checkpoint(ckpt, exp)
    return ckpt, exp


@pytest.fixture(params=["dcp2", "dcp4"])
def dcp(request, fv):
    rel, exp = request.getfixturevalue(request.param)
    return fv, rel, exp


# ----------------------------------------------------------------------------- DCP written through the mount

@pytest.mark.timeout_s(240)
def test_dcp_full_tensors_bit_exact(dcp):
    m, rel, exp = dcp
    full = m.path(rel, ".full")
    index, bindex = expected_of(exp)
    check_listing(full, index, bindex)
    check_tensor_files(full, exp, index)
    assert stat.S_ISDIR(os.stat(full).st_mode)


def test_dcp_index_json(dcp):
    m, rel, exp = dcp
    index, bindex = expected_of(exp)
    check_index_json(m.path(rel, ".full"), index, bindex, "dcp")


def test_dcp_safetensors_files(dcp):
    m, rel, exp = dcp
    index, _ = expected_of(exp)
    check_safetensors(m.path(rel, ".full"), exp, index)
    # model.safetensors holds the model's own parameter names
    got = parse_safetensors(read_file(m.path(rel, ".full", "model.safetensors")))
    assert "layers.0.attn.weight" in got and "big.weight" in got
    got = parse_safetensors(read_file(m.path(rel, ".full", "extra.safetensors")))
    assert set(got) == {"weird%name/x"}


def test_dcp_bytes_items(dcp):
    m, rel, exp = dcp
    _, bindex = expected_of(exp)
    assert set(bindex) == {"extra.epoch", "extra.train_state", "extra.blob"}
    full = m.path(rel, ".full")
    check_bytes_items(full, exp, bindex)
    r = run_gen("check-bytes", os.path.join(full, "bytes"), exp)
    assert r.returncode == 0, f"torch.load of .full/bytes/ items:\n{r.stderr[-3000:]}"


def test_dcp_random_reads(dcp):
    m, rel, exp = dcp
    index, _ = expected_of(exp)
    full = m.path(rel, ".full")
    rng = random.Random(1234)
    targets = {escape(f): exp_bytes(exp, index, f) for f in
               ("model.big.weight", "model.layers.0.mlp.proj", "model.layers.1.qkv",
                "model.scale", "extra.weird%name/x")}
    for name in ("all.safetensors", "model.safetensors", "index.json"):
        targets[name] = read_file(os.path.join(full, name))   # whole reads, checked elsewhere
    for name, want in targets.items():
        size = len(want)
        cases = [(0, size), (0, 1), (1, 7), (3, 4093), (4095, 4098), (4097, 65537),
                 (max(size - 1, 0), 10), (size, 10), (size + 1, 1), (size + 4096, 4096),
                 (0, size + 12345)]
        for _ in range(60):
            cases.append((rng.randrange(0, size + 64),
                          rng.choice([1, 2, 3, 5, 8, 511, 4096, 4097, 131073,
                                      rng.randrange(0, size + 200)])))
        fd = os.open(os.path.join(full, name), os.O_RDONLY)
        try:
            for off, ln in cases:
                got = os.pread(fd, ln, off)
                assert got == want[off:off + ln], f"{name}: pread({ln}, {off}) differs"
        finally:
            os.close(fd)
        # sequential reads in odd sizes
        with open(os.path.join(full, name), "rb", buffering=0) as f:
            parts = []
            while True:
                b = f.read(rng.choice([1, 7, 4095, 4097, 65537]))
                if not b:
                    break
                parts.append(b)
        assert b"".join(parts) == want, f"{name}: sequential odd-size reads differ"


# ----------------------------------------------------------------------------- visibility

def test_full_is_hidden_from_readdir_but_reachable(dcp2, fv):
    rel, _ = dcp2
    step = fv.path(rel)
    assert ".full" not in os.listdir(step)
    ls = subprocess.run(["ls", "-a", step], capture_output=True, text=True, timeout=30)
    assert ls.returncode == 0 and ".full" not in ls.stdout.split(), ls.stdout
    assert stat.S_ISDIR(os.stat(os.path.join(step, ".full")).st_mode)
    assert "index.json" in os.listdir(os.path.join(step, ".full"))
    # nor does it count as a file of the step
    n_files = len(list_step_files(step))
    assert fv.xattr(rel, "user.ckptfs.files") == str(n_files)


@pytest.mark.timeout_s(120)
def test_show_full_lists_it(make_ckptfs, dcp2_plain):
    src, exp = dcp2_plain
    m = make_ckptfs("--show-full")
    copy_dcp(src, m.path("run", "step7"))
    m.wait_state("run/step7", "committed")
    step = m.path("run", "step7")
    assert ".full" in os.listdir(step)
    ls = subprocess.run(["ls", "-a", step], capture_output=True, text=True, timeout=30)
    assert ".full" in ls.stdout.split(), ls.stdout
    index, bindex = expected_of(exp)
    check_listing(os.path.join(step, ".full"), index, bindex)
    check_tensor_files(os.path.join(step, ".full"), exp, index)


def test_full_absent_where_there_is_no_committed_checkpoint(fv, dcp2_plain):
    src, _ = dcp2_plain
    # a writing step holding a whole DCP checkpoint but its .metadata
    w = fv.path("run_w", "step300")
    os.makedirs(w)
    copy_files(src, w, [n for n in os.listdir(src) if n != ".metadata"])
    assert fv.state("run_w/step300") == "writing"
    # a committed step without checkpoint metadata
    os.makedirs(fv.path("run_p", "step1"))
    write_file(fv.path("run_p", "step1", "weights.bin"), b"w" * 1000)
    assert fv.commit("run_p/step1").returncode == 0
    fv.wait_state("run_p/step1", "committed")
    # a whole DCP checkpoint in a directory that is not a step
    plain = fv.path("notastep", "ckpt")
    copy_dcp(src, plain)
    for d in (w, fv.path("run_p", "step1"), plain, fv.path("notastep")):
        expect_errno(errno.ENOENT, os.stat, os.path.join(d, ".full"))
        expect_errno(errno.ENOENT, os.listdir, os.path.join(d, ".full"))
        expect_errno(errno.ENOENT, open, os.path.join(d, ".full", "index.json"), "rb")
        assert ".full" not in os.listdir(d)
    # once the writing step commits, its views appear
    shutil.copyfile(os.path.join(src, ".metadata"), os.path.join(w, ".metadata"))
    fv.wait_state("run_w/step300", "committed")
    assert os.path.isdir(os.path.join(w, ".full"))


def test_full_views_are_read_only(dcp2, fv):
    rel, exp = dcp2
    index, _ = expected_of(exp)
    full = fv.path(rel, ".full")
    p = os.path.join(full, escape("model.layers.0.attn.weight"))
    want = exp_bytes(exp, index, "model.layers.0.attn.weight")
    for flags in (os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_TRUNC, os.O_WRONLY | os.O_APPEND):
        expect_errno(RO_ERRNOS, os.open, p, flags)
    for name in ("index.json", "all.safetensors", os.path.join("bytes", "extra.epoch")):
        expect_errno(RO_ERRNOS, os.open, os.path.join(full, name), os.O_RDWR)
    expect_errno(RO_ERRNOS + (errno.EEXIST,), os.open, os.path.join(full, "new.bin"),
                 os.O_WRONLY | os.O_CREAT, 0o644)
    expect_errno(RO_ERRNOS, os.truncate, p, 0)
    expect_errno(RO_ERRNOS, os.unlink, p)
    expect_errno(RO_ERRNOS + (errno.EEXIST,), os.mkdir, os.path.join(full, "d"))
    expect_errno(RO_ERRNOS + (errno.EXDEV,), os.rename, p, os.path.join(full, "moved"))
    expect_errno(RO_ERRNOS + (errno.ENOTSUP,), os.setxattr, p, "user.ckptfs.dtype", b"int8")
    assert not os.path.exists(os.path.join(full, "new.bin"))
    assert read_file(p) == want
    assert get_xattr(p, "user.ckptfs.dtype") == "float32"


# ----------------------------------------------------------------------------- OLMo-core

@pytest.mark.timeout_s(120)
def test_olmo_model_and_optim_views(make_ckptfs, olmo):
    """save_model_and_optim_state's layout (model/ and optim/ with metadata.json each),
    copied file by file in a shuffled order into step400-tmp, renamed to step400."""
    ckpt, exp = olmo
    m = make_ckptfs()
    files = list_step_files(ckpt)
    random.Random(7).shuffle(files)
    tmp = m.path("run", "step400-tmp")
    copy_files(ckpt, tmp, files)
    os.rename(tmp, m.path("run", "step400"))
    m.wait_state("run/step400", "committed")
    step = m.path("run", "step400")
    expect_errno(errno.ENOENT, os.stat, os.path.join(step, ".full"))  # no metadata here
    for group in ("model", "optim"):
        full = os.path.join(step, group, ".full")
        gexp = os.path.join(exp, group)
        index, _ = expected_of(gexp)
        assert ".full" not in os.listdir(os.path.join(step, group))
        check_tensor_files(full, gexp, index)
        check_index_json(full, index, {}, "olmo-core-safetensors", exact_chunks=False)
        check_safetensors(full, gexp, index)
        names = set(os.listdir(full)) - {"bytes"}
        assert {escape(f) for f in index} | {"index.json", "all.safetensors"} <= names
    got = parse_safetensors(read_file(os.path.join(step, "model", ".full", "blocks.safetensors")))
    assert "0.attention.w_q.weight" in got


@pytest.mark.timeout_s(120)
def test_olmo_flat_step_cp_in_shuffled_order_commits(make_ckptfs, olmo):
    """metadata.json + rank_N.safetensors directly in the step: metadata.json (a commit
    marker) first, then the rank files shuffled; commits once the last one is closed."""
    ckpt, exp = olmo
    m = make_ckptfs()
    src = os.path.join(ckpt, "model")
    step = m.path("run", "step10")
    ranks = sorted(n for n in os.listdir(src) if n != "metadata.json")
    random.Random(3).shuffle(ranks)
    copy_files(src, step, ["metadata.json"] + ranks[:-1])
    state = wait_not_committed(m, "run/step10", 1.0)
    assert state == "writing"
    expect_errno(errno.ENOENT, os.stat, os.path.join(step, ".full"))
    copy_files(src, step, ranks[-1:])
    m.wait_state("run/step10", "committed")
    gexp = os.path.join(exp, "model")
    assert_full_views(os.path.join(step, ".full"), gexp, "olmo-core-safetensors",
                      exact_chunks=False)


def test_olmo_shard_contradicting_metadata_is_broken(make_ckptfs, olmo):
    ckpt, _ = olmo
    m = make_ckptfs()
    src = os.path.join(ckpt, "model")
    os.makedirs(m.path("run", "step1"))
    write_file(m.path("run", "step1", "x.bin"), b"x")
    assert m.commit("run/step1").returncode == 0
    step = m.path("run", "step2")
    names = sorted(os.listdir(src), key=lambda n: n == "metadata.json")
    os.makedirs(step)
    for n in names:
        data = read_file(os.path.join(src, n))
        if n == "rank_1.safetensors":
            data += b"\0" * 64                   # longer than its header describes
        write_file(os.path.join(step, n), data)
    m.wait_state("run/step2", "broken")
    assert m.latest("run") == "step1"
    expect_errno(errno.ENOENT, os.stat, os.path.join(step, ".full"))


# ----------------------------------------------------------------------------- arrival order and bad input

@pytest.mark.timeout_s(120)
def test_shards_arriving_after_metadata(fv, dcp2_plain):
    src, exp = dcp2_plain
    step = fv.path("run_late", "step10")
    os.makedirs(step)
    shutil.copyfile(os.path.join(src, ".metadata"), os.path.join(step, ".metadata"))
    assert wait_not_committed(fv, "run_late/step10", 1.0) == "writing"
    assert "waiting" in (fv.xattr("run_late/step10", "user.ckptfs.error") or "")
    expect_errno(errno.ENOENT, os.stat, os.path.join(step, ".full"))
    shards = sorted(n for n in os.listdir(src) if n != ".metadata")
    random.Random(11).shuffle(shards)
    copy_files(src, step, shards[:-1])
    assert fv.state("run_late/step10") == "writing"
    copy_files(src, step, shards[-1:])
    fv.wait_state("run_late/step10", "committed")
    assert fv.latest("run_late") == "step10"
    assert_full_views(os.path.join(step, ".full"), exp, "dcp")


@pytest.mark.timeout_s(120)
def test_truncated_shard_or_garbage_metadata_never_commits(fv, dcp2_plain):
    src, exp = dcp2_plain
    copy_dcp(src, fv.path("run_bad", "step1"))
    fv.wait_state("run_bad/step1", "committed")
    storage = load_json(os.path.join(exp, "storage.json"))
    big = max(storage, key=lambda e: e["length"])["file"]

    # A shard shorter than .metadata says: never committed (SPEC 3: it waits for the
    # rest of the file; accepted as broken too), latest stays, no views.
    copy_dcp(src, fv.path("run_bad", "step2"),
             mutate=lambda n, d: d[:len(d) // 2] if n == big else d)
    state = wait_not_committed(fv, "run_bad/step2", 2.0)
    assert state in ("writing", "broken"), state
    assert big in (fv.xattr("run_bad/step2", "user.ckptfs.error") or ""), \
        fv.xattr("run_bad/step2", "user.ckptfs.error")
    assert fv.latest("run_bad") == "step1"
    expect_errno(errno.ENOENT, os.stat, fv.path("run_bad", "step2", ".full"))

    # Garbage .metadata: broken, with a reason and an event.
    garbage = bytes(random.Random(5).getrandbits(8) for _ in range(4000))
    copy_dcp(src, fv.path("run_bad", "step3"),
             mutate=lambda n, d: garbage if n == ".metadata" else d)
    fv.wait_state("run_bad/step3", "broken")
    assert fv.xattr("run_bad/step3", "user.ckptfs.error")
    assert any(e.get("event") == "broken" and e.get("path") == "run_bad/step3"
               for e in fv.events())
    assert fv.latest("run_bad") == "step1"
    expect_errno(errno.ENOENT, os.stat, fv.path("run_bad", "step3", ".full"))
    # the good step's views are unaffected
    index, _ = expected_of(exp)
    p = fv.path("run_bad", "step1", ".full", "model.ids")
    assert read_file(p) == exp_bytes(exp, index, "model.ids")


def _corrupt_central_directory(item):
    """Overwrites a torch.save zip's central directory (all but its first and last 4
    bytes) with garbage; same length."""
    sig, _, _, _, _, cd_size, cd_off, _ = struct.unpack("<IHHHHIIH", item[-22:])
    assert sig == 0x06054B50, "no end-of-central-directory record at the item's end"
    if cd_off == 0xFFFFFFFF or cd_size == 0xFFFFFFFF:
        cd_size, cd_off = struct.unpack_from("<QQ", item, len(item) - 98 + 40)
    assert item[cd_off:cd_off + 4] == b"PK\x01\x02", "central directory not where EOCD says"
    junk = bytes((0xA5 ^ (i * 29)) & 0xFF for i in range(cd_size - 8))
    return item[:cd_off + 4] + junk + item[cd_off + cd_size - 4:]


@pytest.mark.timeout_s(120)
def test_hostile_item_gives_eio_and_an_event(fv, dcp2_plain):
    """.metadata is valid, but one chunk's item (a zip) has its central directory
    overwritten, sizes kept: the step commits (completeness checks sizes), the views
    that need that chunk fail with EIO and a view_error event, the others are exact."""
    src, exp = dcp2_plain
    index, bindex = expected_of(exp)
    storage = load_json(os.path.join(exp, "storage.json"))
    target = "model.big.weight"
    victim = [e for e in storage if e["fqn"] == target and e["offsets"] != [0, 0]][0]

    def mutate(name, data):
        if name != victim["file"]:
            return data
        a, b = victim["offset"], victim["offset"] + victim["length"]
        out = data[:a] + _corrupt_central_directory(data[a:b]) + data[b:]
        assert len(out) == len(data) and out != data
        return out

    rel = "run_hostile/step1"
    step = fv.path(rel)
    copy_dcp(src, step, mutate=mutate)
    fv.wait_state(rel, "committed")
    full = os.path.join(step, ".full")
    bad = os.path.join(full, escape(target))
    assert os.stat(bad).st_size == index[target]["bytes"]
    expect_errno(errno.EIO, read_file, bad)
    # never a wrong byte, from any view holding the tensor
    for name in ("all.safetensors", "model.safetensors"):
        expect_errno(errno.EIO, read_file, os.path.join(full, name))
    ev = [e for e in fv.events() if e.get("event") == "view_error"]
    assert any(rel in str(e.get("path", "")) and e.get("error") for e in ev), ev
    # every other view is exact
    others = {f: e for f, e in index.items() if f != target}
    check_tensor_files(full, exp, others)
    check_safetensors(full, exp, others, groups=("optim", "extra"), include_all=False)
    check_bytes_items(full, exp, bindex)
    expect_errno(errno.EIO, read_file, bad)  # still EIO: nothing cached, no crash
    assert fv.mounted


# ----------------------------------------------------------------------------- remote tier

@pytest.mark.timeout_s(240)
def test_full_views_of_shards_only_in_the_remote(make_ckptfs, remote_dir, dcp2_plain):  # noqa: F811
    src, exp = dcp2_plain
    m = make_ckptfs("--remote", f"file://{remote_dir}", "--cache-size", "2M")
    copy_dcp(src, m.path("run", "step1"))
    m.wait_state("run/step1", "committed")
    wait_persisted(m, "run/step1")
    # Newer persisted data pushes the checkpoint out of the 2 MiB cache (LRU).
    for i in (2, 3):
        os.makedirs(m.path("run", f"step{i}"))
        write_file(m.path("run", f"step{i}", "filler.bin"), bytes([i]) * (3 * MiB // 2))
        assert m.commit(f"run/step{i}").returncode == 0
        wait_persisted(m, f"run/step{i}")
    wait_for(lambda: m.status()["cache"]["bytes_used"] <= 2 * MiB, 30, "eviction")
    assert m.status()["cache"]["evictions"] >= 1
    fetched0 = m.status()["remote"].get("bytes_fetched", 0)
    full = m.path("run", "step1", ".full")
    assert_full_views(full, exp, "dcp")
    assert m.status()["remote"].get("bytes_fetched", 0) > fetched0, \
        "the views were not read from the remote tier"
    m.umount()

    # A cold mount: an empty cache over the same remote.
    cold = make_ckptfs("--remote", f"file://{remote_dir}")
    cold.wait_state("run/step1", "committed")
    assert_full_views(cold.path("run", "step1", ".full"), exp, "dcp")
    assert cold.status()["remote"].get("bytes_fetched", 0) > 0
