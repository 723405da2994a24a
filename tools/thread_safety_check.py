#!/usr/bin/env python3
"""Compiles every shipped source file with clang's -Wthread-safety and fails
on any warning it gives: a GUARDED_BY member touched without its mutex, a
REQUIRES function called without it. Uses the build's compile_commands.json
for the flags, so it checks what the build compiles (syntax only, no code
generation). GCC, which builds ckptfs, ignores the annotations.

Usage: thread_safety_check.py BUILD_DIR SOURCE_ROOT
Exits 77 (skipped) without clang++-14.
"""
import concurrent.futures
import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys

CLANG = shutil.which("clang++-14") or shutil.which("clang++")
TSA_FLAGS = ["-fsyntax-only", "-Wno-everything", "-Wthread-safety", "-Wthread-safety-beta",
             "-Werror=thread-safety", "-Werror=thread-safety-beta", "-ferror-limit=0"]
# GCC flags clang does not know, and outputs that syntax-only does not make.
DROP = {"-MD", "-c", "-fdiagnostics-color=always", "-pipe"}
DROP_WITH_ARG = {"-o", "-MQ", "-MF"}


def clang_command(entry):
    args = shlex.split(entry["command"])
    # Drop the compiler and any launcher before it (meson puts ccache there
    # when it is installed): the flags start at the first option.
    while args and not args[0].startswith("-"):
        args = args[1:]
    out = [CLANG]
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in DROP_WITH_ARG:
            skip = True
            continue
        if a in DROP or a == entry["file"]:
            continue
        out.append(a)
    return out + TSA_FLAGS + [entry["file"]]


def main() -> int:
    if CLANG is None:
        print("SKIP: clang++-14 is not installed (apt-get install clang-14)")
        return 77
    build = pathlib.Path(sys.argv[1])
    src = str(pathlib.Path(sys.argv[2]).resolve() / "src") + os.sep
    entries = json.loads((build / "compile_commands.json").read_text())
    todo = []
    for e in entries:
        path = str((pathlib.Path(e["directory"]) / e["file"]).resolve())
        if not path.startswith(src) or not path.endswith(".cc") or path.endswith("_test.cc"):
            continue
        if len(sys.argv) > 3 and sys.argv[3] not in path:  # a subset, while annotating
            continue
        if "/writer/" in path:  # built with its own flags (CUDA); no shared state there
            continue
        todo.append(e)

    def check(e):
        r = subprocess.run(clang_command(e), cwd=e["directory"], capture_output=True, text=True)
        return e["file"], r.returncode, r.stderr

    failed = 0
    jobs = int(os.environ.get("CKPTFS_TSA_JOBS", os.cpu_count() or 1))
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for path, rc, err in pool.map(check, todo):
            if rc != 0:
                failed += 1
                sys.stderr.write(f"--- {path}\n{err}")
    print(f"thread-safety analysis: {len(todo)} files, {failed} with errors")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
