# Shared by the benchmark wrappers: finds the ckptfs binary, mounts it over a
# fresh cache in a temporary work directory, prints what is measured, and
# always unmounts and removes everything on exit (also on failure and Ctrl-C).
#
#   source bench/mount_env.sh
#   bench_mount NAME WORKDIR_PARENT [MOUNT ARGS...]
#
# Sets: ckptfs (binary), work, mnt, cache. Needs: build (the build directory).

bench_mount() {
  bench_name="$1"
  local workdir_parent="$2"
  shift 2
  local -a mount_args=("$@")
  ckptfs="${CKPTFS:-}"
  if [[ -z "$ckptfs" ]]; then
    if [[ -x "$build/ckptfs" ]]; then
      ckptfs="$build/ckptfs"
    elif command -v ckptfs >/dev/null; then
      ckptfs="$(command -v ckptfs)"
    else
      echo "$bench_name: no ckptfs binary in $build or on PATH" >&2
      exit 1
    fi
  fi
  if [[ ! -d "$workdir_parent" ]]; then
    echo "$bench_name: --workdir $workdir_parent is not a directory" >&2
    exit 1
  fi

  work="$(mktemp -d "$workdir_parent/ckptfs-$bench_name.XXXXXX")"
  work="$(cd "$work" && pwd -P)"
  mnt="$work/mnt"

  # Waits (up to ~10 s) for the daemon serving $mnt to exit after the unmount,
  # so the cache is not removed from under a daemon still closing RocksDB.
  wait_for_daemon() {
    local i proc alive
    local -a argv
    for ((i = 0; i < 100; i++)); do
      alive=0
      for proc in /proc/[0-9]*; do
        mapfile -d '' -t argv 2>/dev/null <"$proc/cmdline" || continue
        ((${#argv[@]} > 1)) && [[ "${argv[0]##*/}" == ckptfs ]] || continue
        if printf '%s\n' "${argv[@]:1}" | grep -qxF -- "$mnt"; then
          alive=1
          break
        fi
      done
      ((alive)) || return 0
      sleep 0.1
    done
    echo "$bench_name: daemon for $mnt still running after unmount" >&2
  }

  cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if mountpoint -q "$mnt" 2>/dev/null; then
      fusermount3 -u "$mnt" 2>/dev/null || fusermount3 -uz "$mnt" 2>/dev/null ||
        umount -l "$mnt" 2>/dev/null || true
    fi
    wait_for_daemon
    if mountpoint -q "$mnt" 2>/dev/null; then
      echo "$bench_name: $mnt is still mounted; leaving $work in place" >&2
    else
      # --one-file-system: never descend into a mount that is somehow still there.
      rm -rf --one-file-system "$work"
    fi
    exit "$rc"
  }
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM

  mkdir "$work/cache" "$mnt" "$work/direct"
    cache="$work/cache"

  fstype="$(findmnt -no FSTYPE -T "$work" 2>/dev/null || stat -f -c %T "$work")"
  source_dev="$(findmnt -no SOURCE -T "$work" 2>/dev/null || echo '?')"
  version="$("$ckptfs" --version 2>/dev/null | head -n1 || true)"
  [[ -n "$version" ]] || version="$("$ckptfs" version 2>/dev/null | head -n1 || true)"
  echo "kernel:   $(uname -r)"
  echo "workdir:  $work ($fstype on $source_dev)"
  echo "daemon:   $ckptfs (${version:-version unknown})"

  "$ckptfs" mount "$mnt" --cache "$work/cache" "${mount_args[@]}"
  if ! mountpoint -q "$mnt"; then
    echo "$bench_name: ckptfs mount returned but $mnt is not a mount point" >&2
    exit 1
  fi
  echo "mount:    $(findmnt -no FSTYPE,OPTIONS "$mnt")"
  echo

}
