#!/usr/bin/env bash
# Builds the libFuzzer targets of the checkpoint format readers with clang++-14
# (-fsanitize=fuzzer,address,undefined, straight from the src/ files they
# need; not through the meson build, which uses g++), builds their seed
# corpora from the real checkpoints, replays tests/fuzz/regressions, and
# fuzzes each target for a while. See tests/fuzz/README.md.
#
# Usage: tests/fuzz/run_fuzzers.sh [SECONDS_PER_TARGET] [BUILD_DIR]
#   SECONDS_PER_TARGET  fuzzing time per target (default 10)
#   BUILD_DIR           objects, binaries, the growing corpora, crash files and
#                       logs; kept between runs so objects are rebuilt only
#                       when a source or header changes (default: a temporary
#                       directory, removed after a clean run, kept on failure)
# Environment:
#   CKPTFS_SOURCE_DIR   repository root (default: derived from this script)
#   CKPTFS_SHARED_DIR   an extra folder holding testdata/dcp to seed from
#                       (default: $CKPTFS_SOURCE_DIR/../shared); the real
#                       checkpoints in tests/fixtures/dcp are always read
#   CKPTFS_FUZZ_TARGETS space-separated subset of the targets below
#   CKPTFS_FUZZ_CXX     compiler (default clang++-14)
#   CKPTFS_FUZZ_FLAGS   extra libFuzzer flags for every target (e.g. -jobs=2)
#
# Exit status: 0 when every target ran clean; 1 when a target (or a
# regression input) crashed, leaked, timed out, ran out of memory or failed to
# build; 77 (meson's "skipped") when clang++-14 or libFuzzer is missing.
set -uo pipefail

seconds="${1:-10}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || ((seconds < 1)); then
  echo "run_fuzzers: SECONDS_PER_TARGET must be a positive integer, not '$seconds'" >&2
  exit 2
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
source_dir="${CKPTFS_SOURCE_DIR:-$(cd "$here/../.." && pwd -P)}"
shared_dir="${CKPTFS_SHARED_DIR:-$source_dir/../shared}"
cxx="${CKPTFS_FUZZ_CXX:-clang++-14}"

log() { echo "run_fuzzers: $*"; }
skip() { log "SKIP: $*"; exit 77; }

# target -> sources (relative to the repository) and -max_len. The inputs are
# small real files (largest seeds: .metadata 3.5 KB, torch.save zips 4 KB,
# safetensors headers < 1 KB); max_len leaves room to grow without making
# every execution slow.
declare -A srcs=(
  [pickle_reader]="src/formats/pickle_reader.cc src/formats/pickle_value.cc src/common/status.cc"
  [dcp_metadata]="src/formats/dcp_metadata.cc src/formats/pickle_reader.cc src/formats/pickle_value.cc src/common/status.cc"
  [torch_zip]="src/formats/torch_zip.cc src/formats/pickle_reader.cc src/formats/pickle_value.cc src/common/status.cc"
  [safetensors_header]="src/formats/safetensors_header.cc src/common/status.cc"
  [olmo_metadata]="src/formats/olmo_metadata.cc src/formats/dcp_metadata.cc src/formats/pickle_reader.cc src/formats/pickle_value.cc src/common/status.cc"
  [s3_xml]="src/remote/s3_xml.cc src/common/status.cc"
  [cluster_records]="src/formats/cluster_records.cc src/formats/node_name.cc src/common/status.cc"
)
declare -A max_len=(
  [pickle_reader]=8192
  [dcp_metadata]=8192
  [torch_zip]=16384
  [safetensors_header]=4096
  [olmo_metadata]=8192
  [s3_xml]=8192
  [cluster_records]=8192
)
# target -> system libraries to link. pugixml comes from Debian's
# libpugixml-dev as a plain (uninstrumented) library: ASan and coverage see
# our code around it, not its insides (upstream fuzzes pugixml in OSS-Fuzz).
declare -A libs=(
  [s3_xml]="-lpugixml"
)
all_targets=(pickle_reader dcp_metadata torch_zip safetensors_header olmo_metadata s3_xml cluster_records)
read -r -a targets <<<"${CKPTFS_FUZZ_TARGETS:-${all_targets[*]}}"
for t in "${targets[@]}"; do
  [[ -n "${srcs[$t]:-}" ]] || { log "unknown target '$t' (known: ${all_targets[*]})" >&2; exit 2; }
done

# --- toolchain -------------------------------------------------------------
command -v "$cxx" >/dev/null 2>&1 ||
  skip "$cxx not found; install clang-14 and libclang-rt-14-dev (apt) to run the fuzz targets"

if [[ -n "${2:-}" ]]; then
  build="$2"
  mkdir -p "$build" || exit 1
  build="$(cd "$build" && pwd -P)"
  temp_build=0
else
  build="$(mktemp -d "${TMPDIR:-/tmp}/ckptfs-fuzz.XXXXXX")" || exit 1
  temp_build=1
fi
mkdir -p "$build/obj" "$build/bin" "$build/logs" "$build/corpus" "$build/artifacts"

probe="$build/obj/probe"
printf '%s\n' '#include <cstddef>' '#include <cstdint>' \
  'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }' >"$probe.cc"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe.cc" -o "$probe" >"$probe.log" 2>&1; then
  sed 's/^/  /' "$probe.log"
  ((temp_build)) && rm -rf "$build"
  skip "$cxx cannot link -fsanitize=fuzzer (libFuzzer missing; install libclang-rt-14-dev)"
fi

# --- build -----------------------------------------------------------------
cxxflags=(-std=c++20 -O1 -gline-tables-only -fno-omit-frame-pointer
  -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
  -D_GLIBCXX_ASSERTIONS -D_FILE_OFFSET_BITS=64
  -I"$source_dir/src" -I"$here")
ldflags=(-fsanitize=fuzzer,address,undefined)

# Objects compiled with other flags, another compiler or from another tree
# are stale.
stamp="$("$cxx" --version | head -n1) ${cxxflags[*]} $here"
if [[ "$(cat "$build/obj/flags" 2>/dev/null)" != "$stamp" ]]; then
  rm -f "$build"/obj/*.o "$build"/obj/*.d
  printf '%s\n' "$stamp" >"$build/obj/flags"
fi

# True when $1 (an object) is newer than everything its depfile $2 lists.
up_to_date() {
  local obj=$1 dep=$2 f
  [[ -f "$obj" && -f "$dep" ]] || return 1
  for f in $(sed -e 's/^[^:]*://' -e 's/\\$//' "$dep"); do
    [[ -e "$f" && ! "$f" -nt "$obj" ]] || return 1
  done
}

obj_of() { local rel=${1//\//_}; echo "$build/obj/${rel%.cc}.o"; }

# Compiles the given sources (paths relative to the repo, or absolute),
# nproc at a time; returns non-zero if any failed. An object exists only
# after a successful compile (a failed one removes it).
compile() {
  local running max_jobs failed=0 src obj abs
  local -a started=()
  max_jobs="$(nproc 2>/dev/null || echo 2)"
  for src in "$@"; do
    [[ "$src" == /* ]] && abs="$src" || abs="$source_dir/$src"
    obj="$(obj_of "${src#"$here"/}")"
    up_to_date "$obj" "${obj%.o}.d" && continue
    rm -f "$obj"
    while running=$(jobs -rp | wc -l) && ((running >= max_jobs)); do wait -n; done
    log "compiling ${src#"$source_dir"/}"
    "$cxx" "${cxxflags[@]}" -MMD -MF "${obj%.o}.d" -c "$abs" -o "$obj.tmp" >"$obj.log" 2>&1 &&
      mv "$obj.tmp" "$obj" &
    started+=("$obj")
  done
  wait
  for obj in "${started[@]}"; do
    if [[ ! -f "$obj" ]]; then
      failed=1
      log "FAILED to compile $(basename "${obj%.o}"):"
      sed 's/^/  /' "$obj.log" | head -n 60
    fi
  done
  return "$failed"
}

runnable=()
to_compile=()
for t in "${targets[@]}"; do
  missing=0
  for s in ${srcs[$t]}; do
    if [[ ! -f "$source_dir/$s" ]]; then
      log "target $t: $s does not exist yet; not built"
      missing=1
    fi
  done
  ((missing)) && continue
  runnable+=("$t")
  to_compile+=(${srcs[$t]} "$here/${t}_fuzz.cc")
done
mapfile -t to_compile < <(printf '%s\n' "${to_compile[@]}" | sort -u)
build_failed=0
if ((${#to_compile[@]})); then
  compile "${to_compile[@]}" || build_failed=1
fi

declare -A result=()
failed=()
built=()
for t in "${runnable[@]}"; do
  objs=("$(obj_of "${t}_fuzz.cc")")
  for s in ${srcs[$t]}; do objs+=("$(obj_of "$s")"); done
  bin="$build/bin/${t}_fuzz"
  all_there=1
  for o in "${objs[@]}"; do [[ -f "$o" ]] || all_there=0; done
  if ((!all_there)); then
    result[$t]="BUILD FAILED"
    failed+=("$t")
    continue
  fi
  newest=0
  for o in "${objs[@]}"; do [[ ! -f "$bin" || "$o" -nt "$bin" ]] && newest=1; done
  if ((newest)); then
    log "linking ${t}_fuzz"
    read -r -a target_libs <<<"${libs[$t]:-}"
    if ! "$cxx" "${ldflags[@]}" "${objs[@]}" "${target_libs[@]}" -o "$bin" >"$build/logs/$t.link.log" 2>&1; then
      sed 's/^/  /' "$build/logs/$t.link.log" | head -n 40
      result[$t]="LINK FAILED"
      failed+=("$t")
      continue
    fi
  fi
  built+=("$t")
done

# --- seeds -----------------------------------------------------------------
seeds="$build/seeds"
rm -rf "$seeds"
mkdir -p "$seeds"
python="$(command -v python3 || command -v /usr/bin/python3 || true)"
if [[ -n "$python" ]] && "$python" "$here/make_seeds.py" "$shared_dir" "$source_dir" "$seeds"; then
  :
else
  # Without Python: whole files only (no .distcp items, no data.pkl).
  log "python3 unavailable or failed; seeding from whole files only"
  for t in "${all_targets[@]}"; do mkdir -p "$seeds/$t"; done
  n=0
  while IFS= read -r -d '' f; do
    n=$((n + 1))
    case "$f" in
      */.metadata) cp "$f" "$seeds/dcp_metadata/$n"; cp "$f" "$seeds/pickle_reader/$n" ;;
      *.pt) cp "$f" "$seeds/torch_zip/$n" ;;
      *.safetensors) head -c 4096 "$f" >"$seeds/safetensors_header/$n" ;;
      *metadata.json) cp "$f" "$seeds/olmo_metadata/$n" ;;
    esac
  done < <(find "$shared_dir/testdata" "$source_dir/src/formats/testdata" \
    \( -name .metadata -o -name '*.pt' -o -name '*.safetensors' -o -name 'metadata.json' \) \
    -type f -print0 2>/dev/null)
fi
[[ -d "$source_dir/tests/fixtures/dcp" || -d "$shared_dir/testdata/dcp" ]] ||
  log "warning: no real DCP checkpoints found; fuzzing from the committed seeds only"

# --- regressions and fuzzing -----------------------------------------------
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:check_initialization_order=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
read -r -a extra_flags <<<"${CKPTFS_FUZZ_FLAGS:-}"

for t in "${built[@]}"; do
  bin="$build/bin/${t}_fuzz"
  common=(-rss_limit_mb=1024 -malloc_limit_mb=1024 -timeout=10)

  # Every committed reproducer must now run clean (whole: no -max_len, which
  # would truncate it).
  regress_ok=1
  if [[ -d "$here/regressions/$t" ]]; then
    while IFS= read -r -d '' f; do
      if ! "$bin" "${common[@]}" "$f" >"$build/logs/$t.regression.log" 2>&1; then
        log "$t: regression input ${f#"$source_dir"/} FAILS:"
        grep -v '^INFO:' "$build/logs/$t.regression.log" | tail -n 40 | sed 's/^/  /'
        regress_ok=0
      fi
    done < <(find "$here/regressions/$t" -type f ! -name '*.md' -print0 | sort -z)
  fi

  corpus="$build/corpus/$t"
  artifacts="$build/artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  dirs=("$corpus" "$seeds/$t")
  [[ -d "$here/seeds/$t" ]] && dirs+=("$here/seeds/$t")
  log "fuzzing $t for ${seconds}s (max_len ${max_len[$t]})"
  flog="$build/logs/$t.log"
  fuzz_flags=(-max_len="${max_len[$t]}" -max_total_time="$seconds" -print_final_stats=1)
  [[ -f "$here/dicts/$t.dict" ]] && fuzz_flags+=(-dict="$here/dicts/$t.dict")
  "$bin" "${common[@]}" "${fuzz_flags[@]}" \
    -artifact_prefix="$artifacts/" "${extra_flags[@]}" "${dirs[@]}" >"$flog" 2>&1
  rc=$?
  # Final status line: "#N DONE cov: C ft: F corp: ..."; stats: execs/s.
  last="$(grep -E '^#[0-9]+' "$flog" | tail -n 1)"
  cov="$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")"
  ft="$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$last")"
  corp="$(sed -nE 's/.* corp: ([0-9]+).*/\1/p' <<<"$last")"
  runs="$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$flog" | tail -n 1)"
  eps="$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+).*/\1/p' "$flog" | tail -n 1)"
  rss="$(sed -nE 's/^stat::peak_rss_mb: *([0-9]+).*/\1/p' "$flog" | tail -n 1)"
  summary="runs ${runs:-?}, ${eps:-?} exec/s, cov ${cov:-?}, ft ${ft:-?}, corpus ${corp:-?}, peak rss ${rss:-?} MB"
  if ((rc != 0)); then
    crash="$(sed -nE 's/.*Test unit written to (.*)$/\1/p' "$flog" | tail -n 1)"
    kind="$(grep -oE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer): [a-z-]+( signal| memory leaks)?' "$flog" | head -n 1)"
    grep -q 'runtime error:' "$flog" && kind="UndefinedBehaviorSanitizer: $(grep -m1 -oE 'runtime error: .{0,80}' "$flog")"
    grep -q 'FUZZ_CHECK failed' "$flog" && kind="FUZZ_CHECK (a documented invariant does not hold)"
    log "$t FAILED (exit $rc): ${kind:-see log}"
    grep -vE '^(INFO:|#[0-9]+ )' "$flog" | tail -n 60 | sed 's/^/  /'
    if [[ -n "$crash" ]]; then
      log "  crash input: $crash"
      log "  reproduce:   $bin $crash"
    fi
    log "  full log:    $flog"
    result[$t]="FAILED (${kind:-exit $rc}); $summary"
    failed+=("$t")
  elif ((!regress_ok)); then
    result[$t]="REGRESSION INPUT FAILS; $summary"
    failed+=("$t")
  else
    result[$t]="ok; $summary"
  fi
done

echo
log "summary (${seconds}s per target, build dir $build):"
for t in "${targets[@]}"; do
  printf '  %-19s %s\n' "$t" "${result[$t]:-not built (sources missing)}"
done

if ((${#failed[@]} || build_failed)); then
  log "FAILED: ${failed[*]:-build}"
  ((temp_build)) && log "kept $build for the crash files and logs"
  exit 1
fi
((temp_build)) && rm -rf "$build"
exit 0
