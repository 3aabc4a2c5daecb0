#!/bin/sh
# harness/experiment/build_revision.cmake against a scratch git repository: the short revision of a clean tree,
# "-dirty" once a tracked file changes, a new revision after a commit, "unknown" outside a checkout, and the output
# left untouched (same modification time) when its text would not change, so a build with nothing new relinks nothing.
# Usage: check_build_revision.sh CMAKE SCRIPT
set -eu
command -v git >/dev/null || { echo "check_build_revision: no git here: skipped"; exit 77; }
cmake_bin=$1
script=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The scratch folders are not inside another checkout (a TMPDIR under one would make "outside a checkout" one).
GIT_CEILING_DIRECTORIES=$work
export GIT_CEILING_DIRECTORIES
fail() { echo "check_build_revision: $*" >&2; exit 1; }
revision_of() { sed -n 's/.*kBuildRevision = "\(.*\)";/\1/p' "$work/out.cpp"; }
write() { "$cmake_bin" -DSOURCE_DIR="$1" -DOUTPUT="$work/out.cpp" -P "$script"; }

mkdir "$work/repo"
git -C "$work/repo" init -q
echo one > "$work/repo/file"
git -C "$work/repo" add file
git -C "$work/repo" -c user.name=t -c user.email=t@t -c commit.gpgsign=false commit -qm one
first=$(git -C "$work/repo" rev-parse --short HEAD)
write "$work/repo"
[ "$(revision_of)" = "$first" ] || fail "clean tree: '$(revision_of)', expected '$first'"

touch -d '2000-01-01' "$work/out.cpp"
stamp=$(stat -c %Y "$work/out.cpp")
write "$work/repo"
[ "$(stat -c %Y "$work/out.cpp")" = "$stamp" ] || fail "an unchanged revision rewrote the output"

echo two > "$work/repo/file"
write "$work/repo"
[ "$(revision_of)" = "$first-dirty" ] || fail "changed tracked file: '$(revision_of)', expected '$first-dirty'"
echo untracked > "$work/repo/other"
git -C "$work/repo" -c user.name=t -c user.email=t@t -c commit.gpgsign=false commit -qam two
second=$(git -C "$work/repo" rev-parse --short HEAD)
write "$work/repo"
[ "$(revision_of)" = "$second" ] || fail "after a commit (an untracked file aside): '$(revision_of)', expected '$second'"

mkdir "$work/plain"
write "$work/plain"
[ "$(revision_of)" = "unknown" ] || fail "outside a checkout: '$(revision_of)', expected 'unknown'"
echo "check_build_revision: ok"
