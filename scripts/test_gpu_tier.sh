#!/usr/bin/env bash
# The GPU tier (tests/gpu) on the CPU, under the project's pinned transformers (.venv) and under transformers 5.17,
# the version the GPU machines this project is lent have (.venv-tf517, built here idempotently from the same pins
# but transformers): a GPU session then meets tests already proven under both. Its arguments go to pytest.
#   bash scripts/test_gpu_tier.sh -q
#   bash scripts/test_gpu_tier.sh --setup-only    builds .venv-tf517 and runs nothing (CI builds it beside .venv)
# On a GPU machine run `bash benchmarks/gpu_session.sh` instead (the tier on CUDA, then the engine benchmark).
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv-tf517
transformers=transformers==5.17.0
torch_cpu_index=https://download.pytorch.org/whl/cpu
# Everything but transformers as requirements.txt pins it (and pytest as requirements-dev.txt does): the tier needs no more.
mapfile -t pins < <(grep -hE '^(tokenizers|safetensors|accelerate|peft|numpy)[=><]' requirements.txt;
                    grep -hE '^pytest==' requirements-dev.txt)
torch=$(grep -E '^torch==' requirements.txt)

python=${PYTHON:-python3}
stamp=$venv/.installed-$( (cat "$0"; printf '%s\n' "$torch" "${pins[@]}") | sha256sum | cut -c1-16)
if [[ ! -f $stamp ]]; then
  echo "[gpu-tier] building $venv ($transformers, $torch CPU build, ${pins[*]})"
  [[ -x $venv/bin/python ]] || "$python" -m venv "$venv"
  pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
  # The CPU build of torch from PyTorch's CPU index where it answers (PyPI's own is the CUDA build, gigabytes more).
  if "$python" - "$torch_cpu_index/torch/" <<'PY' 2>/dev/null; then
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=8).read(1)
PY
    "${pip[@]}" "$torch+cpu" --extra-index-url "$torch_cpu_index"
  else
    "${pip[@]}" "$torch+cpu" || "${pip[@]}" "$torch"
  fi
  "${pip[@]}" "$transformers" "${pins[@]}"
  rm -f "$venv"/.installed-*
  touch "$stamp"
fi

[[ ${1:-} == --setup-only ]] && { echo "[gpu-tier] $venv is ready"; exit 0; }

export SPECSTEER_GPU_TIER_DEVICE=cpu
status=0
for python_bin in .venv/bin/python "$venv/bin/python"; do
  version=$("$python_bin" -c 'import transformers; print(transformers.__version__)')
  echo "[gpu-tier] tests/gpu on the CPU under transformers $version ($python_bin)"
  "$python_bin" -m pytest tests/gpu -p no:cacheprovider "$@" || status=$?
done
exit $status
