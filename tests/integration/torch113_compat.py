"""Shared by the scripts that drive torch 1.13's DCP (tests and benchmarks).

Importing this module BEFORE torch makes ``torch.distributed._shard`` importable on
Python 3.11: torch 1.13's sharded-tensor metadata uses dataclass instances as
dataclass field defaults, which 3.11 rejects as "mutable defaults" unless the class
is hashable, so unhashable dataclasses get the identity hash as they are created.

``free_port()`` gives a free TCP port on 127.0.0.1 for a gloo process group.
"""
import dataclasses
import socket

_orig_process_class = dataclasses._process_class


def _process_class(cls, *args, **kwargs):
    cls = _orig_process_class(cls, *args, **kwargs)
    if cls.__dict__.get("__hash__", object.__hash__) is None:
        cls.__hash__ = object.__hash__
    return cls


dataclasses._process_class = _process_class


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank, world, port, errq, fn, args):
    # Runs in each spawned process: torch is imported here, after the patch.
    import os
    import traceback

    import torch
    import torch.distributed as dist

    try:
        torch.set_num_threads(1)
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=world)
        fn(rank, world, *args)
        dist.barrier()
        dist.destroy_process_group()
    except BaseException:
        errq.put(f"rank {rank}:\n{traceback.format_exc()}")
        raise


def run_gloo_ranks(fn, world, *args):
    """Runs fn(rank, world, *args) in `world` spawned processes joined in a gloo
    process group on 127.0.0.1 (fn must be importable: a module-level function).
    Returns None when every rank succeeded, else the error text of the failed ranks."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    errq = ctx.SimpleQueue()
    try:
        mp.spawn(_rank_main, args=(world, free_port(), errq, fn, args), nprocs=world, join=True)
    except Exception as e:  # ProcessRaisedException etc.
        msgs = []
        while not errq.empty():
            msgs.append(errq.get())
        return f"{e}\n" + "\n".join(msgs)
    return None
