#!/usr/bin/env bash
# Installs everything needed to build and test ckptfs on Debian 12 (bookworm).
# Non-interactive and idempotent: run it as root (or a user with sudo) as often
# as you like; when every package is already there it touches nothing and
# needs no network.
set -euo pipefail

# Build: compiler, meson, and the libraries the daemon links against.
build_pkgs=(
  meson ninja-build pkg-config g++
  libfuse3-dev fuse3
  librocksdb-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev googletest
  libzstd-dev libcurl4-openssl-dev libssl-dev libpugixml-dev libisal-dev liburing-dev
)
# Debian packages (packaging/build-deb.sh, the 'packaging' test suite): the
# debhelper tool chain, dh-python for the Python binding, lintian.
deb_pkgs=(
  dpkg-dev debhelper dh-python fakeroot lintian
)
# Tests: xattr tools, pytest and torch 1.13 for /usr/bin/python3, node/npm
# for the S3 test server (s3rver, installed below), and the AWS CLI and s3fs
# to look at what ckptfs wrote to S3 from the outside; crcmod (a C CRC32C)
# checks the writer library's checksums independently of ours; clang-14 and
# its libFuzzer build the format readers' fuzz targets (tests/fuzz), and
# clang-14 runs the thread-safety analysis (tools/thread_safety_check.py);
# clang-format-14 (with git clang-format-14) checks the formatting of changed
# lines (tools/check_format.sh, the 'format' test).
test_pkgs=(
  attr python3-pytest python3-torch python3-crcmod python3-numpy
  nodejs npm
  awscli s3fs
  clang-14 libclang-rt-14-dev
  clang-format-14
  # A one-node Ceph cluster (monitor, memstore OSD, RADOS Gateway) run by
  # tests/integration/ceph_fixture.py: the gateway is the real S3 server whose
  # conditional writes (If-None-Match: *) and Content-MD5 checks the cluster
  # tests need; s3rver ignores them.
  ceph-mon ceph-osd radosgw ceph-common
)

log() { echo "install-deps: $*"; }

if ((EUID == 0)); then
  as_root=()
elif command -v sudo >/dev/null; then
  as_root=(sudo)
else
  log "must run as root (sudo not found)" >&2
  exit 1
fi

is_installed() {
  [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" == "install ok installed" ]]
}

missing=()
for pkg in "${build_pkgs[@]}" "${deb_pkgs[@]}" "${test_pkgs[@]}"; do
  is_installed "$pkg" && continue
  # NodeSource's nodejs bundles npm and conflicts with Debian's npm package.
  if [[ "$pkg" == npm ]] && command -v npm >/dev/null; then continue; fi
  missing+=("$pkg")
done

if ((${#missing[@]})); then
  log "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt_opts=(-q -y -o Dpkg::Use-Pty=0 -o APT::Install-Recommends=false)
  "${as_root[@]}" apt-get -qq update
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get "${apt_opts[@]}" install "${missing[@]}" >/dev/null
else
  log "all packages present"
fi

# s3rver, the local S3 server the S3 client tests run against, goes into the
# repository (tests/s3rver, ignored by git) so the tests find it by path. npm
# answers from its cache when the version is already there.
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ ! -x "$repo/tests/s3rver/node_modules/.bin/s3rver" ]]; then
  log "installing s3rver into $repo/tests/s3rver"
  npm install --prefix "$repo/tests/s3rver" --no-audit --no-fund --prefer-offline --silent s3rver@3.7.1 >/dev/null
else
  log "s3rver present"
fi

# The integration tests mount for real, so the kernel needs /dev/fuse. In a
# container neither step may be allowed: say so and let the tests skip.
if [[ ! -c /dev/fuse ]]; then
  "${as_root[@]}" modprobe fuse 2>/dev/null || true
fi
if [[ ! -c /dev/fuse ]]; then
  "${as_root[@]}" mknod -m 0666 /dev/fuse c 10 229 2>/dev/null || true
fi
if [[ -c /dev/fuse ]]; then
  log "/dev/fuse present"
else
  log "warning: /dev/fuse missing (modprobe fuse failed); mount tests will not run" >&2
fi

# The tests run under /usr/bin/python3, which may not be the python3 on PATH.
if ! /usr/bin/python3 -c 'import torch, pytest' 2>/dev/null; then
  log "warning: /usr/bin/python3 cannot import torch and pytest" >&2
fi
