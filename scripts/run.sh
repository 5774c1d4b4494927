#!/usr/bin/env bash
# Set up (idempotent) and start the app on http://127.0.0.1:7860 with the offline
# model pair and an embedded SQLite database in ./data.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python app.py "$@"
