#!/usr/bin/env bash
# Lesson 09 on a CUDA GPU, in one go (about 5 minutes on an H200, 8 at most):
#   1. the GPU tests of the reference (tiled PyTorch and Triton against float32/float64 references,
#      gradients, the FlashAttention-style error bound) and of the lesson's checks;
#   2. the benchmark `python -m attnlab.bench flash`: CPU grid and goals, then the GPU grid (naive,
#      tiled PyTorch, Triton, each SDPA backend), accuracy and the GPU goals, as JSON.
# Everything lands in $OUT (default: /tmp/attnlab-gpu-results): environment.txt, pytest.log, pytest.xml,
# bench.log, flash_gpu.json. To ship the recording with the course, copy flash_gpu.json to
# src/attnlab/recorded/flash_gpu.json (only a complete run on real hardware; never edit numbers).
#
# Needs a Python (PYTHON, default python3) with a CUDA build of torch 2.13, triton 3.7.1, numpy and
# pytest; nothing is installed or downloaded: the course is used in place through PYTHONPATH.
#   OUT=/some/dir bash scripts/gpu_flash_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/attnlab-gpu-results}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export MPLBACKEND=Agg
start=$(date +%s)

{
    date -u +"%Y-%m-%dT%H:%M:%SZ"
    nvidia-smi || true
    "$PY" - <<'EOF'
import torch
print("torch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version())
print("GPU", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
try:
    import triton
    print("triton", triton.__version__)
except ImportError as error:
    print("triton missing:", error)
EOF
} > "$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "no CUDA GPU visible to $PY: nothing to check here" | tee -a "$OUT/environment.txt"
    exit 2
fi

# 1. Tests. One fixed kernel configuration (ATTNLAB_TRITON_AUTOTUNE=0): far fewer compilations.
ATTNLAB_TRITON_AUTOTUNE=0 timeout 150 "$PY" -m pytest -q -p no:cacheprovider \
    tests/test_flash_reference.py tests/test_checks_lesson09.py \
    --junitxml="$OUT/pytest.xml" > "$OUT/pytest.log" 2>&1
tests=$?
tail -n 25 "$OUT/pytest.log"
echo "pytest exit status: $tests ($(( $(date +%s) - start )) s so far)"

# 2. The benchmark, autotuned; the JSON is rewritten after each part, so a cut run keeps some.
timeout 300 "$PY" -m attnlab.bench flash --out "$OUT/flash_gpu.json" 2>&1 | tee "$OUT/bench.log" | tail -n 40
bench=${PIPESTATUS[0]}
echo "benchmark exit status: $bench ($(( $(date +%s) - start )) s in all)"
[ "$tests" -eq 0 ] && [ "$bench" -eq 0 ]
