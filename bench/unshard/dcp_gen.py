#!/usr/bin/python3
"""Writes the benchmark's DCP checkpoints with real torch 1.13 DCP
(`torch.distributed._shard.checkpoint`, FileSystemWriter), WORLD gloo ranks spawned on
127.0.0.1, each holding only its own ShardedTensor shards (ChunkShardingSpec).

    dcp_gen.py DIR --kind dim0|dim1|model --bytes N [--world-size 8] [--json]

  dim0, dim1  one float32 tensor "model.weight" of about N bytes, shape (R, C), sharded
              WORLD ways on that dim
  model       about N bytes of float32 "model.layers.<i>.weight" tensors (16, sharded on
              dim 0 for even i and dim 1 for odd i) plus a replicated "model.norm.weight"

Element (r, c) of a tensor of C columns is float((r * C + c + 7919 * i) % 16777213) (i =
the tensor's number): exact in float32 and checkable at any offset (`value_at`).
Prints {"tensors": {fqn: [shape]}, "bytes": N, "seconds": S} with --json.

Python 3.11: the dataclasses hash patch is applied before torch is imported (see
tests/integration/dcp_save.py).
"""
import json
import math
import os
import sys
import time

# The torch 1.13 shim lives with the tests (tests/integration/torch113_compat.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "integration"))
from torch113_compat import run_gloo_ranks  # noqa: E402  (must come before torch)

import torch  # noqa: E402

MOD = 16777213
N_LAYERS = 16


def _shape_for(numel, world):
    """(R, C) with R * C <= numel, C a power of two near sqrt(numel), R a multiple of world."""
    c = 1 << max(3, round(math.log2(math.sqrt(numel))))
    r = max(world, numel // c // world * world)
    return r, c


def layout(kind, nbytes, world):
    """{fqn: (shape, shard dim or None, tensor number)}."""
    if kind in ("dim0", "dim1"):
        return {"model.weight": (_shape_for(nbytes // 4, world), 0 if kind == "dim0" else 1, 0)}
    per = nbytes // 4 // N_LAYERS
    out = {}
    for i in range(N_LAYERS):
        r, c = _shape_for(per, world)
        out[f"model.layers.{i}.weight"] = ((r, c), i % 2, i)
    out["model.norm.weight"] = ((4096,), None, N_LAYERS)
    return out


def block(shape, offsets, sizes, i):
    """The values of the box `sizes` at `offsets` of tensor number i (2-D or 1-D)."""
    if len(shape) == 1:
        idx = torch.arange(offsets[0], offsets[0] + sizes[0], dtype=torch.int64)
    else:
        rows = torch.arange(offsets[0], offsets[0] + sizes[0], dtype=torch.int64)
        cols = torch.arange(offsets[1], offsets[1] + sizes[1], dtype=torch.int64)
        idx = rows[:, None] * shape[1] + cols[None, :]
    idx.add_(7919 * i).remainder_(MOD)
    return idx.to(torch.float32)


def value_at(shape, flat_index, i):
    return float((flat_index + 7919 * i) % MOD)


def _worker(rank, world, path, kind, nbytes):
    import torch.distributed._shard.checkpoint as dcp
    from torch.distributed._shard import sharded_tensor
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec

    sd = {}
    for fqn, (shape, dim, i) in layout(kind, nbytes, world).items():
        if dim is None:
            sd[fqn] = block(shape, [0] * len(shape), list(shape), i)
            continue
        spec = ChunkShardingSpec(dim=dim, placements=[f"rank:{r}/cpu" for r in range(world)])
        st = sharded_tensor.empty(spec, *shape, dtype=torch.float32)
        for shard in st.local_shards():
            md = shard.metadata
            shard.tensor.copy_(block(shape, md.shard_offsets, md.shard_sizes, i))
        sd[fqn] = st
    dcp.save_state_dict(sd, dcp.FileSystemWriter(path))
    del sd


def main(argv):
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--kind", choices=["dim0", "dim1", "model"], required=True)
    ap.add_argument("--bytes", type=int, required=True)
    ap.add_argument("--world-size", type=int, default=8)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    error = run_gloo_ranks(_worker, a.world_size, a.path, a.kind, a.bytes)
    if error:
        sys.stderr.write(f"DCP save failed: {error}\n")
        return 1
    lay = layout(a.kind, a.bytes, a.world_size)
    total = sum(math.prod(s) * 4 for s, _, _ in lay.values())
    info = {"tensors": {f: list(s) for f, (s, _, _) in lay.items()},
            "numbers": {f: i for f, (_, _, i) in lay.items()},
            "bytes": total, "seconds": time.perf_counter() - t0}
    print(json.dumps(info) if a.json else f"saved {a.path}: {total} bytes of tensors")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
