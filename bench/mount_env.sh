# Shared by the benchmark wrappers: finds the ckptfs binary, mounts it over a
# fresh cache in a temporary work directory, prints what is measured, and
# always unmounts and removes everything on exit (also on failure and Ctrl-C).
#
#   source bench/mount_env.sh
#   bench_mount NAME WORKDIR_PARENT [MOUNT ARGS...]
#   bench_mount_more TAG [MOUNT ARGS...]   # a second daemon in the same work
#                                          # directory: sets mnt_more, cache_more
#   bench_daemon_pid MNT                   # the pid of the daemon serving MNT
#   bench_passthrough MNT                  # one line: status.json's passthrough
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
  # Every mount made from here on, so that cleanup unmounts each of them.
  bench_mounts=("$mnt")

  # Waits (up to ~10 s) for the daemon serving $1 to exit after the unmount,
  # so the cache is not removed from under a daemon still closing RocksDB.
  wait_for_daemon() {
    local i
    for ((i = 0; i < 100; i++)); do
      [[ -n "$(bench_daemon_pid "$1")" ]] || return 0
      sleep 0.1
    done
    echo "$bench_name: daemon for $1 still running after unmount" >&2
  }

  cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    local m still=0
    for m in "${bench_mounts[@]}"; do
      if mountpoint -q "$m" 2>/dev/null; then
        fusermount3 -u "$m" 2>/dev/null || fusermount3 -uz "$m" 2>/dev/null ||
          umount -l "$m" 2>/dev/null || true
      fi
      wait_for_daemon "$m"
      if mountpoint -q "$m" 2>/dev/null; then
        echo "$bench_name: $m is still mounted" >&2
        still=1
      fi
    done
    if ((still)); then
      echo "$bench_name: leaving $work in place" >&2
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

# A second (third, ...) daemon beside bench_mount's, for benchmarks that compare
# mount options in one run: $work/mnt-TAG over its own cache $work/cache-TAG,
# on the same filesystem as the first, unmounted by the same cleanup.
bench_mount_more() {
  local tag="$1"
  shift
  mnt_more="$work/mnt-$tag"
  cache_more="$work/cache-$tag"
  mkdir "$mnt_more" "$cache_more"
  bench_mounts+=("$mnt_more")
  "$ckptfs" mount "$mnt_more" --cache "$cache_more" "$@"
  if ! mountpoint -q "$mnt_more"; then
    echo "$bench_name: ckptfs mount returned but $mnt_more is not a mount point" >&2
    exit 1
  fi
}

# The daemon is the ckptfs process that names the mount point in its argv
# (`ckptfs mount` forks it); prints nothing when there is none.
bench_daemon_pid() {
  local proc
  local -a argv
  for proc in /proc/[0-9]*; do
    mapfile -d '' -t argv 2>/dev/null <"$proc/cmdline" || continue
    ((${#argv[@]} > 1)) && [[ "${argv[0]##*/}" == ckptfs ]] || continue
    if printf '%s\n' "${argv[@]:1}" | grep -qxF -- "$1"; then
      echo "${proc#/proc/}"
      return 0
    fi
  done
}

# What a reader needs to know about a mount's data path: whether the kernel
# passes opens through to the backing files, why not, and how many opens it
# did, from the daemon's own status.json.
bench_passthrough() {
  python3 - "$1/.ckptfs/status.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])).get("passthrough")
if p is None:
    sys.exit(f"no passthrough block in {sys.argv[1]} (a daemon older than --passthrough?)")
line = f"mode {p['mode']}, active {str(p['active']).lower()}, opens {p['opens']}"
if p.get("daemon_opens"):
    line += ", opens through the daemon: " + ", ".join(f"{k} {v}" for k, v in sorted(p["daemon_opens"].items()))
if p.get("reason"):
    line += f" ({p['reason']})"
print(line)
PY
}
