"""Emulations of the checkpoint code of the trainers ckptfs serves (issue 14), one module
per trainer, each performing exactly the file operations of the seed it follows
(../shared/seeds): same names, same order of mkdir, writes, fsyncs, temporary files,
renames, existence checks, listings and removals.

The package itself imports no torch: the trainers' discovery functions (`latest_*`,
`find_*`) are plain os calls the tests use too; torch is imported by the save/load code,
which runs in rank processes started through `driver.py` (torch 1.13, gloo ranks).

    harness.py   what the tests use: run_phase() starts a trainer "process" (driver.py
                 with N gloo ranks) and merges the ranks' reports
    driver.py    the process entry point (imports torch113_compat before torch)
    common.py    deterministic tensors, the per-rank report, barriers, safetensors
                 bytes, a torch 2.x-style DCP FileSystemWriter for torch 1.13
"""
