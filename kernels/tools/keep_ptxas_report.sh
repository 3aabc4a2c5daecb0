#!/bin/sh
# CUDA compiler launcher: runs the compile command given as arguments and keeps its ptxas resource report
# (--resource-usage) in <object>.ptxas.txt, which check_no_spills.cmake reads when cuobjdump is missing.
# Only the report lines are kept quiet; anything else the compiler prints (errors) is shown.
obj=""
prev=""
for a in "$@"; do
  [ "$prev" = "-o" ] && obj="$a"
  prev="$a"
done
[ -n "$obj" ] || exec "$@"
"$@" >"$obj.ptxas.txt" 2>&1
rc=$?
grep -v -E '^ptxas info|^    [0-9]+ bytes stack frame' "$obj.ptxas.txt" >&2
exit $rc
