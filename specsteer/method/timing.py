"""Whether a generation's wall time is the time it computed: its step clock and the pause rule.

A generation's ``seconds`` is wall-clock time from the request to its end. A process that is stopped
in the middle (``kill -STOP``, a frozen container, a paused Space, a debugger) keeps that clock running,
and the minutes it stood still would become a speed figure. So the engine reads a :class:`StepClock` at
every event it yields and keeps each step's wall seconds and the CPU seconds this process spent in it
(:class:`StepTimes`), and :func:`find_pauses` judges the steps when the generation ends.

The rule (:class:`PauseRule`). A step is a pause when all three hold:

1. it is long: at least ``min_step_s`` (5 s) of wall time;
2. it is far beyond the generation's own steps: at least ``factor`` (20) times the 90th percentile of
   its other steps (so a long prompt read or a slow verification pass, which recur or are the cost of the
   method, set the scale rather than trip it);
3. the process hardly computed during it: its CPU time, every thread counted (``time.process_time``, so
   llama.cpp's native threads too), grew by less than ``max_cpu_share`` (10 %) of the step's wall time.

Why a gap and the CPU time together, rather than either alone:

* Wall time against CPU time alone would flag honest waits: an Edge waiting for a remote Cloud over HTTP,
  an emulated link's round trips, a machine shared with busy neighbours: in each the wall clock runs far
  ahead of this process's CPU time on every step. Per-thread CPU time (``time.thread_time``) would also
  miss the work done in llama.cpp's native threads.
* A gap alone would flag honest computation: a long prompt read in one pass, far beyond the decode steps
  after it. The CPU time shows that the process was computing.
* A machine that is merely busy slows every step alike, which moves the 90th percentile with them: no
  step stands out, nothing is flagged (its figures are slow, not wrong). A stopped process shows as one
  step, far beyond the rest, in which it did not compute at all.

A wait on a remote Cloud that stalls for as long (its process stopped, or its queue) reads as a pause too:
the figure would not be the method's speed either.

The clock. ``time.perf_counter`` is ``CLOCK_MONOTONIC`` on Linux, which stops while the machine is
suspended: a laptop that sleeps adds nothing to the step in flight there (``CLOCK_BOOTTIME`` would count
the sleep, which is not time computed). A stopped process or a frozen cgroup does not stop it, and that is
what this rule catches; on a system whose clock counts sleep, a sleep shows as the same kind of step.

What is done with a pause: the generation is marked (``GenerationStats.pauses``, ``paused_s``) and its
measured times are kept as measured. It is not re-timed by subtracting the gap: the step the stop fell in
computed for an unknown part of it, and the steps after a long stop run on cold caches. Every speed figure
leaves a disturbed generation out and says how many it left out; its quality figures keep it
(``specsteer.evaluation.timing``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple


@dataclass(frozen=True)
class StepClock:
    """What a generation reads its times from: the wall clock, and this process's CPU time (every thread).
    Tests inject clocks that jump."""

    wall: Callable[[], float] = time.perf_counter
    cpu: Callable[[], float] = time.process_time


SYSTEM_CLOCK = StepClock()


class Step(NamedTuple):
    """One step of a generation: the wall seconds from the previous event to this one, and the CPU seconds
    the process spent meanwhile."""

    wall_s: float
    cpu_s: float


class StepTimes:
    """A generation's steps as they happen: :meth:`mark` at each event closes the step that ends there."""

    def __init__(self, clock: StepClock = SYSTEM_CLOCK) -> None:
        self.clock = clock
        self.started = clock.wall()
        self._wall, self._cpu = self.started, clock.cpu()
        self.steps: list[Step] = []

    def mark(self) -> float:
        """Close the step that ends now; the wall seconds since the start."""
        wall, cpu = self.clock.wall(), self.clock.cpu()
        self.steps.append(Step(wall - self._wall, cpu - self._cpu))
        self._wall, self._cpu = wall, cpu
        return wall - self.started


@dataclass(frozen=True)
class PauseRule:
    """When a step is a pause (see the module doc): all three thresholds at once."""

    min_step_s: float = 5.0
    factor: float = 20.0
    quantile: float = 0.9  # of the other steps' wall times: what a step of this generation takes
    max_cpu_share: float = 0.1


PAUSE_RULE = PauseRule()


class Pauses(NamedTuple):
    """The pauses found in a generation's steps: how many steps were pauses, and their wall seconds beyond a
    typical step."""

    steps: int
    seconds: float


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile of ascending values; 0 for none."""
    if not sorted_values:
        return 0.0
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def find_pauses(steps: Sequence[Step], rule: PauseRule = PAUSE_RULE) -> Pauses:
    """The steps the rule judges as pauses (a pure function of the steps; see the module doc)."""
    walls = sorted(step.wall_s for step in steps)
    count, seconds = 0, 0.0
    for step in steps:
        if step.wall_s < rule.min_step_s or step.cpu_s >= rule.max_cpu_share * step.wall_s:
            continue
        others = list(walls)
        others.remove(step.wall_s)
        typical = _quantile(others, rule.quantile)
        if step.wall_s >= rule.factor * typical:
            count += 1
            seconds += step.wall_s - typical
    return Pauses(count, seconds)
