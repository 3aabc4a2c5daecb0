#!/usr/bin/env bash
# Splits what a lent GPU machine needs into calls that each fit what travels (64 MiB a call: the working tree, tracked
# and untracked-not-ignored, plus the paths a call carries). The tracked tree is larger than that: the bundled models
# alone are ~98 MB, target-27m 55 MB of it. `stage` moves the models and the committed results (figures, plots:
# nothing the checks read) out of the tree into .gpu-lease/ (ignored), the models packed into parts that fit beside
# the tree; each call carries one part, and the first also the .deb files of the build (.gpu-debs). Carried paths stay
# on the warm machine between calls, so after the last part `unpack` there links every part's models into
# results/models, where the checks and experiment configs read them.
#
#   Here:   kernels/tools/gpu-lease.sh stage      # then one call per printed line, carrying what it names
#   There:  kernels/tools/gpu-lease.sh unpack     # at the start of the call that runs the checks
#   Here:   kernels/tools/gpu-lease.sh restore    # puts everything back (also: git checkout -- results)
#           kernels/tools/gpu-lease.sh plan       # what stage would do, moving nothing
set -euo pipefail
cd "$(dirname "$0")/../.."

limit=$((64 * 1024 * 1024))
margin=$((1024 * 1024))  # what the tree may gain between staging and the call (a note, a report)
lease=.gpu-lease
debs=.gpu-debs
mode=${1:-}

bytes() { { du -sbL "$@" 2>/dev/null || true; } | awk '{s += $1} END {print s + 0}'; }
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }

# What travels from the tree once the models and committed results are aside: tracked files that are still there, and
# untracked ones that are not ignored.
tree_bytes() {
  { git ls-files -z; git ls-files -z --others --exclude-standard; } |
    grep -zv -e '^results/models/' -e '^results/bench/' -e '^results/reference/' |
    { xargs -0 du -cb 2>/dev/null || true; } | awk '/\ttotal$/ {s += $1} END {print s + 0}'
}

# The models, largest first, packed first-fit into parts: part 1 beside the .deb files, the others beside the tree.
plan() {
  local tree debs_bytes
  tree=$(tree_bytes)
  debs_bytes=$(bytes "$debs")
  [ "$debs_bytes" -gt 0 ] || echo "gpu-lease: no $debs here yet (kernels/tools/gpu-build.sh --collect $debs)" >&2
  if [ -d "$debs" ] && [ -n "$(find "$debs" -mindepth 1 -maxdepth 1 ! -name '*.deb' | head -n1)" ]; then
    echo "gpu-lease: $debs holds more than .deb files (an older gpu-build unpacked them there): remove the rest" >&2
    exit 1
  fi
  local source=results/models
  [ -d "$source" ] && [ -n "$(ls -A "$source" 2>/dev/null)" ] || source=$lease/all/results/models
  ls -1 "$source" | while read -r item; do echo "$(bytes "$source/$item") $item"; done | sort -rn |
    awk -v limit="$limit" -v margin="$margin" -v tree="$tree" -v debs="$debs_bytes" '
      { size[NR] = $1; name[NR] = $2 }
      END {
        parts = 1; room[1] = limit - margin - tree - debs
        for (i = 1; i <= NR; ++i) {
          placed = 0
          for (p = 1; p <= parts && !placed; ++p)
            if (size[i] <= room[p]) { room[p] -= size[i]; part[i] = p; placed = 1 }
          if (!placed) {
            parts += 1; room[parts] = limit - margin - tree - size[i]
            if (room[parts] < 0) { printf "gpu-lease: %s (%d bytes) does not fit beside the tree\n", name[i], size[i] > "/dev/stderr"; exit 1 }
            part[i] = parts
          }
        }
        for (i = 1; i <= NR; ++i) print part[i], name[i], size[i]
      }'
}

case "$mode" in
  plan | stage)
    layout=$(plan)
    parts=$(echo "$layout" | awk '{print $1}' | sort -n | uniq)
    tree=$(tree_bytes)
    echo "gpu-lease: the tree without models and committed results: $(mib "$tree")"
    for p in $parts; do
      items=$(echo "$layout" | awk -v p="$p" '$1 == p {print $2}' | tr '\n' ' ')
      sum=$(echo "$layout" | awk -v p="$p" '$1 == p {s += $3} END {print s}')
      carry="$lease/part-$p"
      [ "$p" = 1 ] && carry="$debs $carry" && sum=$((sum + $(bytes "$debs")))
      echo "call $p: carry [$carry] ($(mib $((sum + tree))) with the tree): $items"
    done
    echo "the call that runs the checks starts with: kernels/tools/gpu-lease.sh unpack &&"
    if [ "$mode" = stage ]; then
      grep -qx "/$lease/" .git/info/exclude 2>/dev/null || echo "/$lease/" >>.git/info/exclude
      mkdir -p "$lease/aside/results"
      echo "$layout" | while read -r p item _; do
        mkdir -p "$lease/part-$p/results/models"
        mv "results/models/$item" "$lease/part-$p/results/models/$item"
      done
      for d in bench reference; do [ -d "results/$d" ] && mv "results/$d" "$lease/aside/results/$d"; done
      echo "gpu-lease: staged; 'kernels/tools/gpu-lease.sh restore' puts everything back"
    fi
    ;;
  unpack)
    mkdir -p results/models
    found=0
    for item in "$lease"/part-*/results/models/*; do
      [ -e "$item" ] || continue
      found=1
      [ -e "results/models/$(basename "$item")" ] || ln -s "$PWD/$item" "results/models/$(basename "$item")"
    done
    [ "$found" = 1 ] || { echo "gpu-lease: no $lease/part-* here (carry them first)" >&2; exit 1; }
    echo "gpu-lease: results/models holds $(ls results/models | tr '\n' ' ')" >&2
    ;;
  restore)
    [ -d results/models ] && find results/models -maxdepth 1 -type l -delete  # unpack's links, where it ran here
    for item in "$lease"/part-*/results/models/*; do
      [ -e "$item" ] || continue
      mkdir -p results/models
      mv "$item" "results/models/$(basename "$item")"
    done
    for d in bench reference; do
      [ -d "$lease/aside/results/$d" ] && mv "$lease/aside/results/$d" "results/$d"
    done
    rm -rf "$lease"
    git status --short -- results | head -n 5
    echo "gpu-lease: restored"
    ;;
  *)
    sed -n '2,13p' "$0"
    exit 2
    ;;
esac
