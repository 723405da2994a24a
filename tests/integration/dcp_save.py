#!/usr/bin/python3
"""Real multi-rank PyTorch DCP (torch 1.13 ``torch.distributed._shard.checkpoint``)
save / load driver used by test_torch_dcp.py.

Usage:
    dcp_save.py save DIR [--world-size N] [--single-file-per-rank]
    dcp_save.py load DIR [--world-size N]

``save`` spawns N gloo ranks; each rank builds the same deterministic state dict
(ShardedTensors chunk-sharded over all ranks with ChunkShardingSpec, plain
replicated tensors, and non-tensor items) and saves it into DIR with
FileSystemWriter.  ``load`` spawns N ranks that allocate empty destinations,
load DIR with FileSystemReader and compare every value exactly with the
deterministic expected state dict.  Exit status 0 means every rank succeeded;
anything else is printed on stderr and the exit status is non-zero.

Python 3.11 note: torch 1.13's sharded-tensor metadata uses dataclass
instances as dataclass field defaults, which 3.11 rejects as "mutable
defaults" unless the class is hashable.  We give unhashable dataclasses the
identity hash *before* torch is imported.
"""
import sys

from torch113_compat import run_gloo_ranks  # noqa: E402  (must come before torch)

import torch  # noqa: E402
import torch.distributed._shard.checkpoint as dcp  # noqa: E402
from torch.distributed._shard import sharded_tensor  # noqa: E402
from torch.distributed._shard.sharding_spec import ChunkShardingSpec  # noqa: E402

# name -> (shape, dtype, shard dim); ShardedTensors over all ranks.
SHARDED = {
    "model.embed.weight": ((64, 48), torch.float32, 0),
    "model.layers.0.mlp.weight": ((37, 20), torch.float32, 0),   # uneven rows
    "model.layers.0.attn.weight": ((16, 30), torch.float64, 1),  # shard on dim 1
    "optim.state.0.exp_avg": ((64, 48), torch.float32, 0),
    "model.big.weight": ((1024, 512), torch.float32, 0),         # 2 MiB
    "model.ids": ((103,), torch.int64, 0),                       # 1-D, uneven
}
# name -> (shape, dtype); plain (replicated) tensors.
PLAIN = {
    "model.norm.weight": ((48,), torch.float32),
    "model.norm.bias": ((48,), torch.float32),
    "optim.step": ((), torch.int64),
    "model.half": ((5, 7), torch.float16),
    "model.bf16": ((3, 11), torch.bfloat16),
}
# non-tensor items (saved as BYTE_IO items by the default planner).
OBJECTS = {
    "extra.epoch": 3,
    "extra.train_state": {"step": 100, "lr": 0.001, "name": "run1", "hist": [1, 2, 3]},
    "extra.rng_note": "deterministic-seed-1234",
}


def _gen(name):
    g = torch.Generator()
    g.manual_seed(sum(ord(c) * (i + 1) for i, c in enumerate(name)) % (2 ** 31))
    return g


def full_value(name, shape, dtype):
    g = _gen(name)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.float32).to(dtype)
    return torch.randint(-(2 ** 40), 2 ** 40, shape, generator=g, dtype=dtype)


def _spec(world, dim):
    return ChunkShardingSpec(dim=dim, placements=[f"rank:{r}/cpu" for r in range(world)])


def _local_slice(full, shard_md):
    idx = tuple(slice(o, o + s) for o, s in zip(shard_md.shard_offsets, shard_md.shard_sizes))
    return full[idx]


def build_state_dict(world, fill):
    sd = {}
    for name, (shape, dtype, dim) in SHARDED.items():
        st = sharded_tensor.empty(_spec(world, dim), *shape, dtype=dtype)
        for shard in st.local_shards():
            if fill:
                shard.tensor.copy_(_local_slice(full_value(name, shape, dtype), shard.metadata))
            else:
                shard.tensor.zero_()
        sd[name] = st
    for name, (shape, dtype) in PLAIN.items():
        sd[name] = full_value(name, shape, dtype) if fill else torch.zeros(shape, dtype=dtype)
    for name, value in OBJECTS.items():
        sd[name] = value if fill else None
    return sd


def check_state_dict(sd):
    """Return a list of mismatch descriptions (empty == exact match)."""
    errors = []
    for name, (shape, dtype, dim) in SHARDED.items():
        full = full_value(name, shape, dtype)
        for shard in sd[name].local_shards():
            want = _local_slice(full, shard.metadata)
            got = shard.tensor
            if got.dtype != want.dtype or tuple(got.shape) != tuple(want.shape) or not torch.equal(got, want):
                errors.append(f"{name} shard at {shard.metadata.shard_offsets} differs")
    for name, (shape, dtype) in PLAIN.items():
        want = full_value(name, shape, dtype)
        got = sd[name]
        if not isinstance(got, torch.Tensor) or got.dtype != want.dtype or not torch.equal(got, want):
            errors.append(f"{name} differs: {got!r}")
    for name, value in OBJECTS.items():
        if sd.get(name) != value:
            errors.append(f"{name} differs: {sd.get(name)!r} != {value!r}")
    return errors


def _worker(rank, world, mode, path, single_file):
    if mode == "save":
        sd = build_state_dict(world, fill=True)
        dcp.save_state_dict(sd, dcp.FileSystemWriter(path, single_file_per_rank=single_file))
    else:
        sd = build_state_dict(world, fill=False)
        dcp.load_state_dict(sd, dcp.FileSystemReader(path))
        errs = check_state_dict(sd)
        if errs:
            raise AssertionError(f"rank {rank}: " + "; ".join(errs))


def main(argv):
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["save", "load"])
    ap.add_argument("path")
    ap.add_argument("--world-size", type=int, default=4)
    ap.add_argument("--single-file-per-rank", action="store_true")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    error = run_gloo_ranks(_worker, a.world_size, a.mode, a.path, a.single_file_per_rank)
    if error:
        sys.stderr.write(f"dcp {a.mode} failed: {error}\n")
        return 1
    print(f"dcp {a.mode} ok: {a.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
