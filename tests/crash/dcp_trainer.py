#!/usr/bin/python3
"""The trainer of the crash campaign (campaign.py): saves checkpoints step after step into
a ckptfs mount while the campaign kills the daemon under it.

    dcp_trainer.py RUN_DIR REF_DIR CTL_DIR [--world-size N] [--mib M] [--emulate]

It runs in lockstep with the campaign, so that it never writes while the mount is down:
it waits for CTL_DIR/next to hold a step number N larger than the last one (or "stop"),
then

  1. saves the step's state dict into REF_DIR/stepN (a local disk: the reference bytes;
     torch 1.13 DCP output is deterministic, so they equal what goes to the mount),
  2. logs "begin N" to CTL_DIR/log,
  3. saves the same state dict into RUN_DIR/stepN through the mount,
  4. logs "saved N" once the save returned (every close and the .metadata rename
     returned), or "failed N <error>" when it raised (the daemon was killed).

With torch importable it is a real multi-rank torch 1.13 DCP writer (gloo ranks, one
process each, FileSystemWriter: shards, then .metadata.tmp renamed to .metadata).
--emulate (no torch) plays the same file sequence with the real DCP checkpoint in
tests/fixtures/dcp/torch-1.13/ckpt113: one thread per shard, then .metadata.tmp,
fsync, rename.
"""
import argparse
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))


def log(ctl, line):
    with open(os.path.join(ctl, "log"), "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def wait_token(ctl, last):
    """The next step number the campaign asks for (> last), or None for stop."""
    path = os.path.join(ctl, "next")
    while True:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            text = ""
        if text == "stop":
            return None
        if text.isdigit() and int(text) > last:
            return int(text)
        time.sleep(0.005)


# ----------------------------------------------------------------------------- torch DCP

def _state_dict(world, step, mib):
    import torch
    from torch.distributed._shard import sharded_tensor
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec

    def spec(dim):
        return ChunkShardingSpec(dim=dim, placements=[f"rank:{r}/cpu" for r in range(world)])

    g = torch.Generator()
    g.manual_seed(step)
    rows = max(world, (mib << 20) // (4 * 256))
    sd = {}
    for name, shape, dim in (("model.weight", (rows, 256), 0), ("optim.exp_avg", (64, 48), 0),
                             ("model.attn", (16, 30), 1)):
        full = torch.randn(shape, generator=g)
        st = sharded_tensor.empty(spec(dim), *shape)
        for shard in st.local_shards():
            idx = tuple(slice(o, o + s) for o, s in zip(shard.metadata.shard_offsets,
                                                         shard.metadata.shard_sizes))
            shard.tensor.copy_(full[idx])
        sd[name] = st
    sd["model.norm"] = torch.randn((48,), generator=g)
    sd["extra.step"] = step
    return sd


def _dcp_rank(rank, world, run_dir, ref_dir, ctl, mib):
    import torch.distributed as dist
    import torch.distributed._shard.checkpoint as dcp

    last = 0
    while True:
        n = wait_token(ctl, last)
        if n is None:
            return
        last = n
        sd = _state_dict(world, n, mib)
        dcp.save_state_dict(sd, dcp.FileSystemWriter(os.path.join(ref_dir, f"step{n}")))
        dist.barrier()
        if rank == 0:
            log(ctl, f"begin {n}")
        try:
            dcp.save_state_dict(sd, dcp.FileSystemWriter(os.path.join(run_dir, f"step{n}")))
            if rank == 0:
                log(ctl, f"saved {n}")
        except BaseException as e:  # noqa: BLE001  the daemon under us was killed
            # torch 1.13's CheckpointException derives from BaseException.
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            if rank == 0:
                log(ctl, f"failed {n} {type(e).__name__}")
        dist.barrier()


# ----------------------------------------------------------------------------- emulation

FIXTURE = os.path.join(REPO, "tests", "fixtures", "dcp", "torch-1.13", "ckpt113")


def _emulated(run_dir, ref_dir, ctl):
    shards = sorted(n for n in os.listdir(FIXTURE) if n.endswith(".distcp"))
    blobs = {n: open(os.path.join(FIXTURE, n), "rb").read() for n in shards + [".metadata"]}
    last = 0
    while True:
        n = wait_token(ctl, last)
        if n is None:
            return
        last = n
        ref = os.path.join(ref_dir, f"step{n}")
        os.makedirs(ref, exist_ok=True)
        for name, data in blobs.items():
            with open(os.path.join(ref, name), "wb") as f:
                f.write(data)
        log(ctl, f"begin {n}")
        d = os.path.join(run_dir, f"step{n}")
        errors = []

        def write(name):
            try:
                with open(os.path.join(d, name), "wb") as f:
                    data = blobs[name]
                    for off in range(0, len(data), 64 << 10):
                        f.write(data[off:off + (64 << 10)])
                    os.fsync(f.fileno())
            except OSError as e:
                errors.append(e)

        try:
            os.makedirs(d, exist_ok=True)
            threads = [threading.Thread(target=write, args=(s,)) for s in shards]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
            tmp = os.path.join(d, ".metadata.tmp")
            with open(tmp, "wb") as f:
                f.write(blobs[".metadata"])
                os.fsync(f.fileno())
            os.rename(tmp, os.path.join(d, ".metadata"))
            log(ctl, f"saved {n}")
        except OSError as e:
            log(ctl, f"failed {n} {type(e).__name__}")


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("ref_dir")
    ap.add_argument("ctl_dir")
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--mib", type=int, default=4, help="size of the largest tensor")
    ap.add_argument("--emulate", action="store_true")
    a = ap.parse_args(argv)
    if a.emulate:
        _emulated(a.run_dir, a.ref_dir, a.ctl_dir)
        return 0
    from torch113_compat import run_gloo_ranks  # before torch: Python 3.11 patch
    import torch
    torch.set_num_threads(1)
    error = run_gloo_ranks(_dcp_rank, a.world_size, a.run_dir, a.ref_dir, a.ctl_dir, a.mib)
    if error:
        sys.stderr.write(f"trainer failed: {error}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
