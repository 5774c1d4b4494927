#!/usr/bin/env bash
# Set up (idempotent, with the test tools) and run the whole test suite: every tier, whatever pytest.ini's
# default selection (the fast tier) is; its arguments go to pytest after that (`-m integration` picks one tier).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
exec .venv/bin/python -m pytest -m "" "$@"
