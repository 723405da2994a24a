#!/usr/bin/python3
"""One trainer "process": `driver.py TRAINER CONFIG_JSON` runs trainers.<TRAINER>.rank_main
in config["world"] gloo ranks on 127.0.0.1 (torch 1.13; each rank runs
torch113_compat's rank main: gloo setup, the function, a final barrier, teardown, its
progress and traceback on a status queue; a gloo abort in setup or teardown is handled
as torch113_compat says). Exit status 0: every rank finished without an error and
wrote its report; 1: some rank raised (the tracebacks are on stderr): the trainer saw an
error.

The ranks are started like torch.multiprocessing.spawn does (spawn context, the first
failure ends the others), but without importing torch here: a torch import costs this
2-core machine about 2 s of CPU, and every test runs several trainer processes."""
import json
import multiprocessing
import os
import sys
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # tests/integration
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from torch113_compat import _rank_main, run_with_gloo_retries  # noqa: E402  (before any torch import)


def run_ranks(fn, world, *args):
    ctx = multiprocessing.get_context("spawn")

    def launch_once(port, statq):
        procs = [ctx.Process(target=_rank_main, args=(r, world, port, statq, fn, args),
                             daemon=False) for r in range(world)]
        for p in procs:
            p.start()
        failed = None
        while any(p.is_alive() for p in procs):
            for p in procs:
                if p.exitcode not in (None, 0):
                    failed = failed or f"rank {procs.index(p)} exited with {p.exitcode}"
            if failed:
                time.sleep(0.5)          # let the others report their own errors
                for p in procs:
                    if p.is_alive():
                        p.terminate()
                break
            time.sleep(0.02)
        for p in procs:
            p.join()
        codes = [p.exitcode for p in procs]
        if failed is None and any(c != 0 for c in codes):
            failed = f"exit codes {codes}"
        return failed

    return run_with_gloo_retries(launch_once, world, ctx)


def main(argv):
    trainer, cfg_path = argv
    with open(cfg_path) as f:
        cfg = json.load(f)
    from trainers.common import rank_entry
    error = run_ranks(rank_entry, cfg["world"], trainer, cfg)
    if error:
        sys.stderr.write(f"trainer {trainer} failed:\n{error}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
