#!/usr/bin/env bash
# AVX-512 host: a memory-bound random model (~308 M parameters, 1.2 GB fp32, beyond the 300 MiB L3), bench forward
set -u
mkdir -p /tmp/g && tar -xJf .gpu/libs.tar.xz -C /tmp/g && tar -xJf .gpu/bins.tar.xz -C /tmp/g || exit 3
export LD_LIBRARY_PATH=/tmp/g/lib OMP_WAIT_POLICY=passive
S=/tmp/g/bin/specula
lscpu | grep -E "Model name|L3|^CPU\(s\)|Flags" | cut -c1-300 > $OUT/lscpu.txt
cat README.md results/bench/NOTES.md kernels/README.md > /tmp/corpus.txt 2>/dev/null || cat README.md > /tmp/corpus.txt
T0=$(date +%s)
timeout 150 $S train --corpus /tmp/corpus.txt --output /tmp/big --d-model 1024 --n-layers 24 --n-heads 16 --d-ff 2816 \
  --max-seq-len 256 --steps 1 --batch-size 1 --seq-len 32 --warmup-steps 1 --eval-interval 1 --eval-windows 1 \
  --threads 16 --weights-dtype float32 > $OUT/train.log 2>&1
echo "train rc=$? in $(( $(date +%s) - T0 )) s"; tail -3 $OUT/train.log; du -sh /tmp/big
run() {  # name isa dtype
  local T1=$(date +%s)
  env ${2:+SPECULA_SKINNY_ISA=$2} timeout 100 $S bench forward --model transformer:/tmp/big --threads 1 --weights-dtype $3 \
    --chunks 1,2,4,8 --trees "3,2,1" --min-time 0.3 --min-iterations 8 --output $OUT/$1.json > $OUT/$1.log 2>&1
  echo "$1 rc=$? $(( $(date +%s) - T1 )) s: $(grep -E '1-token|tree|floor' $OUT/$1.log | tr -s ' ' | tr '\n' '|')"
}
run 1-fp32-avx512 "" float32
run 2-bf16-avx512 "" bfloat16
run 3-bf16-avx512 "" bfloat16
run 4-fp32-avx512 "" float32
run 5-fp32-avx2 avx2 float32
run 6-bf16-avx2 avx2 bfloat16
echo total $(( $(date +%s) - T0 )) s
