#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (the device tool's H200), after `python -m bench.gpu_carry PART` here:
#   bash bench/gpu_check.sh text [RECORDS] [BATCH] [FEED_RECORDS] [SYSTEM_RECORDS]
#       FP16 parity of MiniLM and of an imported text classifier (torch, TensorRT if present), the four-way benchmark (RECORDS at BATCH), the
#       feed benchmark (FEED_RECORDS: simulated accelerators and the real torch engine) and the system cost benchmark
#       (SYSTEM_RECORDS short texts through real preprocess workers, half as many as the cores, and the torch engine:
#       CPU per record of every process, and the accelerator's busy fraction); the engine alone's records/s against
#       batch size (bench.engine_curve)
#   bash bench/gpu_check.sh images     # FP16 parity for EfficientNet-Lite0
#   bash bench/gpu_check.sh system 0 0 0 [SYSTEM_RECORDS]   # the system cost step alone (text carry)
#   bash bench/gpu_check.sh generate [PROMPTS] [MAX_TOKENS]   # SmolLM2-135M on the transformers engine
#       (bench/gpu_generate.py): its GGUF joined from .device/ and .device-2/ (two device calls) and
#       imported; greedy parity with the CPU's float32 references; the engine alone's tokens/s
#       (generate_batch) against our engine's and its busy fraction; tokens/s end to end through
#       the platform and the engine's busy fraction in the GPU worker. Limits: 150 + 60 + 120 + 150 s.
# The text and images parts also time the torch engine's CUDA graphs captured as shapes are met against all captured
# at start-up (bench/graph_warmup.py).
# The device tool sends .device/ only when the run names it in `carry` (docs/benchmarks.md, "On a GPU machine");
# generate also needs .device-2/, left on the machine by a call just before that carried it alone.
# Installs the carried wheels and unpacks the carried models and broker into a scratch folder
# (never into .device/, which must stay the size it was carried at), and writes everything it
# prints to $OUT/gpu_check_PART.txt. Exits non-zero if any step failed. Its steps' limits add up
# to 9.5 minutes (generate: 8), under the device tool's 10 a command; the text part took under 2 on the H200.
# bench/gpu_dryrun.sh runs it on the CPU, smaller, in CI.
set -uo pipefail
part="${1:-text}"
case "$part" in text | images | system | generate) ;; *) echo "unknown part $part" >&2 && exit 2 ;; esac
records="${2:-1200}"
batch="${3:-64}"
feed_records="${4:-8000}"
system_records="${5:-30000}"
out="${OUT:-/tmp}/gpu_check_${part}.txt"
cd "$(dirname "$0")/.."
work="$(mktemp -d "${TMPDIR:-/tmp}/nearline-device.XXXXXX")"
trap 'rm -rf "$work"' EXIT
exec > >(tee "$out") 2>&1

failed=()
step() {  # step NAME SECONDS COMMAND...: run with a time limit, remember a failure, go on
    local name="$1" limit="$2"
    shift 2
    echo "== $name"
    # SIGTERM first: the benchmark stops the broker and workers it started in their own sessions
    timeout --kill-after=30 "$limit" "$@" || failed+=("$name (exit $?)")
}

if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
else
    echo "no nvidia-smi: no NVIDIA GPU here, everything runs on the CPU"
fi
python3 --version
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$work/site" .device/wheels/*.whl \
    || failed+=("wheel install")
export PYTHONPATH="$work/site:$PWD" PYTHONUNBUFFERED=1
python3 -m bench.device_pack unpack .device "$work/carry" || failed+=("unpack")
if [ -f "$work/carry/tansu" ]; then
    chmod +x "$work/carry/tansu"
    export NEARLINE_TANSU_BINARY="$work/carry/tansu"
fi
models="$work/carry/models"
system_cost() {  # system_cost SECONDS: short texts through half as many preprocess workers as cores
    step "system cost" "$1" python3 -m bench.system_cost --engine torch --model-repository "$models" \
        --records "$system_records" --texts short --preprocess-workers "$(( $(nproc) / 2 > 1 ? $(nproc) / 2 : 1 ))"
}

if [ "$part" = text ] || [ "$part" = images ]; then
    step "parity $part" 90 python3 -m bench.gpu_parity "$part" --repository "$models"
    model="$([ "$part" = text ] && echo minilm || echo efficientnet-lite0)"
    step "graph warmup" 90 python3 -m bench.graph_warmup --model-repository "$models" --model "$model"
fi
if [ "$part" = system ]; then  # the system cost step alone, to look again at one that failed
    system_cost 180
fi
if [ "$part" = text ]; then
    # The GPU machine has no ONNX files: (a), (b), (d) and the workers run the torch engine.
    step "decoupling benchmark" 120 python3 -m bench.decoupling --engine torch --model-repository "$models" \
        --records "$records" --batch-size "$batch"
    step "feed benchmark" 120 python3 -m bench.feed --real-engine torch --model-repository "$models" \
        --records "$feed_records"
    # the engine alone against batch size on short texts: the curve the CUDA batch defaults are from
    step "engine curve" 30 python3 -m bench.engine_curve --engine torch --model-repository "$models" \
        --records "$feed_records" --sizes $([ "$feed_records" -ge 4096 ] && echo 64 128 256 512 1024 || echo 16 64)
    system_cost 120
fi
if [ "$part" = generate ]; then
    prompts="${2:-256}" max_tokens="${3:-64}"
    repository="$work/models" figures="$work/generate.json"
    step "generate: model" 150 python3 -m bench.gpu_generate model --carry "$work/carry" --second .device-2 \
        --repository "$repository"
    if [ -f "$repository/smollm2-135m/1/config.json" ]; then  # without the model, the rest only fails again
        step "generate: parity" 60 python3 -m bench.gpu_generate parity --repository "$repository" \
            --references "$work/carry/reference_generate.json"
        step "generate: engine" 120 python3 -m bench.gpu_generate engine --repository "$repository" \
            --prompts "$prompts" --max-tokens "$max_tokens" --figures "$figures"
        step "generate: system" 150 python3 -m bench.gpu_generate system --repository "$repository" \
            --prompts "$prompts" --max-tokens "$max_tokens" --figures "$figures"
    fi
fi

if [ ${#failed[@]} -gt 0 ]; then
    echo "FAILED: ${failed[*]}"
    exit 1
fi
echo "gpu_check $part: every step passed"
