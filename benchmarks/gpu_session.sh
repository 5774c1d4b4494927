#!/usr/bin/env bash
# The one prepared command for a GPU machine: the GPU tier (tests/gpu) on CUDA, then the engine benchmark inside a
# time budget, then the projection beside it; everything it writes goes under $OUT.
#
# For a machine with torch, transformers and peft and nothing else (no network, no model files, no gradio or
# sqlalchemy: the machines this project is lent have torch 2.11, transformers 5.17 and peft). The tier needs pytest;
# where the machine lacks it, carry its wheels: run `bash benchmarks/gpu_session.sh --prepare` here first (it
# downloads them into .gpu-wheels/, git-ignored, about 1 MB) and carry .gpu-wheels with the working tree; they are
# installed into .gpu-site/ there, nothing else on the machine is changed.
#
#   bash benchmarks/gpu_session.sh               # on the GPU machine: about 8 minutes on an H100-class GPU
#   bash benchmarks/gpu_session.sh --prepare     # here: pytest's wheels for a machine that has no pytest
#
# Environment: OUT (default gpu-session-out/), PYTHON (python3), SESSION_BUDGET_S (470: the whole session),
# TIER_TIMEOUT_S (120), COSTS (benchmarks/results/gpu_costs_h100.json: the passes measured by benchmarks/gpu_costs.py on an H100,
# what the projection beside the benchmark is priced with; skipped where absent), BENCH_ARGS (more arguments for
# engine_bench.py), TIER_DEVICE (cuda: a missing GPU fails the tier). $OUT gets env.txt, gpu_tier.log and .xml,
# engine_bench.json and .log, gpu_profile.txt. Proven on a CPU by the same command with TIER_DEVICE=cpu,
# BENCH_ARGS=--dry-run and COSTS=results/gpu_costs_cpu_dryrun.json (docs/GPU_COSTS.md).
set -uo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}

if [[ ${1:-} == --prepare ]]; then
  pytest_pin=$(grep -E '^pytest==' requirements-dev.txt)
  "$python" -m pip download --quiet --only-binary=:all: -d .gpu-wheels "$pytest_pin"
  ls .gpu-wheels
  exit 0
fi

out=${OUT:-gpu-session-out}
mkdir -p "$out"
started=$(date +%s)
session_budget=${SESSION_BUDGET_S:-470}

{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  nvidia-smi 2>&1 || echo "nvidia-smi: not found"
  "$python" - <<'PY'
import platform
import torch
import transformers
try:
    import peft
    peft_version = peft.__version__
except ImportError:
    peft_version = "missing"
print(f"python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}, peft {peft_version}")
print(f"cuda available: {torch.cuda.is_available()}, devices: {torch.cuda.device_count()}")
for module in ("gradio", "sqlalchemy", "pytest"):
    try:
        __import__(module)
        print(f"{module}: present")
    except ImportError:
        print(f"{module}: absent")
PY
} > "$out/env.txt" 2>&1
cat "$out/env.txt"

if ! "$python" -c "import pytest" 2>/dev/null; then
  if [[ -d .gpu-wheels ]]; then
    echo "[gpu-session] pytest: installing the carried wheels into .gpu-site/"
    "$python" -m pip install --quiet --no-index --find-links .gpu-wheels --target .gpu-site pytest
    export PYTHONPATH=$PWD/.gpu-site${PYTHONPATH:+:$PYTHONPATH}
  else
    echo "[gpu-session] pytest is missing and no .gpu-wheels/ was carried: the tier cannot run (see --prepare)" \
      | tee "$out/gpu_tier.log"
  fi
fi

status=0
echo "[gpu-session] 1/3 the GPU tier on ${TIER_DEVICE:-cuda} (tests/gpu)"
SPECSTEER_GPU_TIER_DEVICE=${TIER_DEVICE:-cuda} timeout "${TIER_TIMEOUT_S:-120}" "$python" -m pytest tests/gpu -q -rs -p no:cacheprovider \
  --junitxml "$out/gpu_tier.xml" 2>&1 | tee "$out/gpu_tier.log"
tier=${PIPESTATUS[0]}
[[ $tier == 0 ]] || status=$tier

left=$(( session_budget - ($(date +%s) - started) - 30 ))
echo "[gpu-session] 2/3 the engine benchmark (budget ${left} s)"
# shellcheck disable=SC2086  # BENCH_ARGS is a list of arguments
timeout $(( left + 60 )) "$python" benchmarks/engine_bench.py --out "$out/engine_bench.json" --budget-s "$left" \
  ${BENCH_ARGS:-} 2>&1 | tee "$out/engine_bench.log"
bench=${PIPESTATUS[0]}
[[ $bench == 0 ]] || status=$bench

costs=${COSTS:-benchmarks/results/gpu_costs_h100.json}
echo "[gpu-session] 3/3 the projection beside the benchmark ($costs)"
if [[ -f $costs && -f $out/engine_bench.json ]]; then
  "$python" -m specsteer gpu-profile "$costs" --no-projection --engine-bench "$out/engine_bench.json" \
    > "$out/gpu_profile.txt" 2>&1 || status=$?
  cat "$out/gpu_profile.txt"
else
  echo "skipped: $costs or $out/engine_bench.json is missing" | tee "$out/gpu_profile.txt"
fi
echo "[gpu-session] done in $(( $(date +%s) - started )) s: tier rc=$tier, benchmark rc=$bench; $out/"
exit $status
