"""Shared by the scripts that drive torch 1.13's DCP (tests and benchmarks).

Importing this module BEFORE torch makes ``torch.distributed._shard`` importable on
Python 3.11: torch 1.13's sharded-tensor metadata uses dataclass instances as
dataclass field defaults, which 3.11 rejects as "mutable defaults" unless the class
is hashable, so unhashable dataclasses get the identity hash as they are created.

``run_gloo_ranks()`` runs a function in N gloo ranks on 127.0.0.1, riding out the rare
native aborts of torch 1.13's gloo in process group setup and teardown (see below).
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


def _rank_main(rank, world, port, statq, fn, args):
    # Runs in each spawned process: torch is imported here, after the patch.
    # Reports ("started", rank) once the process group is up, ("done", rank) once
    # every rank has finished fn, or ("error", rank, traceback).
    import os
    import traceback

    import torch
    import torch.distributed as dist

    try:
        torch.set_num_threads(1)
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=world)
        statq.put(("started", rank))
        fn(rank, world, *args)
        dist.barrier()
        statq.put(("done", rank))
        dist.destroy_process_group()
    except BaseException:
        statq.put(("error", rank, traceback.format_exc()))
        raise


# gloo in torch 1.13 now and then aborts a rank in native code (std::terminate,
# "terminate called without an active exception") while it sets up its TCP pairs
# or tears them down, on a loaded machine. Neither is the code under test: a run
# that died before any rank got past init_process_group is run again on a fresh
# port, and an abort after every rank passed the final barrier is reported but
# not counted as a failure (the work was complete; callers check its results).
_SETUP_ATTEMPTS = 3


def _drain(statq):
    started, done, errors = set(), set(), []
    while not statq.empty():
        m = statq.get()
        if m[0] == "started":
            started.add(m[1])
        elif m[0] == "done":
            done.add(m[1])
        else:
            errors.append(f"rank {m[1]}:\n{m[2]}")
    return started, done, errors


def run_with_gloo_retries(launch_once, world, context):
    """launch_once(port, statq) starts `world` processes running _rank_main, waits for
    them and returns None on success, else a line saying how they failed. Applies the
    policy above; returns None or the failure text with the ranks' tracebacks."""
    import sys

    for attempt in range(1, _SETUP_ATTEMPTS + 1):
        statq = context.SimpleQueue()
        failure = launch_once(free_port(), statq)
        if failure is None:
            return None
        started, done, errors = _drain(statq)
        if not errors and len(done) == world:
            sys.stderr.write(f"note: gloo aborted a rank after all {world} had finished "
                             f"(ignored): {failure}\n")
            return None
        if not errors and not started and attempt < _SETUP_ATTEMPTS:
            sys.stderr.write(f"note: gloo process group setup failed ({failure}); "
                             f"attempt {attempt + 1} of {_SETUP_ATTEMPTS}\n")
            continue
        return f"{failure}\n" + "\n".join(errors)


def run_gloo_ranks(fn, world, *args):
    """Runs fn(rank, world, *args) in `world` spawned processes joined in a gloo
    process group on 127.0.0.1 (fn must be importable: a module-level function).
    Returns None when every rank succeeded, else the error text of the failed ranks."""
    import torch.multiprocessing as mp

    def launch_once(port, statq):
        try:
            mp.spawn(_rank_main, args=(world, port, statq, fn, args), nprocs=world, join=True)
        except Exception as e:  # ProcessRaisedException, ProcessExitedException
            return str(e)
        return None

    return run_with_gloo_retries(launch_once, world, mp.get_context("spawn"))
