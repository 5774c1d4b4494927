"""Compare's progress line: the output in progress, its tokens, the seconds elapsed on it and in all, and the
calibration's estimate (or why there is none); Submit stays off until the comparison is saved. Pure: the
service's events are built here and the clock is a counter (one second per reading)."""

from __future__ import annotations

import itertools
import re

from specsteer.engine.settings import GenerationSettings
from specsteer.method.events import TokenEvent
from specsteer.service.events import ComparisonStarted, Generating, Token
from ui.compare_handlers import comparison_frames

LINE = re.compile(
    r"Generating output (\w) \((\d) of 2\) · (\d+) of 96 tokens · (\d+) s on this output, (\d+) s elapsed in all"
)


def statuses(estimate_s):
    readings = itertools.count(100)
    settings = GenerationSettings(pairing="tiny-test", max_new_tokens=96)
    events = [
        ComparisonStarted(settings, ("slm", "llm"), True),
        Generating("slm", "transformers", "fp32", 0, 2, estimate_s),
        *(Token(TokenEvent(5, "a", "plain", 0), 0) for _ in range(8)),  # the throttle publishes the 8th at least
        Generating("llm", "transformers", "fp32", 1, 2, estimate_s),
    ]
    shown = list(comparison_frames(events, list, clock=lambda: float(next(readings))))
    assert shown[0].submit["interactive"] is False  # nothing to judge while outputs come
    return [str(frame.status) for frame in shown[1:]]


def test_the_status_line_counts_tokens_and_seconds_and_gives_the_estimate():
    lines = statuses(95.0)
    parsed = [LINE.search(line) for line in lines]
    assert all(parsed), lines
    values = [(m.group(1), int(m.group(3)), int(m.group(4)), int(m.group(5))) for m in parsed if m]
    assert values[0][:2] == ("A", 0)
    output_a = [value for value in values if value[0] == "A"]
    assert output_a[-1][1] == 8 and output_a[-1][2] > 0  # all of A's tokens, seconds counted on it
    output_b = next(value for value in values if value[0] == "B")
    assert output_b[1] == 0 and output_b[3] > output_b[2]  # B's own seconds, the whole run's beside them
    assert all(total >= own for _, _, own, total in values)
    assert all("estimated ≈ 95 s for all 2 outputs (this machine&#x27;s calibration" in line for line in lines)


def test_without_a_calibration_the_line_says_there_is_no_estimate():
    assert all("no estimate: this pairing was not calibrated on this machine" in line for line in statuses(None))
