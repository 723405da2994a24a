#!/usr/bin/python3
"""One trainer "process": `driver.py TRAINER CONFIG_JSON` runs trainers.<TRAINER>.rank_main
in config["world"] gloo ranks on 127.0.0.1 (torch 1.13, tests/integration/torch113_compat.py).
Exit status 0: every rank finished without an error and wrote its report; 1: some rank
raised (the tracebacks are on stderr): the trainer saw an error."""
import json
import os
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # tests/integration
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from torch113_compat import run_gloo_ranks  # noqa: E402  (before torch)


def main(argv):
    trainer, cfg_path = argv
    with open(cfg_path) as f:
        cfg = json.load(f)
    from trainers.common import rank_entry
    error = run_gloo_ranks(rank_entry, cfg["world"], trainer, cfg)
    if error:
        sys.stderr.write(f"trainer {trainer} failed:\n{error}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
