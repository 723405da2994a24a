#!/usr/bin/env python3
"""Start N ranks of a script with torchrun's environment (one node), wait, report.

`python3 -m torch.distributed.run` cannot start on Debian sid's torch 2.14: its rendezvous
creates a TCPStore with use_libuv=True, and python3-torch is built without libuv
("DistStoreError: use_libuv was requested but PyTorch was built without libuv support"),
whatever USE_LIBUV says. The workers themselves are fine: env:// rendezvous honours
USE_LIBUV=0. So this sets what torchrun sets for each worker (RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and runs
them. Each rank's output goes to <logs>.rank<N>.log; the exit status is 0 only when every rank
exited 0; if one fails or the time is up, the others are killed (as torchrun does).

usage: launch_ranks.py --nproc 2 --logs PREFIX [--timeout S] -- script.py [args...]
"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nproc", type=int, required=True)
    p.add_argument("--logs", required=True)
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    a = p.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(a.nproc):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(a.nproc),
                   LOCAL_WORLD_SIZE=str(a.nproc), GROUP_RANK="0", ROLE_RANK=str(r),
                   ROLE_WORLD_SIZE=str(a.nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   USE_LIBUV="0")
        log = open(f"{a.logs}.rank{r}.log", "wb")
        procs.append(subprocess.Popen([sys.executable, *cmd], env=env, stdout=log,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        log.close()
    deadline = time.monotonic() + a.timeout
    rcs = [None] * a.nproc
    while any(rc is None for rc in rcs):
        for i, pr in enumerate(procs):
            if rcs[i] is None:
                rcs[i] = pr.poll()
        failed = any(rc not in (None, 0) for rc in rcs)
        if failed or time.monotonic() > deadline:
            for i, pr in enumerate(procs):
                if rcs[i] is None:
                    pr.send_signal(signal.SIGKILL)
                    rcs[i] = pr.wait()
            break
        time.sleep(0.05)
    print("rank exit codes:", rcs, flush=True)
    return 0 if all(rc == 0 for rc in rcs) else 1


if __name__ == "__main__":
    sys.exit(main())
