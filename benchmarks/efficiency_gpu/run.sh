#!/usr/bin/env bash
# The paper's efficiency setting (paper §5.4): batch 8, 128 ... 96K tokens, bf16, on one GPU, on real text
# (cl100k ids renumbered into each model's vocabulary, as in benchmarks/efficiency_cpu/: random ids have as many
# distinct ids as tokens and hide the ranker's vocabulary path).
#
# Usage, from the repository root, with `pip install -e ".[bench]"`:
#   DATA=../shared/data RESULTS=benchmarks/efficiency_gpu/run bash benchmarks/efficiency_gpu/run.sh [PART ...]
# PART (default: all, in this order):
#   avey       Avey-B base, eager, every length (default chunks of rows and 4,096-token chunks)
#   compile    Avey-B base under torch.compile (recompiled per length, so at fewer lengths)
#   hf         ModernBERT-base and NeoBERT (approximated from its published shape, avey_b/utils/model_spec.py) with
#              SDPA, eager attention and FlashAttention-2 (recorded "unavailable" without flash-attn)
#   ablations  the paper's two cost ablations (appendix "Ablation Study") on the same inputs: the ranker at every
#              layer (paper: 5.9x slower) and no compressor (paper: the compressor is 4.37x faster)
#   report     power-law fits (median and min) next to the paper's, and the plots
# Each part appends to RESULTS/results.jsonl and skips points already there (--resume), so the parts can run in
# separate calls and be merged.
set -euo pipefail
DATA=${DATA:-../shared/data}
RESULTS=${RESULTS:-benchmarks/efficiency_gpu/run}
WORK=${WORK:-runs/efficiency_gpu}
PARTS=${*:-avey compile hf ablations report}
mkdir -p "$WORK" "$RESULTS"
[ -f "$WORK/english.txt" ] || ${PY:-python} benchmarks/english_text.py --data "$DATA" --out "$WORK/english.txt"
COMMON="--text $WORK/english.txt --batch-size 8 --dtype bfloat16 --warmup 3 --repeats 10 --max-point-seconds 30
        --device cuda --flops-up-to 8192 --out $RESULTS --resume"
for part in $PARTS; do
  case $part in
    # the default (64K-token chunks of rows on a GPU) and the CPU's 4,096-token chunks, which the first record used
    avey) avey-b bench run --models avey-b-base avey-b-base:chunk_tokens=4096 --modes eager $COMMON ;;
    compile) avey-b bench run --models avey-b-base --modes compile --lengths 512 2048 8192 32768 98304 $COMMON ;;
    hf) avey-b bench run --models modernbert-base neobert --modes eager --attn sdpa flash_attention_2 eager $COMMON ;;
    ablations) avey-b bench run --models avey-b-base:ranker_placement=every_layer avey-b-base:compressor=False \
                 --modes eager --lengths 2048 8192 32768 98304 $COMMON ;;
    report)
      for stat in median min; do
        avey-b bench fit "$RESULTS/results.jsonl" --min-length 8192 --stat $stat --out "$RESULTS/fits_$stat.md"
      done
      avey-b bench plot "$RESULTS/results.jsonl" --out "$RESULTS" ;;
    *) echo "unknown part: $part (avey compile hf ablations report)" >&2; exit 2 ;;
  esac
done
