#!/usr/bin/env bash
# The measured LongLaMP table on the real records (../shared/data/longlamp/, or $SPECSTEER_SHARED_DATA):
# review and writing, 12 records each, 256 new tokens, greedy, the offline Qwen2.5-Coder pair,
# every method; SpecSteer at alpha 1, 0.5, 0.1 with beta 1, plus beta 0.5 and 2 at alpha 0.5.
#
# Both tasks go into one database, results/longlamp.db (override with EVAL_DATABASE=URL), and each
# task writes results/longlamp_<task>.json ({"rows": [...]}) and results/longlamp_<task>.html.
# Takes hours on a 2-core CPU. Every finished generation is stored at once: after a crash or
# Ctrl-C, run this script again and it continues the same runs (their names are fixed below).
# Extra arguments go to both runs, e.g. --dtype fp32 (a changed setting needs new run names).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p results
database="${EVAL_DATABASE:-sqlite:///$PWD/results/longlamp.db}"

for task in review writing; do
    .venv/bin/python -m specsteer evaluate \
        --data shared --task "$task" --limit 12 \
        --methods slm,slm+,llm,sd,lightcosteer,costeer,specsteer \
        --alpha 1,0.5,0.1 --beta 1 --extra-grid 0.5:0.5,0.5:2 \
        --pairing offline-qwen2.5-coder --max-new-tokens 256 \
        --run-name "longlamp-$task-offline-256" --database "$database" \
        --plot "results/longlamp_$task.html" --json "$@" > "results/longlamp_$task.json.partial"
    mv "results/longlamp_$task.json.partial" "results/longlamp_$task.json"
done
