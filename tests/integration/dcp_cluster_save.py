#!/usr/bin/python3
"""Multi-node torch DCP (torch 1.13 ``torch.distributed._shard.checkpoint``) and
per-rank torch.save driver for test_cluster.py: gloo ranks spread over several ckptfs
mounts that stand in for the nodes of one job.

Usage:
    dcp_cluster_save.py save REL --roots M0,M1,... --world-size W [--single-file-per-rank]
        W gloo ranks (spawned, 127.0.0.1) save full_views_gen.py's state dict with
        FileSystemWriter; rank r writes into ROOTS[r // (W / len(ROOTS))]/REL, i.e. the
        mount of its node (ranks 0..K-1 on the first root, K..2K-1 on the second, ...).
        Every rank creates the directory on its own node first, as torch 2.x's
        FileSystemWriter.prepare_local_plan does (1.13 creates it on the coordinator
        only). Rank 0 writes `.metadata` (as .metadata.tmp renamed into place) after
        DCP's gather of the write results, i.e. after every rank closed its files.
    dcp_cluster_save.py load PATH --world-size W
        W ranks, all reading PATH (one node's view of the step), load into zeroed
        destinations and compare every tensor and object exactly with the recipe.
    dcp_cluster_save.py torch-save REL --roots M0,M1,... --world-size W
        every rank torch.save's its own state (rank_state below) to
        <its node's root>/REL/rank<R>.pt, then all ranks meet in a barrier.
    dcp_cluster_save.py torch-load DIR --world-size W
        one process torch.load's DIR/rank<R>.pt for every rank and compares exactly.

Exit status 0 means every rank succeeded; otherwise the error is on stderr.
The state dict is full_views_gen.py's (ShardedTensors over all ranks, plain strided
tensors, objects, a BytesIO), so a save of W ranks here is byte-identical to
`full_views_gen.py save DIR EXP --world-size W` into a plain directory, and the
expected `.full/` views of that plain save apply to it.
"""
import io
import os
import sys

from torch113_compat import run_gloo_ranks  # noqa: E402  (must come before torch)

import torch  # noqa: E402

import full_views_gen as fvg  # noqa: E402


def node_root(roots, rank, world):
    if world % len(roots):
        raise ValueError(f"world size {world} is not a multiple of {len(roots)} nodes")
    return roots[rank // (world // len(roots))]


def rank_state(rank):
    """What rank `rank` torch.save's in torch-save mode (~2 MiB, distinct per rank)."""
    return {
        "rank": rank,
        "weight": fvg.full_value(f"rank{rank}.weight", (512, 1024), torch.float32),
        "ids": fvg.full_value(f"rank{rank}.ids", (1001,), torch.int64),
        "half": fvg.full_value(f"rank{rank}.half", (33, 17), torch.bfloat16),
        "note": f"rank {rank}: per-rank torch.save",
    }


def _spec(world, dim):
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec
    return ChunkShardingSpec(dim=dim, placements=[f"rank:{r}/cpu" for r in range(world)])


def _save_worker(rank, world, roots, rel, single_file):
    path = os.path.join(node_root(roots, rank, world), rel)
    os.makedirs(path, exist_ok=True)
    fvg._worker(rank, world, path, single_file)


def _load_worker(rank, world, path):
    import torch.distributed._shard.checkpoint as dcp
    from torch.distributed._shard import sharded_tensor

    sd = {}
    for name, (shape, dtype, dim) in fvg.SHARDED.items():
        st = sharded_tensor.empty(_spec(world, dim), *shape, dtype=dtype)
        for shard in st.local_shards():
            shard.tensor.zero_()
        sd[name] = st
    for name, (shape, dtype, _layout) in fvg.PLAIN.items():
        sd[name] = torch.zeros(shape, dtype=dtype)
    for name in list(fvg.OBJECTS) + list(fvg.BYTESIO):
        sd[name] = None
    dcp.load_state_dict(sd, dcp.FileSystemReader(path))

    errors = []
    for name, (shape, dtype, _dim) in fvg.SHARDED.items():
        full = fvg.full_value(name, shape, dtype)
        for shard in sd[name].local_shards():
            md = shard.metadata
            want = full[tuple(slice(o, o + s) for o, s in zip(md.shard_offsets, md.shard_sizes))]
            got = shard.tensor
            if got.dtype != want.dtype or tuple(got.shape) != tuple(want.shape) or not torch.equal(got, want):
                errors.append(f"{name} shard at {md.shard_offsets} differs")
    for name, (shape, dtype, _layout) in fvg.PLAIN.items():
        want = fvg.full_value(name, shape, dtype)
        got = sd[name]
        if not isinstance(got, torch.Tensor) or got.dtype != want.dtype or not torch.equal(got, want):
            errors.append(f"{name} differs")
    for name, value in list(fvg.OBJECTS.items()) + list(fvg.BYTESIO.items()):
        got = sd.get(name)
        if isinstance(got, io.BytesIO):
            got = got.getvalue()
        if got != value:
            errors.append(f"{name} differs: {got!r:.200} != {value!r:.200}")
    if errors:
        raise AssertionError(f"rank {rank} loading {path}: " + "; ".join(errors))


def _torch_save_worker(rank, world, roots, rel):
    path = os.path.join(node_root(roots, rank, world), rel)
    os.makedirs(path, exist_ok=True)
    torch.save(rank_state(rank), os.path.join(path, f"rank{rank}.pt"))


def check_rank_state(got, want):
    errors = []
    if not isinstance(got, dict) or set(got) != set(want):
        return [f"keys {sorted(got) if isinstance(got, dict) else type(got)} != {sorted(want)}"]
    for k, w in want.items():
        g = got[k]
        if isinstance(w, torch.Tensor):
            if not isinstance(g, torch.Tensor) or g.dtype != w.dtype or not torch.equal(g, w):
                errors.append(f"{k} differs")
        elif g != w:
            errors.append(f"{k}: {g!r} != {w!r}")
    return errors


def torch_load(d, world):
    errors = []
    for r in range(world):
        p = os.path.join(d, f"rank{r}.pt")
        try:
            got = torch.load(p)
        except Exception as e:  # noqa: BLE001
            errors.append(f"{p}: torch.load failed: {e!r}")
            continue
        errors += [f"{p}: {e}" for e in check_rank_state(got, rank_state(r))]
    return errors


def main(argv):
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    for mode in ("save", "torch-save"):
        s = sub.add_parser(mode)
        s.add_argument("rel")
        s.add_argument("--roots", required=True, help="comma-separated mountpoints, node order")
        s.add_argument("--world-size", type=int, required=True)
        if mode == "save":
            s.add_argument("--single-file-per-rank", action="store_true")
    for mode in ("load", "torch-load"):
        s = sub.add_parser(mode)
        s.add_argument("path")
        s.add_argument("--world-size", type=int, required=True)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    if a.mode in ("save", "torch-save"):
        roots = a.roots.split(",")
        node_root(roots, 0, a.world_size)  # validates the split
        if a.mode == "save":
            error = run_gloo_ranks(_save_worker, a.world_size, roots, a.rel, a.single_file_per_rank)
        else:
            error = run_gloo_ranks(_torch_save_worker, a.world_size, roots, a.rel)
    elif a.mode == "load":
        error = run_gloo_ranks(_load_worker, a.world_size, a.path)
    else:
        errs = torch_load(a.path, a.world_size)
        error = "\n".join(errs) if errs else None
    if error:
        sys.stderr.write(f"{a.mode} failed: {error}\n")
        return 1
    print(f"{a.mode} ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
