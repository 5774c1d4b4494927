"""When an in-process Cloud reads its session's prompts: the read-ahead policy, in one place.

* ``off``: each Cloud stream reads its prompt with the first Draft (one pass fewer per stream).
* ``concurrent``: the Cloud reads its prompts in a thread of its own from the Open on, while the Edge
  reads its private prompt, as two machines do. On a CPU both sides' runtimes use every core, so the
  two readings share them and the Edge's first draft comes later.
* ``after-first-draft``: the same thread waits until the Edge has drafted its first token (its prompt
  read; the engine says so with ``Link.edge_ready``, a hint that crosses no wire), then reads while the
  Edge drafts on. Any request that needs the prompts read (the first Draft, a token stream), the close
  and the session's end release it too, so no method waits for a hint that never comes.

A Cloud on another machine (``specsteer cloud``) reads when its own settings say; the hint never reaches it.
"""

from __future__ import annotations

from typing import Literal, cast

ReadAhead = Literal["off", "concurrent", "after-first-draft"]
READ_AHEAD_MODES: tuple[ReadAhead, ...] = ("off", "concurrent", "after-first-draft")
# What the app and ``specsteer generate`` use, from a measurement on a quiet 2-core AVX2 machine
# (docs/research/MEASUREMENTS.md, benchmarks/results/bench_read_ahead.json): SpecSteer's first visible token 0.86x (llama.cpp) and
# 0.71x (transformers) of ``concurrent``'s, its first verified token and tokens/s within the run's noise.
DEFAULT_READ_AHEAD: ReadAhead = "after-first-draft"


def read_ahead_mode(value: ReadAhead | bool) -> ReadAhead:
    """A policy from its name, or from the older flag (True: ``concurrent``, False: ``off``)."""
    if value is True:
        return "concurrent"
    if value is False:
        return "off"
    if value not in READ_AHEAD_MODES:
        raise ValueError(f"read-ahead must be one of {', '.join(READ_AHEAD_MODES)}, not {value!r}")
    return cast(ReadAhead, value)


def parse_read_ahead(text: str) -> list[ReadAhead]:
    """Comma-separated policies (``off,after-first-draft``), each once, in the order given."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise ValueError(f"name at least one read-ahead mode: {', '.join(READ_AHEAD_MODES)}")
    return list(dict.fromkeys(read_ahead_mode(cast(ReadAhead, name)) for name in names))
