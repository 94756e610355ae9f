#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (the device tool's H200), after `python -m bench.gpu_carry PART` here:
#   bash bench/gpu_check.sh text     # parity (torch CUDA FP16, TensorRT if present) + the four-way benchmark
#   bash bench/gpu_check.sh images   # parity for EfficientNet-Lite0
# Installs the carried wheels, unpacks the carried models and broker, and writes everything it
# prints to $OUT/gpu_check_PART.txt. Sized to finish within 8 minutes.
set -uo pipefail
part="${1:-text}"
out="${OUT:-/tmp}/gpu_check_${part}.txt"
cd "$(dirname "$0")/.."
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 --version
    if [ -d .device/wheels ]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .device/wheels/*.whl
    fi
    export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1
    for packed in .device/models/*/1/model.pt.xz; do
        xz -dc "$packed" > "${packed%.xz}"
    done
    if [ -f .device/tansu.xz ]; then
        xz -dc .device/tansu.xz > /tmp/tansu && chmod +x /tmp/tansu
        export NEARLINE_TANSU_BINARY=/tmp/tansu
    fi
    timeout 180 python3 -m bench.gpu_parity "$part" --repository .device/models
    if [ "$part" = text ]; then
        # The GPU machine has no ONNX files: (a), (b), (d) and the workers run the torch engine.
        timeout 300 python3 -m bench.decoupling --engine torch --model-repository .device/models \
            --records 1200 --batch-size 64
    fi
} 2>&1 | tee "$out"
