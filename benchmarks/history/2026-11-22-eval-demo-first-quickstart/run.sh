#!/usr/bin/env bash
# Fine-tuning demonstration on real data, sized for 2 shared CPU cores (issue 5, "Demonstration").
# Models: a small Avey-B and a BERT of (about) the same parameter count, pretrained identically (same BPE,
# data, masks, schedule, token budget) by benchmarks/pretrain_compare.py; pass their model/ directories.
# Data (not in the repository): ../shared/data/sst2/train.tsv (5% held out for scoring, the same split for
# every cell) and ../shared/data/conll2003/eng.train scored on eng.testa.
# Usage, from the repository root:
#   AVEY=runs/compare/avey-b/model BERT=runs/compare/bert/model bash benchmarks/eval_demo/run.sh
set -euo pipefail
OUT=${OUT:-benchmarks/eval_demo}
PY=${PY:-python}
AVEY=${AVEY:-runs/compare/avey-b/model}
BERT=${BERT:-runs/compare/bert/model}
DATA=${DATA:-../shared/data}
LRS=${LRS:-5e-4}
SEEDS=${SEEDS:-2}
NTRAIN=${NTRAIN:-2000}
NEVAL=${NEVAL:-1000}
COMMON="--models avey-b=$AVEY bert=$BERT --lrs $LRS --seeds $SEEDS --device cpu --batch-size 32 --max-length 128
        --max-train-examples $NTRAIN --max-eval-examples $NEVAL --output-dir $OUT/cells"
$PY -m avey_b.evaluation.sweep --tasks sst2 --train-file "$DATA/sst2/train.tsv" --holdout 0.05 $COMMON || true
$PY -m avey_b.evaluation.sweep --tasks conll2003 --train-file "$DATA/conll2003/eng.train" \
    --eval-file "$DATA/conll2003/eng.testa" $COMMON || true
$PY -m avey_b.evaluation.report "$OUT/cells"
cp "$OUT/cells/report.md" "$OUT/report.md"
cp "$OUT/cells/report.json" "$OUT/report.json"
