#!/usr/bin/env python3
"""An OLMo-core safetensors-format distributed checkpoint (FORMATS.md 4.1), written
with plain Python (struct + json; no torch), and the full tensors it unshards to.

    olmo_fixture.py CKPT_DIR EXPECTED_DIR

CKPT_DIR gets what `save_model_and_optim_state(dir, model, optim)` writes:
    model/metadata.json  model/rank_0..3.safetensors   shard_spec_per_file (current form)
    optim/metadata.json  optim/rank_0..1.safetensors   flattened_offsets_per_file (legacy)
Each rank_R.safetensors stores, under the tensor's key, a 1-D tensor: the
concatenation of that file's ranges of the flattened full tensor, or the row-major
local box (local_shape at global_offset).

Covered: several flattened_offsets ranges per file (not row aligned), local_shape +
global_offset boxes (2 x 2 grid), an empty shard [[0, 0]] absent from its file and
another stored as a 0-element tensor, a 0-D tensor (stored as shape [1]), the legacy
`flattened_offsets_per_file` with both its `[s, e]` and `[[s, e], ...]` values, and
the dtypes F32, BF16, I64 and U8.

EXPECTED_DIR/<group>/ (group = model, optim) gets, computed from the recipe:
    index.json  {key: {"dtype": torch name, "safetensors_dtype": code, "shape": [...],
                 "file": "<escaped key>.bin", "bytes": N}}
    <escaped key>.bin   the full tensor, row-major little-endian bytes
"""
import json
import math
import os
import struct
import sys
import zlib

ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2,
            "I8": 1, "U8": 1, "BOOL": 1}
TORCH_NAME = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
              "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8",
              "BOOL": "bool"}
# safetensors writers order data by descending dtype alignment, then name
ALIGN = {"BOOL": 0, "U8": 1, "I8": 1, "I16": 2, "F16": 2, "BF16": 2, "I32": 3, "F32": 3,
         "F64": 4, "I64": 4}


def escape(key):
    return key.replace("%", "%25").replace("/", "%2F")


def full_bytes(key, dtype, shape):
    """Row-major little-endian bytes of the full tensor `key` (deterministic, distinct
    per key, exactly representable in the dtype)."""
    n = math.prod(shape)
    s = zlib.crc32(key.encode()) & 0xFFFFFFFF
    if dtype == "F32":
        return struct.pack(f"<{n}f", *[(s % 4096) * 64 + i * 0.5 - 100.0 for i in range(n)])
    if dtype == "BF16":
        # k/4 with |k| <= 125: 8 significant bits, so bf16 = the top half of the float32
        f32 = struct.pack(f"<{n}f", *[(((i * 37 + s) % 251) - 125) / 4 for i in range(n)])
        return b"".join(f32[4 * i + 2:4 * i + 4] for i in range(n))
    if dtype == "I64":
        return struct.pack(f"<{n}q", *[i * 2654435761 + (s << 20) - (1 << 40) for i in range(n)])
    if dtype == "U8":
        return bytes((i * 13 + s) % 256 for i in range(n))
    raise ValueError(dtype)


def box_ranges(shape, local_shape, global_offset):
    """Flattened [start, end) ranges of a box, one per row (2-D), as OLMo-core does."""
    if len(shape) == 1:
        return [(global_offset[0], global_offset[0] + local_shape[0])]
    assert len(shape) == 2, "OLMo-core's get_flattened_offsets supports 1-D and 2-D only"
    cols = shape[1]
    return [((global_offset[0] + r) * cols + global_offset[1],
             (global_offset[0] + r) * cols + global_offset[1] + local_shape[1])
            for r in range(local_shape[0])]


# ---------------------------------------------------------------- the checkpoint

def _fo(*ranges):
    return {"flattened_offsets": [list(r) for r in ranges], "local_shape": None, "global_offset": None}


def _box(local_shape, global_offset):
    return {"flattened_offsets": None, "local_shape": list(local_shape),
            "global_offset": list(global_offset)}


def model_group():
    """(tensors, {file: stored-empty keys}) in the current shard_spec_per_file form; 4 ranks."""
    r = [f"rank_{i}.safetensors" for i in range(4)]
    tensors = {
        # FSDP-style flat split: several ranges per file, not aligned to rows
        "embeddings.weight": ("F32", [10, 6], {
            r[0]: _fo((0, 7), (20, 25)), r[1]: _fo((7, 20)),
            r[2]: _fo((25, 40), (45, 60)), r[3]: _fo((40, 45))}),
        # DTensor boxes on a 2 x 2 grid, uneven columns
        "blocks.0.attention.w_q.weight": ("BF16", [8, 5], {
            r[0]: _box((4, 3), (0, 0)), r[1]: _box((4, 2), (0, 3)),
            r[2]: _box((4, 3), (4, 0)), r[3]: _box((4, 2), (4, 3))}),
        # empty shards: rank_2's is not stored at all, rank_3's is a 0-element tensor
        "blocks.0.attention_norm.weight": ("F32", [7], {
            r[0]: _fo((0, 4)), r[1]: _fo((4, 7)), r[2]: _fo((0, 0)), r[3]: _fo((0, 0))}),
        # a whole tensor in one file, as a box
        "lm_head.ids": ("I64", [3, 4], {r[1]: _box((3, 4), (0, 0))}),
        # row ranges (2-D DTensor row split seen as flattened offsets)
        "blocks.1.feed_forward.w1.weight": ("BF16", [6, 4], {
            r[0]: _fo((0, 10)), r[2]: _fo((10, 13), (13, 24))}),
        # 1-D DTensor boxes
        "blocks.1.feed_forward_norm.bias": ("F32", [9], {
            r[0]: _box((5,), (0,)), r[3]: _box((4,), (5,))}),
    }
    stored_empty = {r[3]: {"blocks.0.attention_norm.weight"}}
    return tensors, stored_empty


def optim_group():
    """Legacy flattened_offsets_per_file ({file: [s, e] | [[s, e], ...]}); 2 ranks."""
    r = [f"rank_{i}.safetensors" for i in range(2)]
    tensors = {
        "num_param_groups": ("I64", [], {r[0]: [0, 1]}),                      # 0-D
        "state_keys": ("U8", [23], {r[0]: [[0, 23]]}),
        "state.embeddings.weight.__exp_avg": ("F32", [10, 6], {
            r[0]: [0, 30], r[1]: [[30, 45], [45, 60]]}),
        "state.blocks.0.attention.w_q.weight.__exp_avg_sq": ("BF16", [8, 5], {
            r[0]: [[0, 17]], r[1]: [[17, 33], [33, 40]]}),
        "state.lm_head.ids.__step": ("I64", [3, 4], {r[1]: [0, 12]}),
    }
    return tensors, {}


def _ranges_of(spec, shape):
    """Element ranges a file holds, in storage order (new or legacy spec)."""
    if isinstance(spec, list):                                   # legacy value
        return [tuple(spec)] if spec and isinstance(spec[0], int) else [tuple(x) for x in spec]
    if spec.get("flattened_offsets") is not None:
        return [tuple(x) for x in spec["flattened_offsets"]]
    return box_ranges(shape, spec["local_shape"], spec["global_offset"])


def safetensors_bytes(entries, metadata=None):
    """A safetensors file from [(name, dtype, shape, data)], data laid out by descending
    dtype alignment then name, header padded with spaces to a multiple of 8."""
    entries = sorted(entries, key=lambda e: (-ALIGN[e[1]], e[0]))
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    off = 0
    for name, dtype, shape, data in entries:
        assert len(data) == math.prod(shape) * ITEMSIZE[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(e[3] for e in entries)


def write_group(ckpt_dir, exp_dir, tensors, stored_empty, legacy):
    os.makedirs(ckpt_dir, exist_ok=True)
    os.makedirs(exp_dir, exist_ok=True)
    per_file = {}
    meta = {"tensors": {}}
    index = {}
    for key, (dtype, shape, specs) in tensors.items():
        full = full_bytes(key, dtype, shape)
        isz = ITEMSIZE[dtype]
        covered = bytearray(math.prod(shape))
        for fname, spec in specs.items():
            ranges = _ranges_of(spec, shape)
            data = b"".join(full[s * isz:e * isz] for s, e in ranges)
            for s, e in ranges:
                for k in range(s, e):
                    assert not covered[k], f"{key}: element {k} in two shards"
                    covered[k] = 1
            if data or key in stored_empty.get(fname, ()):
                per_file.setdefault(fname, []).append((key, dtype, [len(data) // isz], data))
        assert all(covered), f"{key}: shards do not cover the tensor"
        entry = {"shape": list(shape), "is_sharded": len(specs) > 1, "dtype": dtype}
        if legacy:
            entry["flattened_offsets_per_file"] = specs
        else:
            entry["shard_spec_per_file"] = specs
        meta["tensors"][key] = entry
        fname = escape(key) + ".bin"
        with open(os.path.join(exp_dir, fname), "wb") as f:
            f.write(full)
        index[key] = {"dtype": TORCH_NAME[dtype], "safetensors_dtype": dtype, "shape": list(shape),
                      "file": fname, "bytes": len(full)}
    for fname, entries in per_file.items():
        with open(os.path.join(ckpt_dir, fname), "wb") as f:
            f.write(safetensors_bytes(entries))
    with open(os.path.join(ckpt_dir, "metadata.json"), "w") as f:
        json.dump(meta, f)
    with open(os.path.join(exp_dir, "index.json"), "w") as f:
        json.dump(index, f, indent=1, sort_keys=True)
    return index


def write_olmo_checkpoint(ckpt_dir, exp_dir):
    """Writes CKPT_DIR/{model,optim}/ and EXPECTED_DIR/{model,optim}/; returns
    {group: expected index}."""
    out = {}
    for group, (tensors, stored_empty), legacy in (("model", model_group(), False),
                                                   ("optim", optim_group(), True)):
        out[group] = write_group(os.path.join(ckpt_dir, group), os.path.join(exp_dir, group),
                                 tensors, stored_empty, legacy)
    return out


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    idx = write_olmo_checkpoint(argv[0], argv[1])
    print(f"OLMo-core checkpoint in {argv[0]}: " +
          ", ".join(f"{g}: {len(t)} tensors" for g, t in idx.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
