"""A generation's step clock (specsteer.method.timing): a wall clock that jumps in the middle of a generation, as
a stopped process's does, marks it as a pause; the output is the same and the measured seconds are kept as
measured. Tiny fp32 pairs."""

from __future__ import annotations

import time

import pytest

from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate_ids
from specsteer.method.timing import StepClock

JUMP_S = 300.0


class JumpingClock:
    """The real clocks, with the wall clock jumping ``jump`` seconds ahead at its ``at``-th reading (the CPU
    clock does not: the process stood still)."""

    def __init__(self, at: int, jump: float = JUMP_S) -> None:
        self.at, self.jump, self.reads = at, jump, 0

    def wall(self) -> float:
        self.reads += 1
        return time.perf_counter() + (self.jump if self.reads >= self.at else 0.0)

    def clock(self) -> StepClock:
        return StepClock(wall=self.wall, cpu=time.process_time)


def run(pair, method: str, clock: StepClock | None = None):
    plain = pair.tokenizer.encode("Write about the weather and the sea.")
    private = pair.tokenizer.encode("History: I love long walks and strong coffee. ") + plain
    config = DecodeConfig(method=method, alpha=0.1, max_new_tokens=48)
    events = generate_ids(pair, plain, private, config, **({"clock": clock} if clock else {}))
    return collect(events)[1]


@pytest.mark.parametrize("method", ["specsteer", "slm+", "llm"])
def test_a_jump_in_the_wall_clock_mid_generation_is_a_pause(pair, method):
    steady = run(pair, method)
    clock = JumpingClock(at=4)  # the third event: mid-generation
    jumped = run(pair, method, clock.clock())
    assert clock.reads > 5 and len(steady.token_ids) >= 4
    assert jumped.token_ids == steady.token_ids  # the clock decides nothing about the output
    assert steady.stats.pauses == 0 and not steady.stats.timing_disturbed
    stats = jumped.stats
    assert stats.timing_disturbed and stats.pauses == 1
    assert stats.paused_s == pytest.approx(JUMP_S, abs=2.0)
    # the measured figures are kept as measured: the pause is in them, and the mark says so
    assert stats.seconds > JUMP_S and stats.tok_per_s == pytest.approx(stats.new_tokens / stats.seconds)


def test_a_jump_before_the_first_token_is_in_its_times_and_a_pause(pair):
    stats = run(pair, "specsteer", JumpingClock(at=2).clock()).stats
    assert stats.timing_disturbed
    assert stats.first_visible_s is not None and stats.first_visible_s > JUMP_S
