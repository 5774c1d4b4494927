#!/usr/bin/env bash
# Compiles llama.cpp for this CPU (the pinned llama-cpp-python, which PyPI ships as source only) and
# installs it into .venv. The wheel is kept in $SPECSTEER_CACHE/wheels/<version>-<cpu key>, so a later
# set-up on a machine with the same CPU model and instruction set reuses it, and one with another CPU
# builds its own: a native build (GGML_NATIVE=ON) may use every instruction of the CPU it was compiled
# on. A failed build is reported and set-up goes on: the app then runs on the transformers runtime.
set -uo pipefail
cd "$(dirname "$0")/.."
python=.venv/bin/python
pin=$(grep -E '^llama-cpp-python==' requirements.txt | cut -d' ' -f1)
version=${pin#llama-cpp-python==}
cache=${SPECSTEER_CACHE:-$HOME/.cache/specsteer}
key=$("$python" -m specsteer.runtimes.llamacpp cpu-key 2>/dev/null)
# BUILD_FLAGS names the build configuration in the cache key: a wheel built with other flags is never reused.
# -mno-amx-*: llama.cpp's AMX buffer type (weights repacked for Intel AMX tiles, compiled in whenever the
# build CPU has AMX) crashes in llama_decode on some AMX machines (upstream llama.cpp #20824); without it,
# the 4-bit weights still go through llama.cpp's generic CPU repack (AVX2/AVX512), which every other
# x86-64 machine uses. GCC honours an explicit -mno-* over -march=native whatever their order.
BUILD_FLAGS="-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF -DCMAKE_C_FLAGS=-mno-amx-tile\ -mno-amx-int8\ -mno-amx-bf16 -DCMAKE_CXX_FLAGS=-mno-amx-tile\ -mno-amx-int8\ -mno-amx-bf16"
flags_key=$(printf '%s' "$BUILD_FLAGS" | sha256sum | cut -c1-8)
wheels=$cache/wheels/llama-cpp-python-$version-${key:-unknown}-$flags_key
mkdir -p "$wheels"

if ! compgen -G "$wheels/llama_cpp_python-*.whl" >/dev/null; then
  log=$wheels/build.log
  echo "[setup] compiling llama.cpp ($pin) for this CPU, once: about 10-15 minutes on 2 cores (log: $log)"
  started=$SECONDS
  # LLAVA_BUILD=OFF: the multimodal library is not used here and is a third of the build.
  # --no-cache-dir: pip's own wheel cache is not keyed by CPU, so a native wheel must not land in it.
  CMAKE_ARGS="$BUILD_FLAGS" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
    "$python" -m pip wheel --no-deps --no-cache-dir --disable-pip-version-check -v -w "$wheels.partial" "$pin" 2>&1 \
    | tee "$log" | awk '
        match($0, /^[ \t]*\[[0-9]+\/[0-9]+\]/) {
          step = substr($0, RSTART, RLENGTH); gsub(/[][ \t]/, "", step); split(step, part, "/")
          pct = int(100 * part[1] / part[2])
          if (pct >= next_report) { printf "[setup]   llama.cpp build %d%% (%d/%d)\n", pct, part[1], part[2]; fflush(); next_report = pct + 10 }
        }'
  if compgen -G "$wheels.partial/llama_cpp_python-*.whl" >/dev/null; then
    mv "$wheels.partial"/llama_cpp_python-*.whl "$wheels/" && rm -rf "$wheels.partial"
    echo "[setup] llama.cpp compiled in $(( (SECONDS - started) / 60 )) min"
  else
    rm -rf "$wheels.partial"
    echo "[setup] WARNING: compiling llama.cpp failed (see $log). SpecSteer will use the transformers" \
         "runtime, which is several times slower on a CPU; run scripts/setup.sh again to retry." >&2
    exit 0
  fi
fi
"$python" -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall "$wheels"/llama_cpp_python-*.whl
"$python" -m pip install --quiet --disable-pip-version-check "$pin"   # its small dependencies
"$python" -m specsteer.runtimes.llamacpp stamp --native >/dev/null
"$python" -m specsteer.runtimes.llamacpp built | sed 's/^/[setup] llama.cpp: /'
