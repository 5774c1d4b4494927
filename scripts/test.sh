#!/usr/bin/env bash
# Set up (idempotent, with the test tools) and run the whole test suite: every tier, whatever pytest.ini's
# default selection (the fast tier) is; its arguments go to pytest after that (`-m integration` picks one tier).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
# On a pytest-xdist worker per core (at most 4; SPECSTEER_TEST_WORKERS=1 runs in this process): tests/conftest.py
# decides it for every run of the configured test paths, keeps each module whole on one worker and the real-model
# tier (tests/integration) on one, scheduled first. Naming tests in the arguments runs them in this process (add -n 2).
exec .venv/bin/python -m pytest -m "" "$@"
