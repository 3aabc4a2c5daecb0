#!/bin/bash
# Beam search, one session's tree of every beam's suffix (BEFORE) against a session per beam (AFTER): whole runs of
# `specula generate --method beam` by the two binaries, interleaved round by round, so that both see the same machine
# state. Writes one line per run: case, binary, round, seconds; and whether the two wrote the same best hypothesis and
# the same n-best tokens.
#   measure.sh BEFORE AFTER ROUNDS > timings.tsv
set -euo pipefail
before=$1 after=$2 rounds=$3
root=$(cd "$(dirname "$0")/../../.." && pwd)
tables=$root/experiments/tables
bigram="--target bigram:$tables/target-v16.txt --prompt-tokens 0,3"
# "To be, or not to be" in the byte tokenizer's ids.
transformer="--target transformer:$root/results/models/target --prompt-tokens 84,111,32,98,101,44,32,111,114,32,110,111,116,32,116,111,32,98,101"
# A long prompt, short outputs: 230 ids (the byte tokenizer's of 230 letters of this measurement's own text).
long_prompt=$(head -c 230 "$0" | od -An -tu1 -v | tr -s ' \n' ',' | sed 's/^,//; s/,$//')
declare -A cases=(
  [bigram-w4-2000]="$bigram --beam-width 4 --max-new-tokens 2000"
  [bigram-w4-penalised-2000]="$bigram --beam-width 4 --max-new-tokens 2000 --repetition-penalty 1.05 --frequency-penalty 0.0001"
  [transformer-w4-200]="$transformer --beam-width 4 --max-new-tokens 200"
  [transformer-w8-g2-200]="$transformer --beam-width 8 --num-beam-groups 2 --diversity-penalty 0.5 --max-new-tokens 200"
  [transformer-w16-200]="$transformer --beam-width 16 --max-new-tokens 200 --early-stopping false"
  [transformer-w16-prompt230-20]="--target transformer:$root/results/models/target --prompt-tokens $long_prompt --beam-width 16 --max-new-tokens 20"
)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf 'case\tbinary\tround\tseconds\tsame_best\tsame_nbest_tokens\n'
for round in $(seq "$rounds"); do
  for name in bigram-w4-2000 bigram-w4-penalised-2000 transformer-w4-200 transformer-w8-g2-200 transformer-w16-200 \
      transformer-w16-prompt230-20; do
    for which in before after; do
      bin=$before; [ "$which" = after ] && bin=$after
      start=$(date +%s.%N)
      # shellcheck disable=SC2086
      "$bin" generate ${cases[$name]} --method beam --output "$out/$which.txt" \
        --nbest-output "$out/$which.nbest" >/dev/null 2>&1
      seconds=$(echo "$(date +%s.%N) - $start" | bc)
      same=; same_nbest=
      if [ "$which" = after ]; then
        cmp -s "$out/before.txt" "$out/after.txt" && same=yes || same=no
        cmp -s <(cut -f4 "$out/before.nbest") <(cut -f4 "$out/after.nbest") && same_nbest=yes || same_nbest=no
      fi
      printf '%s\t%s\t%d\t%.3f\t%s\t%s\n' "$name" "$which" "$round" "$seconds" "$same" "$same_nbest"
    done
  done
done
