#!/usr/bin/env bash
# Set up (idempotent, with the test tools) and run the whole test suite: every tier, whatever pytest.ini's
# default selection (the fast tier) is; its arguments go to pytest after that (`-m integration` picks one tier).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
# On several workers where the machine has the cores (pytest-xdist): tests/conftest.py keeps each module whole on one
# worker and the modules with real models or a model server together on one, so the memory they need is held once.
# At most 4 workers (each imports torch and builds its own tiny pairs); SPECSTEER_TEST_WORKERS=1 runs in this process.
workers="${SPECSTEER_TEST_WORKERS:-$(nproc)}"
if (( workers > 4 )); then workers=4; fi
if (( workers < 2 )); then workers=0; fi
exec .venv/bin/python -m pytest -m "" -n "$workers" --dist loadfile "$@"
