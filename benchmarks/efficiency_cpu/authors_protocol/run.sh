#!/usr/bin/env bash
# The authors' efficiency protocol (`avey-b bench run --protocol authors`) on this CPU, at the lengths that fit in
# about 10 minutes on the shared 2-core VM. Run from the repository root.
set -euo pipefail
out=${1:-benchmarks/efficiency_cpu/authors_protocol/run}
cat /proc/loadavg > "$out.loadavg.before" 2>/dev/null || { mkdir -p "$(dirname "$out")"; cat /proc/loadavg > "$out.loadavg.before"; }
timeout 660 avey-b bench run --protocol authors --device cpu --dtype float32 --lengths 128 256 512 --max-latency 30 \
    --flops-up-to 0 --out "$out" || echo "stopped by the time bound (exit $?)"
cat /proc/loadavg > "$out.loadavg.after"
