#!/usr/bin/env bash
# One command for a session lent a CUDA GPU: the GPU test suite (tests/test_gpu.py: CUDA vs CPU, bf16, compiled vs
# eager at random lengths, base at 96K x batch 8, gradient checkpointing, the ranker's vocabulary path on CUDA),
# then the paper's efficiency setting (benchmarks/efficiency_gpu/run.sh, every part).
#   RESULTS=benchmarks/gpu bash benchmarks/gpu/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python}  # the interpreter that has torch and this package
RESULTS=${RESULTS:-benchmarks/gpu}
mkdir -p "$RESULTS"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$RESULTS/device.txt"
$PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" \
    | tee -a "$RESULTS/device.txt"
$PY -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tee "$RESULTS/tests.log"
PY=$PY RESULTS=${EFFICIENCY_RESULTS:-benchmarks/efficiency_gpu/run} bash benchmarks/efficiency_gpu/run.sh
