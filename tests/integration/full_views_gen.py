#!/usr/bin/python3
"""Real multi-rank PyTorch DCP checkpoint (torch 1.13
``torch.distributed._shard.checkpoint``) for the `.full/` unsharded-view tests
(test_full_views.py), plus the full tensors it must unshard to.

Usage:
    full_views_gen.py probe
        exit 0 if torch with gloo is usable, 3 (and a reason on stderr) if not
    full_views_gen.py save CKPT_DIR EXPECTED_DIR [--world-size N] [--single-file-per-rank]
        N gloo ranks (spawned, 127.0.0.1, a free port) save the state dict below
        into CKPT_DIR with FileSystemWriter; then EXPECTED_DIR gets the expected
        unsharded views (see below)
    full_views_gen.py expected EXPECTED_DIR
        the expected tensors only (no distributed save, no bytes/storage files)
    full_views_gen.py check-bytes BYTES_DIR EXPECTED_DIR
        torch.load every EXPECTED bytes item's file BYTES_DIR/<name> (a `.full/bytes/`
        directory) and compare it with the expected Python value; exit 1 on a mismatch

The state dict (the same for every world size; values deterministic, distinct
per tensor, computed by `full_value` from the tensor's name alone):
  * ShardedTensors, ChunkShardingSpec over all ranks, on dim 0 and on dim 1, with
    sizes not divisible by 2 or 4 (uneven chunks; a dim-0 size 3 over 4 ranks leaves
    rank 3 without a shard); float32 / bfloat16 / float16 / int64; 1-D, 2-D and 3-D;
  * plain tensors present on every rank (DCP stores them once): 0-D, 1-D, 3-D, a
    transposed (non-contiguous, strides (1, 4)) and a permuted 3-D one, whose
    full views are the logical values, row-major;
  * an FQN with '%' and '/' (its view file is "extra.weird%25name%2Fx");
  * non-tensor items: objects (torch.save'd BYTE_IO items) and an io.BytesIO.

EXPECTED_DIR (computed from the recipe, never from ckptfs):
  index.json    {fqn: {"dtype": torch name ("float32"), "shape": [...],
                 "file": "<escaped fqn>.bin", "safetensors_dtype": "F32",
                 "bytes": N, "chunks": number of chunks in .metadata (save only)}}
  <escaped fqn>.bin   the full tensor, row-major contiguous little-endian bytes
                      (escaped: '%' -> "%25", '/' -> "%2F", as the view names)
  bytes.json    {fqn: {"kind": "object" | "bytesio", "value": "bytes/<esc>.pkl",
                 "raw": "bytes/<esc>.raw"}}; .pkl = pickle of the expected Python
                 value (for a BytesIO: its contents), .raw = the item's bytes exactly as
                 stored in the checkpoint (read back through .metadata's storage_data)
  storage.json  [{"fqn", "offsets", "sizes", "file", "offset", "length"}] for every
                tensor chunk and bytes item, from .metadata (save only)

Python 3.11 note: torch 1.13's sharded-tensor metadata uses dataclass instances as
dataclass field defaults, which 3.11 rejects unless the class is hashable; the
identity hash is given to unhashable dataclasses *before* torch is imported (as
dcp_save.py does).
"""
import io
import json
import math
import os
import pickle
import sys
import zlib

from torch113_compat import run_gloo_ranks  # noqa: E402  (must come before torch)

import torch  # noqa: E402

# name -> (shape, dtype, shard dim): ShardedTensors over all ranks (ChunkShardingSpec).
SHARDED = {
    "model.layers.0.attn.weight": ((37, 20), torch.float32, 0),      # uneven rows
    "model.layers.0.mlp.proj": ((6, 23), torch.float32, 1),          # dim 1, uneven
    "model.big.weight": ((300, 301), torch.float32, 1),              # 353 KiB, dim 1
    "model.embed.weight": ((50, 12), torch.bfloat16, 0),
    "model.layers.1.qkv": ((5, 11, 3), torch.bfloat16, 1),           # 3-D, dim 1
    "model.layers.1.mlp.w3": ((13, 9, 5), torch.float16, 0),         # 3-D, dim 0
    "model.ids": ((103,), torch.int64, 0),                           # 1-D, uneven
    "model.tiny": ((3, 4), torch.float32, 0),                        # 4 ranks: rank 3 empty
    "optim.state.0.exp_avg": ((37, 20), torch.float32, 0),
}
# name -> (shape, dtype, layout): plain tensors, the same on every rank.
#   layout "plain": contiguous; "t": the transpose of a contiguous (shape[1], shape[0])
#   tensor (saved with its strides); "perm": permute(2, 0, 1) of a contiguous
#   (shape[1], shape[2], shape[0]) tensor.
PLAIN = {
    "model.norm.weight": ((20,), torch.float32, "plain"),
    "model.scale": ((), torch.float32, "plain"),                      # 0-D
    "optim.step": ((), torch.int64, "plain"),                         # 0-D int64
    "model.bias16": ((7,), torch.float16, "plain"),
    "model.pos": ((4, 3, 2), torch.int64, "plain"),                   # 3-D
    "model.head_t": ((4, 6), torch.float32, "t"),                     # strides (1, 4)
    "model.perm3": ((4, 2, 3), torch.bfloat16, "perm"),               # 3-D permuted
    "extra.weird%name/x": ((2, 3), torch.float32, "plain"),           # escaped view name
}
# non-tensor items (BYTE_IO items).
OBJECTS = {
    "extra.epoch": 3,
    "extra.train_state": {"step": 100, "lr": 0.001, "name": "run1", "hist": [1, 2, 3]},
}
BYTESIO = {
    "extra.blob": bytes(range(256)) + b"ckptfs-bytesio\x00\xff" * 3,
}

ST_CODES = {
    torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}


def escape(fqn):
    """The `.full/` file name of a tensor: '%' -> "%25", '/' -> "%2F"."""
    return fqn.replace("%", "%25").replace("/", "%2F")


def dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def _seed(name):
    return zlib.crc32(name.encode()) & 0xFFFFFFFF


def full_value(name, shape, dtype):
    """The logical full tensor `name` (contiguous, row-major): arange-based, offset by a
    per-name seed, exactly representable in `dtype` so that every element is what the
    recipe says; bfloat16/float16 get a scrambled arange (few bits of mantissa)."""
    n = math.prod(shape)
    s = _seed(name)
    i = torch.arange(n, dtype=torch.int64)
    if dtype == torch.float32:
        v = ((s % 4096) * 1024 + i).to(torch.float64) * 0.5 - 1000.0   # < 2^24 halves
    elif dtype == torch.float64:
        v = (s + i).to(torch.float64) * 0.25
    elif dtype == torch.bfloat16:
        v = (((i * 37 + s) % 251) - 125).to(torch.float64) / 4          # 8-bit significand
    elif dtype == torch.float16:
        v = (((i * 101 + s) % 2039) - 1019).to(torch.float64) / 8       # 11-bit significand
    elif dtype == torch.int64:
        v = i * 2654435761 + (s << 20) - (1 << 40)                      # negative and large
    elif dtype == torch.uint8:
        v = (i * 13 + s) % 256
    else:
        raise ValueError(dtype)
    return v.to(dtype).reshape(shape)


def stored_value(name, shape, dtype, layout):
    """The tensor as put into the state dict (maybe a strided view of `full_value`)."""
    full = full_value(name, shape, dtype)
    if layout == "t":
        return full.t().contiguous().t()                 # same values, strides (1, rows)
    if layout == "perm":
        return full.permute(1, 2, 0).contiguous().permute(2, 0, 1)
    return full


def expected_tensors():
    """{fqn: logical full tensor} for every tensor of the state dict."""
    out = {}
    for name, (shape, dtype, _dim) in SHARDED.items():
        out[name] = full_value(name, shape, dtype)
    for name, (shape, dtype, _layout) in PLAIN.items():
        out[name] = full_value(name, shape, dtype)
    return out


def tensor_bytes(t):
    """Row-major contiguous little-endian bytes of t (the host is little-endian)."""
    assert sys.byteorder == "little"
    t = t.contiguous()
    if t.numel() == 0:
        return b""
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


# ----------------------------------------------------------------------------- save

def _worker(rank, world, path, single_file):
    import torch.distributed._shard.checkpoint as dcp
    from torch.distributed._shard import sharded_tensor
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec

    sd = {}
    for name, (shape, dtype, dim) in SHARDED.items():
        spec = ChunkShardingSpec(dim=dim, placements=[f"rank:{r}/cpu" for r in range(world)])
        st = sharded_tensor.empty(spec, *shape, dtype=dtype)
        full = full_value(name, shape, dtype)
        for shard in st.local_shards():
            md = shard.metadata
            idx = tuple(slice(o, o + s) for o, s in zip(md.shard_offsets, md.shard_sizes))
            shard.tensor.copy_(full[idx])
        sd[name] = st
    for name, (shape, dtype, layout) in PLAIN.items():
        sd[name] = stored_value(name, shape, dtype, layout)
    for name, value in OBJECTS.items():
        sd[name] = value
    for name, value in BYTESIO.items():
        sd[name] = io.BytesIO(value)
    dcp.save_state_dict(sd, dcp.FileSystemWriter(path, single_file_per_rank=single_file))


def _write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def write_expected(exp_dir, chunks=None):
    os.makedirs(exp_dir, exist_ok=True)
    index = {}
    for name, t in expected_tensors().items():
        data = tensor_bytes(t)
        fname = escape(name) + ".bin"
        _write(os.path.join(exp_dir, fname), data)
        index[name] = {"dtype": dtype_name(t.dtype), "shape": list(t.shape), "file": fname,
                       "safetensors_dtype": ST_CODES[t.dtype], "bytes": len(data)}
        if chunks is not None:
            index[name]["chunks"] = chunks.get(name, 0)
    with open(os.path.join(exp_dir, "index.json"), "w") as f:
        json.dump(index, f, indent=1, sort_keys=True)
    return index


def read_storage(ckpt_dir):
    """[{fqn, offsets, sizes, file, offset, length}] from CKPT_DIR/.metadata."""
    import torch.distributed._shard.checkpoint as dcp
    md = dcp.FileSystemReader(ckpt_dir).read_metadata()
    sizes = {}
    for fqn, tmd in md.state_dict_metadata.items():
        for c in getattr(tmd, "chunks", None) or []:
            sizes[(fqn, tuple(c.offsets))] = list(c.sizes)
    out = []
    for idx, info in md.storage_data.items():
        offsets = None if idx.offset is None else list(idx.offset)
        out.append({"fqn": idx.fqn, "offsets": offsets,
                    "sizes": sizes.get((idx.fqn, tuple(offsets))) if offsets is not None else None,
                    "file": info.relative_path, "offset": info.offset, "length": info.length})
    out.sort(key=lambda e: (e["fqn"], e["offsets"] or []))
    return md, out


def save(ckpt_dir, exp_dir, world, single_file):
    error = run_gloo_ranks(_worker, world, ckpt_dir, single_file)
    if error:
        sys.stderr.write(f"DCP save failed: {error}\n")
        return 1

    md, storage = read_storage(ckpt_dir)
    chunks = {fqn: len(getattr(tmd, "chunks", []) or []) for fqn, tmd in md.state_dict_metadata.items()}
    index = write_expected(exp_dir, chunks)
    missing = sorted(set(index) - set(md.state_dict_metadata))
    if missing:
        sys.stderr.write(f"tensors missing from .metadata: {missing}\n")
        return 1
    with open(os.path.join(exp_dir, "storage.json"), "w") as f:
        json.dump(storage, f, indent=1)

    # Bytes items: the expected Python values, and the raw bytes as stored.
    by_fqn = {e["fqn"]: e for e in storage if e["offsets"] is None}
    bindex = {}
    items = [(n, "object", v) for n, v in OBJECTS.items()] + \
            [(n, "bytesio", v) for n, v in BYTESIO.items()]
    for name, kind, value in items:
        e = by_fqn.get(name)
        if e is None:
            sys.stderr.write(f"bytes item {name} not in .metadata storage_data\n")
            return 1
        with open(os.path.join(ckpt_dir, e["file"]), "rb") as f:
            f.seek(e["offset"])
            raw = f.read(e["length"])
        # Check the recipe against what torch wrote (torch 1.13 torch.save's both).
        got = torch.load(io.BytesIO(raw))
        got = got.getvalue() if isinstance(got, io.BytesIO) else got
        if got != value:
            sys.stderr.write(f"bytes item {name}: stored {got!r}, expected {value!r}\n")
            return 1
        esc = escape(name)
        _write(os.path.join(exp_dir, "bytes", esc + ".raw"), raw)
        _write(os.path.join(exp_dir, "bytes", esc + ".pkl"), pickle.dumps(value))
        bindex[name] = {"kind": kind, "value": f"bytes/{esc}.pkl", "raw": f"bytes/{esc}.raw",
                        "bytes": len(raw)}
    with open(os.path.join(exp_dir, "bytes.json"), "w") as f:
        json.dump(bindex, f, indent=1, sort_keys=True)
    print(f"DCP save ok: {ckpt_dir} ({world} ranks), expected views in {exp_dir}")
    return 0


def check_bytes(bytes_dir, exp_dir):
    with open(os.path.join(exp_dir, "bytes.json")) as f:
        bindex = json.load(f)
    errors = []
    for name, e in sorted(bindex.items()):
        path = os.path.join(bytes_dir, escape(name))
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as ex:
            errors.append(f"{path}: {ex}")
            continue
        with open(os.path.join(exp_dir, e["value"]), "rb") as f:
            want = pickle.load(f)
        try:
            got = torch.load(io.BytesIO(data))
        except Exception as ex:  # noqa: BLE001
            if e["kind"] == "bytesio" and data == want:
                continue  # a 2.x-style raw BytesIO item
            errors.append(f"{path}: torch.load failed: {ex!r}")
            continue
        if e["kind"] == "bytesio":
            if not isinstance(got, io.BytesIO):
                errors.append(f"{path}: torch.load gave {type(got).__name__}, not BytesIO")
                continue
            got = got.getvalue()
        if got != want:
            errors.append(f"{path}: torch.load gave {got!r}, expected {want!r}")
    if errors:
        sys.stderr.write("\n".join(errors) + "\n")
        return 1
    print(f"bytes items ok: {sorted(bindex)}")
    return 0


def probe():
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_gloo_available():
        sys.stderr.write("torch.distributed with gloo is not available\n")
        return 3
    try:
        import torch.distributed._shard.checkpoint  # noqa: F401
        from torch.distributed._shard import sharded_tensor  # noqa: F401
    except ImportError as e:
        sys.stderr.write(f"torch {torch.__version__} has no torch.distributed._shard.checkpoint: {e}\n")
        return 3
    print(f"torch {torch.__version__} with gloo")
    return 0


def main(argv):
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    sub.add_parser("probe")
    s = sub.add_parser("save")
    s.add_argument("ckpt")
    s.add_argument("expected")
    s.add_argument("--world-size", type=int, default=2)
    s.add_argument("--single-file-per-rank", action="store_true")
    e = sub.add_parser("expected")
    e.add_argument("expected")
    c = sub.add_parser("check-bytes")
    c.add_argument("bytes_dir")
    c.add_argument("expected")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    if a.mode == "probe":
        return probe()
    if a.mode == "save":
        return save(a.ckpt, a.expected, a.world_size, a.single_file_per_rank)
    if a.mode == "expected":
        write_expected(a.expected)
        return 0
    return check_bytes(a.bytes_dir, a.expected)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
