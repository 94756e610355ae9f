#!/usr/bin/env bash
# The device path, dry-run on the CPU; CI runs it (.ci/test). For each part, text, images and generate:
# build .device/ as bench/gpu_carry.py does, copy what the device tool would send (tracked and
# untracked-not-ignored files, plus .device/) to a scratch checkout, and run bench/gpu_check.sh
# there under Python 3.12 with only the GPU image's packages (bench/gpu_image.txt) and the carried
# wheels, with no nvidia-smi. It shows the carry is complete and the device's carry fits, parity
# holds (on the CPU) for MiniLM and for a text classifier imported with `models import`, all four
# benchmark configurations run, and the system cost benchmark runs with the torch engine and
# reports its busy fraction. What only a GPU shows: docs/benchmarks.md, "On a GPU machine".
# The carry here also holds each model's FP32 TorchScript (gpu_carry --fp32; the size check counts
# the device's carry without it): a CPU without fast FP16 arithmetic (this project's machines since
# 2026-12-05: AMD EPYC, no AVX-512 FP16) runs FP16 ~45x slower than FP32, past the steps'
# device-sized time limits. So the torch engine runs FP32 on the CPU, parity at the FP16
# tolerances, and the carried FP16 files are loaded and checked on a few references
# (bench/gpu_parity.py, FP16_ON_CPU).
# generate: SmolLM2-135M from its GGUF in two parts, as the device gets them after its two calls
# (.device/ and .device-2/; a join without part 2 must fail and say so first), 8 prompts of 8
# tokens: the engine in float32 must give the CPU references' tokens exactly, and the engine, end
# to end and busy figures must come out.
#   bash bench/gpu_dryrun.sh [text|images|generate ...]     # every part by default
set -euo pipefail
cd "$(dirname "$0")/.."
home="${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}"

python312="${NEARLINE_PYTHON312:-}"
if [ -z "$python312" ]; then
    # pyenv's shim fails unless a 3.12 is selected; its installs are plain interpreters
    for candidate in "$(command -v python3.12 || true)" "${PYENV_ROOT:-$home/.pyenv}"/versions/3.12*/bin/python3.12; do
        if [ -n "$candidate" ] && "$candidate" --version >/dev/null 2>&1; then
            python312="$candidate"
            break
        fi
    done
fi
if [ -z "$python312" ]; then
    echo "gpu dry run: needs a Python 3.12 (the GPU image's); set NEARLINE_PYTHON312" >&2
    exit 1
fi

# The image's packages, cached per content of gpu_image.txt (torch 2.11 with its CUDA libraries is
# about 5 GB: minutes to install once, nothing after).
image="${XDG_CACHE_HOME:-$home/.cache}/nearline/gpu-image-$(sha256sum bench/gpu_image.txt | cut -c1-12)"
if [ ! -f "$image/.complete" ]; then
    echo "gpu dry run: creating the GPU image's Python environment in $image (once)"
    rm -rf "$image"
    "$python312" -m venv "$image"
    "$image/bin/python3" -m pip install -q --disable-pip-version-check -r bench/gpu_image.txt
    touch "$image/.complete"
fi

scratch="$(mktemp -d "${TMPDIR:-/tmp}/nearline-dryrun.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
parts=("$@")
[ $# -gt 0 ] || parts=(text images generate)
for part in "${parts[@]}"; do
    if [ "$part" = generate ]; then
        .venv/bin/python -m bench.gpu_carry generate --prompts 8 --max-tokens 8
        # the second call's check without the first call's part 2: it must stop and say so
        if .venv/bin/python -m bench.gpu_generate join --second "$scratch/none" --out "$scratch/none" \
            2>"$scratch/join.txt"; then
            echo "gpu dry run: the GGUF joined without its part 2" >&2
            exit 1
        fi
        grep -q 'part 2 of .* is missing' "$scratch/join.txt"
        args=(8 8)
    else
        .venv/bin/python -m bench.gpu_carry "$part" --texts 64 --fp32
        args=(96 16 96 400)
    fi
    checkout="$scratch/$part"
    mkdir -p "$checkout"
    git ls-files -z --cached --others --exclude-standard \
        | tar --null --files-from=- --ignore-failed-read -cf - | tar -xf - -C "$checkout"
    cp -a .device "$checkout/"
    # generate: .device-2 as the first device call left it there
    [ "$part" != generate ] || cp -a .device-2 "$checkout/"
    # only the image's interpreter and packages: no project venv, no PYTHONPATH of ours
    (cd "$checkout" && env -u PYTHONPATH -u VIRTUAL_ENV PATH="$image/bin:/usr/bin:/bin" OUT="$scratch" \
        bash bench/gpu_check.sh "$part" "${args[@]}")
    if [ "$part" = generate ]; then  # float32 on the CPU: token-identical to the references
        grep -q '"precision": "fp32", "model": "smollm2-135m".*"passed": true' "$scratch/gpu_check_$part.txt"
        grep -q '"section": "engine".*"engine_busy"' "$scratch/gpu_check_$part.txt"
        grep -q '"section": "system".*"tokens_per_s"' "$scratch/gpu_check_$part.txt"
        grep '^{' "$scratch/gpu_check_$part.txt" | sed 's/^/gpu dry run checked: /'
        continue
    fi
    grep -q '"precision": "fp32".*"passed": true' "$scratch/gpu_check_$part.txt"
    grep -q '"precision": "fp16".*"passed": true' "$scratch/gpu_check_$part.txt"  # the device's file
    if [ "$part" = text ]; then  # the imported classifier went through the torch engine in both
        grep -q '"precision": "fp32", "model": "byo-classifier".*"passed": true' "$scratch/gpu_check_$part.txt"
        grep -q '"precision": "fp16", "model": "byo-classifier".*"passed": true' "$scratch/gpu_check_$part.txt"
    fi
    grep '^{' "$scratch/gpu_check_$part.txt" | sed 's/^/gpu dry run checked: /'
done
[ ! -f "$scratch/gpu_check_text.txt" ] || grep -q 'zero-cost' "$scratch/gpu_check_text.txt"
[ ! -f "$scratch/gpu_check_text.txt" ] || grep -q 'engine busy: .* of torch' "$scratch/gpu_check_text.txt"
echo "gpu dry run: the device path passed on the CPU under $("$image/bin/python3" --version)"
