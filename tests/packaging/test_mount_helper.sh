#!/usr/bin/env bash
# Tests the mount(8) helper, packaging/mount.fuse.ckptfs.
#
#   test_mount_helper.sh HELPER CKPTFS_BIN
#
# 1. Option translation, through the helper's -f (fake) flag: which options
#    become ckptfs flags, which go to FUSE, which are dropped, which fail.
# 2. Real mounts, as root: in a private mount namespace the helper is laid
#    over /usr/sbin (overlayfs), so `mount -t fuse.ckptfs`, `mount -a -T FSTAB`
#    and `umount` run exactly as on an installed system, without touching it.
#    A step is written and committed, and keep-last=1 must prune the older
#    one: the options really reached the daemon.
# Part 2 is skipped (exit 77 when part 1 passed) without root, /dev/fuse,
# unshare or overlayfs.
set -uo pipefail

helper=${1:?usage: test_mount_helper.sh HELPER CKPTFS_BIN}
ckptfs=${2:?usage: test_mount_helper.sh HELPER CKPTFS_BIN}
helper=$(readlink -f "$helper")
ckptfs=$(readlink -f "$ckptfs")

failures=0
pass() { echo "ok: $*"; }
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# --- 1. option translation (no mount) ---------------------------------------
# Runs the helper in fake mode; stdout gets its stderr, the status is kept.
fake() { CKPTFS_BIN=/opt/ckptfs sh "$helper" "$@" -f 2>&1; }

expect_cmd() {  # expect_cmd "expected command" helper-args...
  local want=$1
  shift
  local got
  got=$(fake "$@")
  local rc=$?
  if ((rc == 0)) && [[ "$got" == "mount.fuse.ckptfs: /opt/ckptfs $want" ]]; then
    pass "$* -> $want"
  else
    fail "$*: status $rc, got '$got', want 'mount.fuse.ckptfs: /opt/ckptfs $want'"
  fi
}

expect_error() {  # expect_error "message part" helper-args...
  local want=$1
  shift
  local got
  got=$(fake "$@")
  local rc=$?
  if ((rc == 1)) && [[ "$got" == *"$want"* ]]; then
    pass "$* refused: $want"
  else
    fail "$*: status $rc, got '$got', want status 1 and '$want'"
  fi
}

expect_cmd "mount /ckpt --cache /nvme/ckptfs -o fsname=/nvme/ckptfs" /nvme/ckptfs /ckpt
expect_cmd "mount /ckpt --cache /var/lib/ckptfs --cache-size 500G -o fsname=/var/lib/ckptfs" \
  /var/lib/ckptfs /ckpt -o defaults,_netdev,cache-size=500G
expect_cmd "mount /ckpt --cache /c --remote s3://bucket/run --s3-endpoint http://127.0.0.1:9000 -o fsname=/c" \
  /c /ckpt -o remote=s3://bucket/run,s3-endpoint=http://127.0.0.1:9000
# Everything mount(8), fstab and systemd add is dropped.
expect_cmd "mount /ckpt --cache /c -o fsname=/c" \
  /c /ckpt -o rw,defaults,auto,noauto,user,users,nouser,owner,group,_netdev,nofail,comment=x,x-systemd.automount,x-systemd.device-timeout=10s,x-mount.mkdir -n -t fuse.ckptfs
# Kernel and FUSE options go to FUSE; several -o are merged.
expect_cmd "mount /ckpt --cache /c -o fsname=/c,ro,noatime,nosuid,nodev,allow_other,auto_unmount" \
  /c /ckpt -o ro,noatime -o nosuid,nodev -oallow_other,auto_unmount
# Every ckptfs option, with the xattr spelling keep_last too; values keep
# '*', spaces and '=' as they are.
expect_cmd "mount /m --cache /c --keep-last 3 --keep-every 1000 --keep-steps 7 --ephemeral-every 50 --keep-interval 6h --keep-best 2 --score-mode max -o fsname=/c" \
  /c /m -o keep_last=3,keep-every=1000,keep-steps=7,ephemeral-every=50,keep-interval=6h,keep-best=2,score-mode=max
expect_cmd "mount /m --cache /c --step-pattern ckpt-(\\d+)* --commit-marker done --commit-marker .metadata --commit-idle 30 --commit-wait 60 -o fsname=/c" \
  /c /m -o 'step-pattern=ckpt-(\d+)*,commit-marker=done,commit-marker=.metadata,commit-idle=30,commit-wait=60'
expect_cmd "mount /m --cache /c --remote s3://b/p --s3-region eu-west-1 --s3-addressing path --cache-size 2T --cache-full-wait 10 --upload-parallel 4 --writer-socket none --log-level debug -o fsname=/c" \
  /c /m -o remote=s3://b/p,s3-region=eu-west-1,s3-addressing=path,cache-size=2T,cache-full-wait=10,upload-parallel=4,writer-socket=none,log_level=debug
expect_cmd "mount /m --cache /c --metadata-reserve 2% -o fsname=/c" /c /m -o metadata-reserve=2%
expect_cmd "mount /m --cache /c --inode-cache 1000000 -o fsname=/c" /c /m -o inode-cache=1000000
expect_cmd "mount /m --cache /c --passthrough off --io-uring on -o fsname=/c" /c /m -o passthrough=off,io_uring=on
expect_cmd "mount /m --cache /c --remote s3://b/p?x=1 -o fsname=/c" /c /m -o 'remote=s3://b/p?x=1'
expect_cmd "mount /m --cache /c --show-full -o fsname=/c,ro" /c /m -o ro,show-full
expect_cmd "mount /m --cache /c --show-latest --commit-settle 0.5 -o fsname=/c" /c /m -o show-latest,commit-settle=0.5
expect_cmd "mount /m --cache /c --nonempty -o fsname=/c" /c /m -o nonempty
expect_cmd "mount /m --cache /c --remote s3://b/p --node gpu-1 --refresh 5 --publish-timeout 600 --read-wait 30 -o fsname=/c" \
  /c /m -o remote=s3://b/p,node=gpu-1,refresh=5,publish-timeout=600,read-wait=30
expect_error "option 'nonempty' takes no value" /c /m -o nonempty=1
expect_cmd "mount /m --cache /c --retention hf:save_total_limit=2 -o fsname=/c" /c /m -o retention=hf:save_total_limit=2
# Errors name the option.
expect_error "unknown option 'bogus=1'" /c /m -o keep-last=3,bogus=1
expect_error "unknown option 'big_writes'" /c /m -o big_writes
expect_error "unknown option 'relatime'" /c /m -o relatime
expect_error "option 'remote' needs a value" /c /m -o remote
expect_error "option 'keep-last' needs a value" /c /m -o keep-last=
expect_error "the cache directory is the mount source" /c /m -o cache=/other
expect_error "option 'foreground' cannot be used" /c /m -o foreground
expect_error "option 'show-full' takes no value" /c /m -o show-full=1
expect_error "filesystem type 'ext4' is not fuse.ckptfs" /c /m -t ext4
expect_error "unexpected argument 'extra'" /c /m extra
expect_error "usage: mount.fuse.ckptfs CACHE_DIR MOUNTPOINT" /c
expect_error "must not contain a comma" /a,b /m
# Sloppy (-s): unknown options are warnings.
got=$(fake /c /m -s -o bogus,keep-last=1)
if [[ $? == 0 && "$got" == *"ignoring unknown option 'bogus'"* && "$got" == *"--keep-last 1 -o fsname=/c" ]]; then
  pass "-s ignores unknown options"
else
  fail "-s: got '$got'"
fi
# Captured once: `| grep -q` under pipefail fails when the writer dies of SIGPIPE.
helper_help=$(CKPTFS_BIN=/opt/ckptfs sh "$helper" --help)
if grep -q "keep-last=N" <<<"$helper_help"; then
  pass "--help lists the options"
else
  fail "--help does not list keep-last=N"
fi
# Every ckptfs mount flag has its option, NAME=VALUE or a bare NAME for
# flags without a value (the helper follows `ckptfs mount --help`; --cache is
# the source, the rest are ours).
flags=$("$ckptfs" mount --help | grep -oE '^  --[a-z0-9-]+' | sed 's/^  --//' | sort -u)
for flag in $flags; do
  case $flag in cache | foreground | help) continue ;; esac
  if grep -qE "(^| )$flag(=| |\$)" <<<"$helper_help"; then
    pass "ckptfs mount --$flag is a helper option"
  else
    fail "ckptfs mount --$flag has no $flag= option in the mount helper"
  fi
done

if ((failures)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi

# --- 2. real mounts ----------------------------------------------------------
skip() {
  echo "skipping the real mounts: $*"
  exit 77
}
((EUID == 0)) || skip "not root"
[[ -c /dev/fuse ]] || skip "no /dev/fuse"
command -v unshare >/dev/null || skip "no unshare"
grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null || true
grep -qw overlay /proc/filesystems || skip "no overlayfs"

work=$(mktemp -d "${TMPDIR:-/tmp}/ckptfs-mount-helper.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/sbin" "$work/cache" "$work/mnt" "$work/cache2" "$work/mnt2" "$work/remote"
install -m 0755 "$helper" "$work/sbin/mount.fuse.ckptfs"
printf '%s %s fuse.ckptfs defaults,_netdev,nofail,keep-last=1,remote=file://%s 0 0\n' \
  "$work/cache2" "$work/mnt2" "$work/remote" >"$work/fstab"

# Runs in the private mount namespace: mounts there are invisible outside and
# vanish with it; the trap unmounts them so no daemon outlives the test.
cat >"$work/inner.sh" <<'EOF'
set -u
work=$1
failures=0
pass() { echo "ok: $*"; }
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
cleanup() {
  for m in "$work/mnt" "$work/mnt2"; do
    grep -qs " $m fuse.ckptfs " /proc/self/mounts && { umount "$m" || fusermount3 -u -z "$m"; }
  done
}
trap cleanup EXIT
mounted() { grep -qs "^$1 $2 fuse.ckptfs " /proc/self/mounts; }
daemon_pid() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$1/.ckptfs/status.json"; }
wait_gone() {  # the daemon exits after umount (a zombie its reaper has not collected yet counts)
  for _ in $(seq 100); do
    case $(awk '/^State:/ { print $2 }' "/proc/$1/status" 2>/dev/null) in '' | Z) return 0 ;; esac
    sleep 0.1
  done
  return 1
}
commit_step() {  # a directory renamed into a step name is committed
  mkdir -p "$1/$2-tmp" && echo "$2" >"$1/$2-tmp/rank0.pt" && mv "$1/$2-tmp" "$1/$2"
}
state() { getfattr --only-values -n user.ckptfs.state "$1" 2>/dev/null; }

mount -t overlay overlay -o "lowerdir=$work/sbin:/usr/sbin" /usr/sbin || { echo "overlay on /usr/sbin failed" >&2; exit 2; }
[ -x /sbin/mount.fuse.ckptfs ] || { echo "/sbin/mount.fuse.ckptfs missing after the overlay" >&2; exit 2; }

# mount -t fuse.ckptfs with generic, FUSE and ckptfs options.
if mount -t fuse.ckptfs "$work/cache" "$work/mnt" -o defaults,_netdev,noatime,keep-last=1; then
  pass "mount -t fuse.ckptfs"
else
  fail "mount -t fuse.ckptfs failed"
fi
if mounted "$work/cache" "$work/mnt"; then
  pass "/proc/mounts shows the cache directory as the source"
else
  fail "no fuse.ckptfs mount of $work/cache on $work/mnt: $(grep ckptfs /proc/self/mounts)"
fi
grep -qs " $work/mnt fuse.ckptfs [^ ]*noatime" /proc/self/mounts && pass "noatime reached the kernel" ||
  fail "noatime missing: $(grep " $work/mnt " /proc/self/mounts)"
commit_step "$work/mnt/run1" step1
commit_step "$work/mnt/run1" step2
sleep 0.5
[ "$(state "$work/mnt/run1/step2")" = committed ] && pass "step2 committed" ||
  fail "step2 is '$(state "$work/mnt/run1/step2")', not committed"
[ ! -e "$work/mnt/run1/step1" ] && pass "keep-last=1 pruned step1" ||
  fail "step1 still there: keep-last=1 did not reach the daemon"
pid=$(daemon_pid "$work/mnt")
umount "$work/mnt" && pass "umount" || fail "umount failed"
mounted "$work/cache" "$work/mnt" && fail "still mounted after umount"
wait_gone "$pid" && pass "daemon exited after umount" || fail "daemon $pid still running after umount"

# Remounting shows the committed step again.
mount -t fuse.ckptfs "$work/cache" "$work/mnt" || fail "second mount -t failed"
[ "$(state "$work/mnt/run1/step2")" = committed ] && pass "step2 committed after remount" ||
  fail "after remount step2 is '$(state "$work/mnt/run1/step2")'"
umount "$work/mnt" || fail "second umount failed"

# Every kernel and FUSE option the helper passes on mounts, and the mount
# then serves (FUSE refuses some options only at its first request).
for opt in ro nosuid suid nodev dev noexec exec sync async dirsync atime noatime \
  allow_other allow_root auto_unmount default_permissions; do
  if mount -t fuse.ckptfs "$work/cache" "$work/mnt" -o "$opt" && sleep 0.2 &&
    mounted "$work/cache" "$work/mnt" && ls "$work/mnt/run1" >/dev/null; then
    pass "-o $opt"
  else
    fail "-o $opt: not mounted or not serving"
  fi
  # The next mount takes the cache's lock: wait for this daemon to let go.
  pid=$(daemon_pid "$work/mnt" 2>/dev/null)
  grep -qs " $work/mnt fuse.ckptfs " /proc/self/mounts && { umount "$work/mnt" || fusermount3 -u -z "$work/mnt"; }
  [ -z "$pid" ] || wait_gone "$pid" || fail "-o $opt: daemon $pid still running after umount"
done

# A bad option: mount fails with the helper's message, nothing is mounted.
out=$(mount -t fuse.ckptfs "$work/cache" "$work/mnt" -o keep-last=1,bogus 2>&1)
rc=$?
if [ $rc -ne 0 ] && echo "$out" | grep -q "unknown option 'bogus'" && ! mounted "$work/cache" "$work/mnt"; then
  pass "unknown option refused by mount -t (status $rc)"
else
  fail "unknown option: status $rc, output '$out'"
fi
out=$(mount -t fuse.ckptfs "$work/cache" "$work/mnt" -o keep-last=zero 2>&1)
rc=$?
if [ $rc -ne 0 ] && echo "$out" | grep -q "keep_last: 'zero' is not a positive integer" && ! mounted "$work/cache" "$work/mnt"; then
  pass "bad value refused by mount -t with ckptfs's message (status $rc)"
else
  fail "bad value: status $rc, output '$out'"
fi
out=$(mount -t fuse.ckptfs "$work/no-such-cache" "$work/mnt" 2>&1)
rc=$?
if [ $rc -eq 32 ] && echo "$out" | grep -q "does not exist" && ! grep -qs " $work/mnt " /proc/self/mounts; then
  pass "missing cache: mount fails with status 32 and ckptfs's message"
else
  fail "missing cache: status $rc, output '$out'"
fi

# fstab: mount -a, mount -a again (already mounted), umount, mount by target.
if mount -T "$work/fstab" -a && mounted "$work/cache2" "$work/mnt2"; then
  pass "mount -a -T FSTAB"
else
  fail "mount -a -T FSTAB did not mount $work/mnt2"
fi
out=$(mount -T "$work/fstab" -a -v 2>&1)
if [ $? -eq 0 ] && echo "$out" | grep -q "already mounted" && [ "$(grep -c " $work/mnt2 fuse.ckptfs " /proc/self/mounts)" -eq 1 ]; then
  pass "mount -a again: already mounted"
else
  fail "mount -a again: '$out'; $(grep -c " $work/mnt2 " /proc/self/mounts) mount(s)"
fi
commit_step "$work/mnt2/run" step10
sleep 0.5
[ "$(state "$work/mnt2/run/step10")" = committed ] && pass "step committed on the fstab mount" ||
  fail "fstab mount: step10 is '$(state "$work/mnt2/run/step10")'"
pid=$(daemon_pid "$work/mnt2")
umount "$work/mnt2" && ! mounted "$work/cache2" "$work/mnt2" && pass "umount of the fstab mount" ||
  fail "umount of the fstab mount"
wait_gone "$pid" || fail "daemon $pid still running after umount"
if mount -T "$work/fstab" "$work/mnt2" && mounted "$work/cache2" "$work/mnt2"; then
  pass "mount -T FSTAB MOUNTPOINT"
else
  fail "mount -T FSTAB MOUNTPOINT"
fi
[ "$(state "$work/mnt2/run/step10")" = committed ] || fail "after remount step10 is '$(state "$work/mnt2/run/step10")'"
umount "$work/mnt2" || fail "last umount"
exit $((failures > 0))
EOF

CKPTFS_BIN=$ckptfs unshare --mount --propagation private bash "$work/inner.sh" "$work"
rc=$?
if ((rc == 2)); then
  skip "this kernel does not allow an overlay on /usr/sbin here"
fi
exit "$rc"
