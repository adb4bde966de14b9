#!/usr/bin/env bash
# NIAH on this 2-core CPU: (1) the generator at the paper's lengths (1k ... 96k tokens), (2) a small
# end-to-end evaluation run. See README.md next to this file for what the numbers mean (and do not).
# Usage, from the repository root:  bash benchmarks/niah_cpu/run.sh
set -euo pipefail
OUT=${OUT:-benchmarks/niah_cpu}
WORK=${WORK:-runs/niah_cpu}
PY=${PY:-python}
TEXT=${TEXT:-/work/shared/data/wikitext-2/valid.tokens.txt}
mkdir -p "$WORK"
[ -f "$WORK/tokenizer/tokenizer.json" ] || $PY benchmarks/niah_cpu/make_tokenizer.py "$TEXT" "$WORK/tokenizer"
# (1) Paper lengths, 10 test examples per length (4 single-needle, 6 two-needle), both tasks; timed.
/usr/bin/time -v $PY -m avey_b.evaluation.niah generate --tokenizer "$WORK/tokenizer" --out "$WORK/paper_lengths" \
    --n-train 20 --n-test 10 --format both 2> "$WORK/generate_time.txt"
$PY - "$WORK/paper_lengths" > "$OUT/generation_stats.md" <<'PYEOF'
import json, sys, os
root = sys.argv[1]
print("| task | set | n | single-needle | tokens min | tokens median | tokens max | max error vs target |")
print("|---|---|---|---|---|---|---|---|")
for task in ("niah-1", "niah-2"):
    m = json.load(open(os.path.join(root, task, "manifest.json")))
    for name, s in m["sets"].items():
        target = int(name.split("_")[1])
        err = max(abs(s["tokens_min"] - target), abs(s["tokens_max"] - target)) / target
        print(f"| {task} | {name} | {s['n']} | {s['single']} | {s['tokens_min']} | {s['tokens_median']} | "
              f"{s['tokens_max']} | {100 * err:.3f}% |")
PYEOF
echo >> "$OUT/generation_stats.md"
grep -E "Elapsed|Maximum resident|User time" "$WORK/generate_time.txt" | sed 's/^\s*/- /' >> "$OUT/generation_stats.md"
# (2) End-to-end plumbing check: fine-tune at 256 tokens on NIAH-2 for 40 steps, score 256 ... 4k (20
# examples per length). Models built from config with RANDOM weights (nothing pretrained is available
# offline), so the scores measure nothing about the architectures; what the run shows is the protocol:
# per-length EM/F1, the whole input in one window, "—" past BERT's position table.
$PY -m avey_b.evaluation.niah generate --tokenizer "$WORK/tokenizer" --out "$WORK/small" --tasks niah-2 \
    --train-lengths 256 --lengths 256 512 1024 2048 4096 --n-train 1200 --n-test 50 --format jsonl
$PY -m avey_b.evaluation.niah evaluate --data "$WORK/small" --tasks niah-2 --tokenizer "$WORK/tokenizer" \
    --models avey-b-small "bert-base:num_hidden_layers=4,hidden_size=256,num_attention_heads=4,intermediate_size=1024" \
    --train-length 256 --max-steps 40 --batch-size 8 --lr 5e-4 --eval-batch-size 8 --max-eval-examples 20 \
    --device cpu --out "$OUT/eval"
