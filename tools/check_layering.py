#!/usr/bin/env python3
"""Checks that every source file under src/ includes only headers of its own
layer or of layers below it, and outside libraries only where they belong
(the table in src/meson.build). Run by the build; exits 1 naming each
offending #include, so a layering mistake fails the build, not a review.

Usage: check_layering.py SRC_DIR STAMP_FILE
"""
import pathlib
import re
import sys

# folder -> layer
LAYER_OF = {
    "common": "common",
    "manifest": "store", "data": "store",
    "formats": "formats", "views": "formats",
    "remote": "remote",
    "control": "namespace", "retention": "namespace", "namespace": "namespace",
    "lifecycle": "lifecycle",
    "tiering": "tiering",
    "cluster": "cluster",
    "maintenance": "maintenance",
    "fastpath": "daemon", "fuse": "daemon", "cli": "daemon",
    "writer": "writer",
}
# layer -> the layers it may use (besides itself), transitively closed below.
USES = {
    "common": set(),
    "store": {"common"},
    "formats": {"common"},
    "remote": {"common"},
    "namespace": {"common", "store", "formats"},
    "lifecycle": {"common", "store", "formats", "namespace"},
    "tiering": {"common", "store", "formats", "remote", "namespace"},
    "cluster": {"common", "store", "formats", "remote", "namespace"},
    "maintenance": {"common", "store", "formats", "remote"},
    "daemon": {"common", "store", "formats", "remote", "namespace", "lifecycle",
               "tiering", "cluster", "maintenance"},
    # libckptfs-writer is shipped on its own: it shares only the leaf helpers
    # and the fast path's wire protocol with the daemon.
    "writer": {"common", "daemon"},
}
# Outside libraries: the layers that may include them.
SYSTEM = {
    "fuse": {"daemon"}, "fuse_lowlevel.h": {"daemon"}, "fuse.h": {"daemon"},
    "curl": {"remote"}, "openssl": {"remote"}, "pugixml.hpp": {"remote"}, "rocksdb": {"store"},
}
# Tests link everything; the rule is for the code that ships.
TEST_FILE = re.compile(r"(_test\.cc|_test_util\.h|_for_test\.(cc|h)|test_env\.h|_fuzz\.cc)$")
LOCAL = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/[^"]+"', re.M)
SYS = re.compile(r"^\s*#\s*include\s+<([^>/]+)", re.M)
# writer/ may use exactly these files of the daemon layer.
WRITER_ALLOWED = {"fastpath/wire.h"}


def main() -> int:
    src = pathlib.Path(sys.argv[1])
    errors = []
    for path in sorted(src.rglob("*")):
        if path.suffix not in (".cc", ".h", ".c", ".cu") or TEST_FILE.search(path.name):
            continue
        folder = path.relative_to(src).parts[0]
        layer = LAYER_OF.get(folder)
        if layer is None:
            errors.append(f"{path}: folder {folder}/ has no layer in tools/check_layering.py")
            continue
        text = path.read_text(errors="replace")
        for m in LOCAL.finditer(text):
            dep = m.group(1)
            dep_layer = LAYER_OF.get(dep)
            if dep_layer is None or dep_layer == layer or dep_layer in USES[layer]:
                continue
            full = re.search(r'"([^"]+)"', m.group(0)).group(1)
            if layer == "writer" and full in WRITER_ALLOWED:
                continue
            errors.append(f"{path}: layer '{layer}' includes {full} from layer '{dep_layer}'")
        for m in SYS.finditer(text):
            lib = m.group(1)
            allowed = SYSTEM.get(lib)
            if allowed is not None and layer not in allowed:
                errors.append(f"{path}: layer '{layer}' includes <{lib}...>, "
                              f"reserved to {', '.join(sorted(allowed))}")
    if errors:
        print("layering violations (see src/meson.build):", file=sys.stderr)
        for e in errors:
            print("  " + e, file=sys.stderr)
        return 1
    pathlib.Path(sys.argv[2]).write_text("ok\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
