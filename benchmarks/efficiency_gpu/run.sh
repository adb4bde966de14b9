#!/usr/bin/env bash
# The paper's efficiency setting (paper §5.4): batch 8, 128 ... 96K tokens, bf16, on one GPU.
# Avey-B base eager and torch.compile; ModernBERT-base and NeoBERT (approximated from its published shape,
# see avey_b/model_spec.py) with SDPA, eager attention and FlashAttention-2 (if flash-attn is
# installed; otherwise those points are recorded as "unavailable"). Not run yet: no GPU was lent to the
# session that wrote this; results will land in this folder.
# Timed on real text (cl100k ids renumbered into each model's vocabulary, as in benchmarks/efficiency_cpu/):
# random ids have as many distinct ids as tokens and hide the ranker's vocabulary path.
# Usage, from the repository root, with `pip install -e ".[bench]"`:
#   bash benchmarks/efficiency_gpu/run.sh [DATA_DIR]      # DATA_DIR: the shared data (default ../shared/data)
set -euo pipefail
DATA=${1:-../shared/data}
OUT=${OUT:-benchmarks/efficiency_gpu}
WORK=${WORK:-runs/efficiency_gpu}
mkdir -p "$WORK"
[ -f "$WORK/english.txt" ] || python benchmarks/english_text.py --data "$DATA" --out "$WORK/english.txt"
COMMON="--text $WORK/english.txt --batch-size 8 --dtype bfloat16 --warmup 3 --repeats 10 --max-point-seconds 60 --device cuda"
avey-b bench run --models avey-b-base --no-compressor --modes eager compile \
    $COMMON --out "$OUT/run" --resume
avey-b bench run --models modernbert-base neobert --modes eager \
    --attn sdpa flash_attention_2 eager $COMMON --out "$OUT/run" --resume
for stat in median min; do
  avey-b bench fit "$OUT/run/results.jsonl" --min-length 8192 --stat $stat \
      --out "$OUT/run/fits_$stat.md"
done
avey-b bench plot "$OUT/run/results.jsonl" --out "$OUT/run"
