#!/usr/bin/env bash
# CPU efficiency benchmark recorded in this folder (2 shared cores; see README.md next to this file).
# Usage, from the repository root (about 20 minutes):  bash benchmarks/efficiency_cpu/run.sh
set -euo pipefail
OUT=${OUT:-benchmarks/efficiency_cpu}
PY=${PY:-python}
LENGTHS="128 256 512 1024 2048 4096 8192 16384"
COMMON="--lengths $LENGTHS --batch-size 1 --warmup 1 --repeats 5 --max-point-seconds 30 --max-latency 12 --device cpu --threads 2 --attn sdpa"
# 1. Avey-B small vs BERT-base and ModernBERT-base (from config, random weights), eager, fp32 and bf16.
$PY -m avey_b.benchmarking.efficiency run --models avey-b-small bert-base modernbert-base \
    --dtype float32 bfloat16 $COMMON --out "$OUT/main" --resume
# 2. Compressor on/off (one run, so both are measured under the same machine load).
$PY -m avey_b.benchmarking.efficiency run --models avey-b-small --no-compressor \
    --dtype float32 $COMMON --out "$OUT/compressor" --resume
for d in main compressor; do
  for stat in cpu min median; do
    $PY -m avey_b.benchmarking.efficiency fit "$OUT/$d/results.jsonl" --min-length 1024 --stat $stat \
        --out "$OUT/$d/fits_$stat.md"
  done
  $PY -m avey_b.benchmarking.efficiency plot "$OUT/$d/results.jsonl" --out "$OUT/$d" --stat cpu
  $PY -m avey_b.benchmarking.efficiency plot "$OUT/$d/results.jsonl" --out "$OUT/$d/wall_min" --stat min
done
