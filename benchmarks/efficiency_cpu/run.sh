#!/usr/bin/env bash
# CPU efficiency benchmark recorded in this folder (2 shared cores; see README.md next to this file).
# Usage, from the repository root (11 minutes on the 2 quiet cores):  bash benchmarks/efficiency_cpu/run.sh
set -euo pipefail
OUT=${OUT:-benchmarks/efficiency_cpu}
PY=${PY:-python}
BENCH="$PY -m avey_b.benchmarking.efficiency"
LENGTHS="128 256 512 1024 2048 4096 8192 16384"
COMMON="--lengths $LENGTHS --batch-size 1 --warmup 1 --repeats 5 --max-point-seconds 30 --max-latency 12 --device cpu --threads 2 --attn sdpa"
# 1. Avey-B small vs BERT-base and ModernBERT-base (from config, random weights), eager, fp32 and bf16.
$BENCH run --models avey-b-small bert-base modernbert-base --dtype float32 bfloat16 $COMMON --out "$OUT/main" --resume
# 2. Compressor on/off (one run, so both are measured under the same machine load).
$BENCH run --models avey-b-small --no-compressor --dtype float32 $COMMON --out "$OUT/compressor" --resume
# 3. Supplement: the points the --max-latency cap skipped above (ModernBERT-base at 4K/8K, Avey-B without
#    compressor at 16K), with 2 repeats because one forward takes 15-80 CPU-seconds. --resume retries
#    skipped points; the newer records supersede the "skip" ones.
$BENCH run --models modernbert-base --dtype float32 bfloat16 --lengths 4096 8192 --batch-size 1 --warmup 1 \
    --repeats 2 --max-latency 200 --device cpu --threads 2 --attn sdpa --out "$OUT/main" --resume
$BENCH run --models avey-b-small:compressor=False --dtype float32 --lengths 16384 --batch-size 1 --warmup 1 \
    --repeats 2 --max-latency 200 --device cpu --threads 2 --out "$OUT/compressor" --resume
# 4. Tables, fits (three ranges), plots; "median"/"min" = wall time, "cpu" = process CPU time (the steadier
#    measure when the machine is shared).
for d in main compressor; do
  for stat in cpu min median; do
    $BENCH table "$OUT/$d/results.jsonl" --stat $stat --out "$OUT/$d/table_$stat.md"
    $BENCH fit "$OUT/$d/results.jsonl" --min-length 1024 --stat $stat --out "$OUT/$d/fits_$stat.md"
    $BENCH fit "$OUT/$d/results.jsonl" --min-length 1024 --max-length 8192 --stat $stat --out "$OUT/$d/fits_1k_8k_$stat.md"
    $BENCH fit "$OUT/$d/results.jsonl" --min-length 128 --max-length 512 --stat $stat --out "$OUT/$d/fits_short_$stat.md"
  done
  $BENCH plot "$OUT/$d/results.jsonl" --out "$OUT/$d" --stat median
  $BENCH plot "$OUT/$d/results.jsonl" --out "$OUT/$d/cpu_time" --stat cpu
done
