#!/bin/sh
# Run by `meson install`: refreshes the dynamic linker's cache so programs
# and the Python binding find the just-installed libckptfs-writer.so.1
# (meson 1.0 does not do it). Staged installs (DESTDIR, as in the Debian
# package build) are left alone: packages refresh it from their triggers.
[ -n "${DESTDIR:-}" ] && exit 0
command -v ldconfig >/dev/null 2>&1 || exit 0
ldconfig || echo "ldconfig failed: run it by hand so libckptfs-writer.so.1 is found" >&2
exit 0
