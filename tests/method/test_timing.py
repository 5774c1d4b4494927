"""The pause rule on synthetic step times (specsteer.method.timing): a step far beyond the generation's own in
which the process did not compute is a pause; honest waits, long computation and a busy machine are not."""

from __future__ import annotations

import pytest

from specsteer.method.timing import PauseRule, Step, StepClock, StepTimes, find_pauses


def computing(wall: float, count: int, share: float = 1.0) -> list[Step]:
    """``count`` steps of ``wall`` seconds in which the process computed ``share`` of the time."""
    return [Step(wall, share * wall) for _ in range(count)]


def test_steady_steps_have_no_pause():
    assert find_pauses(computing(0.05, 300)) == (0, 0.0)


def test_one_stopped_step_among_quick_ones_is_a_pause_of_its_excess():
    steps = computing(0.05, 100) + [Step(120.05, 0.04)] + computing(0.05, 100)
    pauses = find_pauses(steps)
    assert pauses.steps == 1
    assert pauses.seconds == pytest.approx(120.0)


def test_two_stops_are_two_pauses():
    steps = [*computing(0.01, 50), Step(30.0, 0.0), *computing(0.01, 50), Step(60.0, 0.01), *computing(0.01, 50)]
    assert find_pauses(steps).steps == 2


def test_a_long_prompt_read_is_computation_not_a_pause():
    # 40 s reading the prompt (every thread busy: CPU time beyond the wall), then quick decode steps
    steps = [Step(40.0, 75.0), *computing(0.05, 200)]
    assert find_pauses(steps).steps == 0


def test_waiting_on_a_remote_cloud_is_not_a_pause():
    # every verification waits 6 s on another machine while this process idles: wall far above CPU on
    # every such step, which is the generation's own scale, not a gap beyond it
    steps = []
    for _ in range(30):
        steps += [*computing(0.05, 4), Step(6.0, 0.01), *computing(0.0001, 4)]
    assert find_pauses(steps).steps == 0


def test_a_busy_machine_slows_every_step_alike_and_flags_nothing():
    # another process takes two thirds of the cores: steps three times longer, CPU a third of the wall
    steps = [Step(12.0, 4.0), *computing(0.6, 300, share=0.33)]
    assert find_pauses(steps).steps == 0


def test_an_idle_gap_shorter_than_the_floor_is_not_a_pause():
    steps = [*computing(0.001, 200), Step(4.0, 0.0), *computing(0.001, 200)]
    assert find_pauses(steps).steps == 0
    assert find_pauses(steps, PauseRule(min_step_s=2.0)).steps == 1


def test_a_gap_within_the_factor_of_the_generation_steps_is_not_a_pause():
    steps = [*computing(1.0, 100), Step(15.0, 0.0)]  # 15 s against 1 s steps: within 20x
    assert find_pauses(steps).steps == 0
    assert find_pauses(steps, PauseRule(factor=10.0)).steps == 1


def test_a_one_step_generation_stopped_in_its_step_is_a_pause():
    assert find_pauses([Step(90.0, 0.02), Step(0.001, 0.001)]).steps == 1
    assert find_pauses([]) == (0, 0.0)


class ScriptedClock:
    """Wall and CPU readings from lists, one per read."""

    def __init__(self, walls: list[float], cpus: list[float]) -> None:
        self.walls, self.cpus = iter(walls), iter(cpus)

    def clock(self) -> StepClock:
        return StepClock(wall=lambda: next(self.walls), cpu=lambda: next(self.cpus))


def test_step_times_closes_a_step_at_each_mark_and_returns_the_elapsed_wall():
    scripted = ScriptedClock([10.0, 10.5, 130.5, 131.0], [1.0, 1.4, 1.41, 1.9])
    steps = StepTimes(scripted.clock())
    assert [steps.mark(), steps.mark(), steps.mark()] == [0.5, 120.5, 121.0]
    assert steps.steps == [
        Step(0.5, pytest.approx(0.4)),
        Step(120.0, pytest.approx(0.01)),
        Step(0.5, pytest.approx(0.49)),
    ]
