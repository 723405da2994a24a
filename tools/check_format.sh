#!/usr/bin/env bash
# Checks that the C/C++ lines changed since a base commit are formatted as
# .clang-format says (Google, 100 columns), with git clang-format-14.
#
# Why only changed lines: the tree predates .clang-format and formatting it
# wholesale would rewrite thousands of lines (see the comment in
# .clang-format), so only the lines changed since formatting became enforced
# are checked. That commit is in .ci/format-base, so CI on a clean clone
# checks every such line; working-tree changes (and new files git does not
# ignore) count too, so a local run checks what is about to be committed.
#
# Usage: tools/check_format.sh [BASE_COMMIT]   (default: .ci/format-base)
# Exits 0 when the changed lines are formatted, 1 (with the diff and how to
# fix it) when not or when clang-format-14 is missing, and 77 with a message
# (meson reports it as skipped) when there is nothing to compare with: the
# tree is not a git checkout, or the base commit is not in its history (a
# shallow clone). Run by `meson test` as 'format' (suite 'lint').
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$(pwd -P)"

skip() {
  echo "check_format: skipped: $*"
  exit 77  # meson counts it as skipped, not passed
}

# The C/C++ sources: everything git tracks under these directories, less
# third-party data (tests/fixtures: test vectors and fixture files from
# elsewhere). No C/C++ code in the tree is generated or vendored.
extensions=c,cc,cpp,h,hpp,cu,cuh
paths=(src include bench tests python tools ':(exclude)tests/fixtures')

if ! command -v git >/dev/null; then
  skip "git is not installed (nothing to compare with a base commit)"
fi
# git's reason in the message: not a repository, or one git refuses to
# read (another user's clone: safe.directory).
if ! toplevel="$(git rev-parse --show-toplevel 2>&1)"; then
  skip "$root is not a git checkout git can read (nothing to compare with a base commit):" \
    "$(head -n 1 <<<"$toplevel")"
fi
# A copy of the source inside some other repository: that one's history is not ours.
if [[ "$(cd "$toplevel" && pwd -P)" != "$root" ]]; then
  skip "$root is not the top of a git checkout (it is inside $toplevel)"
fi

if (($# > 1)); then
  echo "usage: $0 [BASE_COMMIT]" >&2
  exit 2
fi
if (($# == 1)); then
  base="$1"
  base_arg="$1"
elif [[ -f .ci/format-base ]]; then
  base="$(tr -d '[:space:]' <.ci/format-base)"
  # shellcheck disable=SC2016  # printed for the user's shell to expand
  base_arg='$(cat .ci/format-base)'
else
  echo "check_format: .ci/format-base is missing (it names the commit since which" \
    "changed lines must be formatted)" >&2
  exit 1
fi
if [[ -z "$base" ]] || ! git cat-file -e "$base^{commit}" 2>/dev/null; then
  if [[ "$(git rev-parse --is-shallow-repository)" == true ]]; then
    skip "base commit '$base' is not in this shallow clone's history (fetch more history: git fetch --unshallow)"
  fi
  skip "base commit '$base' is not in this checkout's history"
fi

clang_format="$(command -v clang-format-14 || true)"
git_clang_format="$(command -v git-clang-format-14 || true)"
if [[ -z "$clang_format" || -z "$git_clang_format" ]]; then
  echo "check_format: clang-format-14 is not installed (Debian package clang-format-14;" \
    "packaging/install-deps.sh installs it)" >&2
  exit 1
fi

# git clang-format diffs the working tree against the base with
# `git diff-index`, which sees only files in the index. Add the untracked,
# not ignored files as intent-to-add in a scratch copy of the index, so new
# files are checked before `git add` too; the real index is left alone.
index="$(git rev-parse --git-path index)"
scratch_index="$(mktemp "${TMPDIR:-/tmp}/check_format_index.XXXXXX")"
trap 'rm -f "$scratch_index"' EXIT
if [[ -f "$index" ]]; then
  cp "$index" "$scratch_index"
else
  rm -f "$scratch_index"  # git creates it
fi
export GIT_INDEX_FILE="$scratch_index"
git ls-files -z --others --exclude-standard -- "${paths[@]}" |
  xargs -0 -r git add --intent-to-add --

# git clang-format-14 exits 0 whether or not it prints a diff (2 on an
# error): with -q it prints nothing but the diff, so any output means
# unformatted lines.
out="$(git clang-format-14 -q --binary "$clang_format" --diff --extensions "$extensions" \
  "$base" -- "${paths[@]}")" || {
  rc=$?
  echo "check_format: git clang-format-14 failed (exit $rc)" >&2
  exit "$rc"
}
if [[ -n "$out" ]]; then
  echo "$out"
  echo
  echo "check_format: the lines above, changed since ${base:0:12}, are not formatted;" \
    "fix them with: git clang-format-14 --binary clang-format-14 $base_arg"
  exit 1
fi
echo "check_format: the C/C++ lines changed since ${base:0:12} are formatted"
