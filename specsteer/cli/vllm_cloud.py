"""``specsteer cloud --engine vllm``: the command's vLLM options, and its composition root (connect to or
launch the engines, then serve a :class:`~specsteer.cloud.vllm.VllmCloudService` over HTTP)."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from specsteer.cloud.limits import ServiceLimits
from specsteer.cloud.refusals import ServiceError
from specsteer.cloud.vllm import (
    ENGINE_NAME,
    EngineSettings,
    LaunchedCloud,
    VllmCloudService,
    admission_budget,
    connect_cloud,
    launch_cloud,
    pairing_model_dirs,
    save_pair,
    vllm_available,
)


def add_arguments(parser) -> None:
    """The ``cloud`` command's options for ``--engine vllm``."""
    defaults = EngineSettings()
    parser.add_argument(
        "--engine",
        choices=("local", ENGINE_NAME),
        default="local",
        help="where the Cloud's models run: in this process (local), or in vLLM servers (vllm; "
        "scripts/setup_vllm.sh installs vLLM's own environment)",
    )
    parser.add_argument("--vllm-generalist-url", default=None, help="a running vLLM server of the Generalist")
    parser.add_argument("--vllm-specialist-url", default=None, help="a running vLLM server of the generic Specialist")
    parser.add_argument(
        "--vllm-generalist-model", default=None, help="model directory the launched Generalist engine serves"
    )
    parser.add_argument(
        "--vllm-specialist-model", default=None, help="model directory the launched generic Specialist engine serves"
    )
    parser.add_argument("--vllm-vocab-size", type=int, default=None, help="the pairing's shared vocabulary (URLs)")
    parser.add_argument("--vllm-dtype", default=defaults.dtype, help="launched engines' dtype (float32, bfloat16)")
    parser.add_argument("--vllm-kv-cache-mb", type=float, default=defaults.kv_cache_bytes / 2**20)
    parser.add_argument("--vllm-block-size", type=int, default=defaults.block_size)
    parser.add_argument("--vllm-max-model-len", type=int, default=defaults.max_model_len)
    parser.add_argument(
        "--vllm-max-candidates",
        type=int,
        default=defaults.max_logprobs,
        help="the most candidates a verdict carries (the engines' --max-logprobs; the Edge's top_k may not exceed it)",
    )
    parser.add_argument("--vllm-threads", type=int, default=None, help="OpenMP threads of each launched engine")
    parser.add_argument(
        "--vllm-compile", action="store_true", help="let vLLM compile the models (slower start, faster steps)"
    )
    parser.add_argument("--vllm-start-timeout-s", type=float, default=900.0)


def serve_from_arguments(args, limits: ServiceLimits, serve: Callable[[VllmCloudService], None]) -> int:
    """``python -m specsteer cloud --engine vllm``: connect to or launch the engines, then ``serve`` the service
    over them (the command's HTTP server, as for the local engine)."""
    import tempfile
    from dataclasses import replace

    from specsteer.models.tiny import shared_test_pair

    def fail(message: str) -> int:
        print(f"error: {message}", file=sys.stderr)
        return 2

    pairing = args.pairing
    if not pairing:
        return fail("--engine vllm needs --pairing (the id the Edges run)")
    test_pair = shared_test_pair(pairing)
    urls = (args.vllm_generalist_url, args.vllm_specialist_url)
    launched: LaunchedCloud | None = None
    if any(urls):
        if not all(urls):
            return fail("give both --vllm-generalist-url and --vllm-specialist-url, or neither")
        vocab = test_pair.vocab_size if test_pair is not None else args.vllm_vocab_size
        if vocab is None:
            return fail("--vllm-vocab-size is needed with engines at URLs for a pairing that is not a test pairing")
        try:
            pair = connect_cloud(pairing, vocab, urls[0], urls[1], args.vllm_max_candidates)
        except ServiceError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        # The engines' memory is theirs: without --memory-budget-mb, admission by memory is off and the
        # session limits alone hold (an engine queues what its KV cache cannot take).
    else:
        problem = vllm_available()
        if problem:
            return fail(problem)
        work = Path(tempfile.mkdtemp(prefix="specsteer-vllm-"))
        if args.vllm_generalist_model and args.vllm_specialist_model:
            dirs = (Path(args.vllm_generalist_model), Path(args.vllm_specialist_model))
        elif test_pair is not None:
            dirs = save_pair(test_pair, work / "models")
        else:
            found = pairing_model_dirs(pairing)
            if isinstance(found, str):
                return fail(found)
            dirs = found
        vocab = min(json.loads((d / "config.json").read_text()).get("vocab_size", 0) for d in dirs)
        if test_pair is not None:
            vocab = test_pair.vocab_size
        settings = EngineSettings(
            dtype=args.vllm_dtype,
            max_model_len=args.vllm_max_model_len,
            block_size=args.vllm_block_size,
            kv_cache_bytes=int(args.vllm_kv_cache_mb * 2**20),
            max_logprobs=args.vllm_max_candidates,
            enforce_eager=not args.vllm_compile,
            threads=args.vllm_threads,
        )
        _progress_to_stderr(f"starting two vLLM engines (logs in {work / 'logs'})")
        try:
            launched = launch_cloud(
                pairing,
                vocab,
                dirs[0],
                dirs[1],
                settings,
                work / "logs",
                args.vllm_start_timeout_s,
                _progress_to_stderr,
            )
        except RuntimeError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        pair = launched.pair
        if limits.memory_budget_bytes is None:
            limits = replace(limits, memory_budget_bytes=admission_budget(dirs[0], dirs[1], settings))
    service = VllmCloudService(pair, limits)
    try:
        serve(service)
    finally:
        stats = pair.stats()
        _progress_to_stderr(
            f"engines computed {stats.computed_tokens} of {stats.prompt_tokens} prompt tokens in {stats.rounds} rounds"
        )
        if launched is not None:
            launched.stop()
            shutil.rmtree(work / "models", ignore_errors=True)  # a test pairing's models written here (logs stay)
        else:
            pair.close()
    return 0


def _progress_to_stderr(line: str) -> None:
    print(f"[cloud] {line}", file=sys.stderr, flush=True)
