#!/usr/bin/env bash
# Builds the Debian packages of ckptfs (Debian 12) and puts the .deb files in
# OUTDIR (default: build-deb/ in the repository).
#
#   packaging/install-deps.sh            # build tools: debhelper, dh-python, lintian, ...
#   packaging/build-deb.sh [OPTIONS] [OUTDIR]
#   dpkg -i build-deb/ckptfs_*.deb       # or apt install ./build-deb/ckptfs_*.deb
#
# The checkout is left alone: the tracked and untracked-but-not-ignored files
# are copied to a scratch directory, packaging/debian is copied to debian/
# there, and `dpkg-buildpackage -us -uc -b` runs in that copy. No debian/ or
# obj-*/ directory appears in the source tree.
#
# Options:
#   --lintian         run lintian on the result (an error fails the script)
#   --without-writer  build only the ckptfs package, not libckptfs-writer1,
#                     libckptfs-writer-dev and python3-ckptfs. Implied when the
#                     tree has no writer library (no shared_library('ckptfs-writer')).
#   --keep            keep the scratch directory (its path is printed)
#   -h, --help        this text
#
# Exit status: 0 when the packages were built (and lintian found no error).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
outdir=
run_lintian=0
without_writer=0
keep=0

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
log() { echo "build-deb: $*"; }
die() { echo "build-deb: $*" >&2; exit 1; }

while (($#)); do
  case $1 in
    --lintian) run_lintian=1 ;;
    --without-writer) without_writer=1 ;;
    --keep) keep=1 ;;
    -h | --help) usage; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *)
      [[ -z "$outdir" ]] || die "more than one OUTDIR given"
      outdir=$1
      ;;
  esac
  shift
done
outdir=${outdir:-$repo/build-deb}

for tool in dpkg-buildpackage dh fakeroot meson; do
  command -v "$tool" >/dev/null || die "$tool not found; run packaging/install-deps.sh"
done
((run_lintian == 0)) || command -v lintian >/dev/null || die "lintian not found; run packaging/install-deps.sh"

# The package version is debian/changelog's; it must be meson's project version.
meson_version=$(sed -n "s/^[[:space:]]*version[[:space:]]*:[[:space:]]*'\([^']*\)'.*/\1/p" "$repo/meson.build" | head -n1)
deb_version=$(dpkg-parsechangelog -l "$repo/packaging/debian/changelog" -S Version)
if [[ "${deb_version%%-*}" != "$meson_version" ]]; then
  die "packaging/debian/changelog says $deb_version but meson.build says $meson_version; add a changelog entry (dch -c packaging/debian/changelog -v $meson_version)"
fi

scratch=$(mktemp -d "${TMPDIR:-/tmp}/ckptfs-deb.XXXXXX")
cleanup() {
  if ((keep)); then
    log "scratch directory kept: $scratch"
  else
    rm -rf "$scratch"
  fi
}
trap cleanup EXIT
src="$scratch/ckptfs-$meson_version"
mkdir -p "$src"

# Copy the source: what git tracks plus new files not ignored (so work in
# progress builds too), without build directories or node_modules.
if git -C "$repo" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git -C "$repo" ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [[ -e "$repo/$f" || -L "$repo/$f" ]] && printf '%s\0' "$f"; done |
    tar -C "$repo" --null -T - -cf - | tar -C "$src" -xf -
else
  tar -C "$repo" --exclude='./build*' --exclude='./obj-*' --exclude='./debian' \
    --exclude='./tests/s3rver/node_modules' --exclude='./.git' -cf - . | tar -C "$src" -xf -
fi
rm -rf "$src/debian"
cp -a "$repo/packaging/debian" "$src/debian"

if ((without_writer == 0)) &&
  ! grep -rEqs --include=meson.build "library\([[:space:]]*'ckptfs-writer'" "$src"; then
  log "no writer library in this tree (no shared_library('ckptfs-writer') in a meson.build): building the ckptfs package only"
  without_writer=1
fi
if ((without_writer)); then
  writer_pkgs=(libckptfs-writer1 libckptfs-writer-dev python3-ckptfs)
  # Drop the library's stanzas from debian/control and their .install files.
  awk -v drop="${writer_pkgs[*]}" '
    BEGIN { n = split(drop, d, " "); for (i = 1; i <= n; i++) skip_pkg[d[i]] = 1; RS = ""; ORS = "\n\n" }
    { if (match($0, /(^|\n)Package: [^\n]*/)) { p = substr($0, RSTART, RLENGTH); sub(/.*Package: /, "", p); if (p in skip_pkg) next } print }
  ' "$src/debian/control" >"$src/debian/control.new"
  mv "$src/debian/control.new" "$src/debian/control"
  for p in "${writer_pkgs[@]}"; do rm -f "$src/debian/$p".*; done
  sed -i '/^ dh-sequence-python3,$/d' "$src/debian/control"
  # Files meson installs for the library (forced --without-writer) are not
  # packaged on purpose.
  cat >"$src/debian/not-installed" <<'EOF'
usr/include/ckptfs/*
usr/lib/${DEB_HOST_MULTIARCH}/libckptfs-writer.so*
usr/lib/${DEB_HOST_MULTIARCH}/pkgconfig/ckptfs-writer.pc
usr/lib/python3/dist-packages/ckptfs/*
EOF
fi

log "building in $src"
(cd "$src" && dpkg-buildpackage -us -uc -b -Jauto)

mkdir -p "$outdir"
shopt -s nullglob
artifacts=("$scratch"/*.deb "$scratch"/*.ddeb "$scratch"/*.changes "$scratch"/*.buildinfo)
((${#artifacts[@]})) || die "dpkg-buildpackage produced no packages"
cp -f "${artifacts[@]}" "$outdir"/
changes=$(cd "$outdir" && ls -t ckptfs_"$deb_version"_*.changes | head -n1)
log "packages in $outdir:"
for f in "${artifacts[@]}"; do
  [[ $f == *.deb ]] && echo "  $(basename "$f")"
done

if ((run_lintian)); then
  log "lintian $outdir/$changes"
  # Exit status 0 unless lintian reports an error (E:); warnings are printed.
  lintian --info --display-info --fail-on error "$outdir/$changes"
fi
