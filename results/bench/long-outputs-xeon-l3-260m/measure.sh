#!/bin/bash
# Long outputs on bigram tables: whole runs of `specula generate` by two binaries (BEFORE, AFTER), interleaved
# round by round, so that both see the same machine state. Writes one line per run: case, binary, round, seconds.
#   measure.sh BEFORE AFTER ROUNDS > timings.tsv
set -euo pipefail
before=$1 after=$2 rounds=$3
tables=$(cd "$(dirname "$0")/../../../experiments/tables" && pwd)
common="--target bigram:$tables/target-v16.txt --prompt-tokens 0,3 --seed 1 --output /dev/null"
draft="--draft bigram:$tables/draft-v16.txt --method chain --num-draft-tokens 3"
penalties="--temperature 0.8 --repetition-penalty 1.05 --frequency-penalty 0.0001"
declare -A cases=(
  [plain-ar-200k]="--method ar --temperature 0.8 --max-new-tokens 200000"
  [plain-chain-200k]="$draft --temperature 0.8 --max-new-tokens 200000"
  [penalised-ar-10k]="--method ar $penalties --max-new-tokens 10000"
  [penalised-chain-10k]="$draft $penalties --max-new-tokens 10000"
)
printf 'case\tbinary\tround\tseconds\n'
for round in $(seq "$rounds"); do
  for name in plain-ar-200k plain-chain-200k penalised-ar-10k penalised-chain-10k; do
    for which in before after; do
      bin=$before; [ "$which" = after ] && bin=$after
      start=$(date +%s.%N)
      # shellcheck disable=SC2086
      "$bin" generate $common ${cases[$name]} >/dev/null
      printf '%s\t%s\t%d\t%.3f\n' "$name" "$which" "$round" "$(echo "$(date +%s.%N) - $start" | bc)"
    done
  done
done
