#!/bin/bash
# The heads were fp32 in memory in these runs (weights_dtype=float32; the default now follows the target).
cd "$(dirname "$0")/../../.."
mkdir -p /tmp/heads
P="$(printf 'ROMEO:\nBut soft, what light through yonder window breaks?\n')"
run() { name=$1; shift; for T in 0 1; do ./build/specula generate --target transformer:results/models/target-27m "$@" --prompt "$P" --max-new-tokens 160 --num-samples 8 --seed 1 --temperature $T --threads 2 --output /tmp/heads/$name-T$T.txt --metrics-json /tmp/heads/$name-T$T.json > /tmp/heads/$name-T$T.log 2>&1; done; }
run medusa-chain --draft medusa:results/models/medusa-27m,weights_dtype=float32 --method chain --num-draft-tokens 3
run medusa-tree --draft medusa:results/models/medusa-27m,weights_dtype=float32 --method tree --tree 3,2,1
run eagle-chain --draft eagle:results/models/eagle-27m,weights_dtype=float32 --method chain --num-draft-tokens 4
run eagle-tree --draft eagle:results/models/eagle-27m,weights_dtype=float32 --method tree --tree 3,2,1,1
run eagle-dynamic --draft eagle:results/models/eagle-27m,dynamic,top_k=4,weights_dtype=float32 --method tree --tree 2,2,2,1,1
echo done > /tmp/heads/done
