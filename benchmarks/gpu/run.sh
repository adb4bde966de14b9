#!/usr/bin/env bash
# One command for a session lent a CUDA GPU: the GPU test suite (tests/test_gpu.py: CUDA vs CPU, bf16, compiled vs
# eager at random lengths, base at 96K x batch 8, gradient checkpointing), then the paper's efficiency setting
# (Avey-B base vs ModernBERT-base / NeoBERT-like, 128 ... 96K tokens, batch 8, bf16, eager and compiled, with the
# power-law fits next to the paper's: benchmarks/efficiency_gpu/run.sh). Results land in this folder and in
# benchmarks/efficiency_gpu/run/. Not run yet: no GPU has been lent to this project so far.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee benchmarks/gpu/device.txt
$PY -m pytest -m gpu -q tests/test_gpu.py 2>&1 | tee benchmarks/gpu/tests.log
PY=$PY bash benchmarks/efficiency_gpu/run.sh
