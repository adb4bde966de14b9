#!/usr/bin/env bash
# Second bounded pass of the authors' protocol on this CPU: the baselines at the first length (128 tokens), the series
# the first pass (run.sh) did not reach in its 11 minutes. Run from the repository root.
set -euo pipefail
out=${1:-benchmarks/efficiency_cpu/authors_protocol/run-baselines}
mkdir -p "$(dirname "$out")"
cat /proc/loadavg > "$out.loadavg.before"
timeout 540 avey-b bench run --protocol authors --device cpu --dtype float32 --models modernbert-base neobert --lengths 128 \
    --flops-up-to 0 --out "$out" || echo "stopped by the time bound (exit $?)"
cat /proc/loadavg > "$out.loadavg.after"
