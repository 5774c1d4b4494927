"""The cost of each token's numbers (DecodeConfig.details) to a streamed Generate view, details off and on.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/token_details_render.py [--tokens 96] [--repeats 5]

One greedy SpecSteer generation on the tiny fp32 pair (specsteer.models.tiny), with details off and on (the
same tokens: details decide nothing), then, in the same run, alternating: (1) rendering every settled and
pending event into the Generate view's growing HTML (ui.token_html.TokenHtml: add, then read .html, as each
streamed frame does), and (2) the whole generation. Prints and writes benchmarks/results/token_details_render.json:
the median microseconds per token of each, off and on, the ratio on/off, the HTML bytes per token, the load
average when taken. Only ratios within this one run are meaningful (a shared 2-core machine).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specsteer.engine.decode_config import DecodeConfig  # noqa: E402
from specsteer.engine.generate import generate_ids  # noqa: E402
from specsteer.method.events import Finished, TokenEvent  # noqa: E402
from specsteer.models.tiny import tiny_pair  # noqa: E402
from ui.token_html import TokenHtml  # noqa: E402

RESULT = Path(__file__).resolve().parent / "results" / "token_details_render.json"


def events_of(pair, prompt: list[int], tokens: int, details: bool) -> tuple[list[TokenEvent], float]:
    config = DecodeConfig(method="specsteer", max_new_tokens=tokens, details=details)
    started = time.perf_counter()
    events = [event for event in generate_ids(pair, prompt, prompt, config) if not isinstance(event, Finished)]
    return events, time.perf_counter() - started


def render_seconds(events: list[TokenEvent]) -> tuple[float, int]:
    view = TokenHtml()
    html = ""
    started = time.perf_counter()
    for event in events:
        view.add(event)
        html = view.html
    return time.perf_counter() - started, len(html)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    pair = tiny_pair(seed=0, generalist_seed=1)
    prompt = pair.tokenizer.encode("Write a short review of a coffee grinder for someone who loves espresso.")
    timings: dict[str, dict[str, list[float]]] = {
        "off": {"render": [], "generate": []},
        "on": {"render": [], "generate": []},
    }
    sizes: dict[str, int] = {}
    counts: dict[str, int] = {}
    events_of(pair, prompt, args.tokens, True)  # warm
    for _ in range(args.repeats):
        for mode in ("off", "on"):
            events, generate_s = events_of(pair, prompt, args.tokens, mode == "on")
            render_s, size = render_seconds(events)
            counts[mode] = len(events)
            sizes[mode] = size
            timings[mode]["render"].append(render_s / len(events))
            timings[mode]["generate"].append(generate_s / len(events))
    result: dict = {"pair": "tiny-test fp32", "tokens_asked": args.tokens, "repeats": args.repeats}
    for mode in ("off", "on"):
        result[mode] = {
            "events": counts[mode],
            "render_us_per_event": statistics.median(timings[mode]["render"]) * 1e6,
            "generate_us_per_event": statistics.median(timings[mode]["generate"]) * 1e6,
            "html_bytes_per_event": sizes[mode] / counts[mode],
        }
    result["render_ratio_on_off"] = result["on"]["render_us_per_event"] / result["off"]["render_us_per_event"]
    result["generate_ratio_on_off"] = result["on"]["generate_us_per_event"] / result["off"]["generate_us_per_event"]
    result["load_average"] = os.getloadavg()
    result["cpus"] = os.cpu_count()
    print(json.dumps(result, indent=2))
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
