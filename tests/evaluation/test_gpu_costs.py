"""specsteer.evaluation.gpu_costs (benchmarks/gpu_costs.py, over gpu_shapes and gpu_timing) on tiny shapes on the CPU,
and the deployment profile specsteer.evaluation.gpu_profile makes of it."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from specsteer.cli import gpu_profile as gpu_profile_cli
from specsteer.data.sources import EXAMPLE_RUNS_DB
from specsteer.evaluation import gpu_costs, gpu_profile, gpu_shapes, gpu_timing
from specsteer.evaluation.deployment import GENERALIST, GENERIC, NO_HOST_OVERHEAD, SPECIALIST, MeasuredRun, project_runs
from specsteer.evaluation.deployment_profiles import get_profile
from specsteer.evaluation.deployment_rows import DEFAULT_RUNS, group_runs, projection_rows
from specsteer.evaluation.gpu_profile import MeasuredPassCost, load_costs, measured_cloud_profile, parse_costs
from specsteer.method.events import TraceStep

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu_costs.py"


@pytest.fixture(scope="module")
def dry_run(gpu_costs_dry_run) -> tuple[Path, dict]:
    """The session's one real run of the script (tests/conftest.py)."""
    return gpu_costs_dry_run


# --------------------------------------------------------------------------- the script's JSON


@pytest.mark.slow  # the dry run fixture: a subprocess that imports torch and transformers
def test_the_dry_run_writes_every_measurement_with_its_statistics(dry_run):
    _, data = dry_run
    script = gpu_costs
    settings = script.TINY
    assert data["schema"] == "specsteer.gpu_costs/1"
    assert data["dry_run"] is True and data["complete"] is True and data["finished"] is True
    assert data["device"]["kind"] == "cpu" and data["device"]["name"]
    assert data["dtype"] == "bfloat16" and data["attn_implementation"] == "sdpa"
    import torch
    import transformers

    assert (data["torch"], data["transformers"]) == (torch.__version__, transformers.__version__)
    assert data["pairs"] == [{"pair": "qwen3", "small": "Qwen3-0.6B", "large": "Qwen3-32B"}]
    assert sorted(data["models"]) == ["Qwen3-0.6B", "Qwen3-32B"]
    for model in data["models"].values():
        assert model["tiny"] is True and model["error"] is None and model["skipped"] == []
        # The built model has exactly the parameters its shape says (the shape table is what is timed).
        assert model["parameters"] == model["parameters_from_shape"] > 0
        assert [row["context"] for row in model["decode"]] == list(settings.contexts)
        assert all(row["tokens"] == 1 for row in model["decode"])
        expected = [(c, k, k + 1) for c in settings.contexts for k in settings.ks]
        assert [(row["context"], row["k"], row["tokens"]) for row in model["verify"]] == expected
        assert [row["tokens"] for row in model["prefill"]] == list(settings.prompt_lengths)
        for row in model["decode"] + model["verify"] + model["prefill"]:
            assert 1 <= row["reps"] <= max(settings.pass_reps, settings.prefill_reps)
            assert 0 < row["min_s"] <= row["median_s"] <= row["p90_s"]
            assert row["min_s"] <= row["mean_s"]
        for row in model["prefill"]:
            assert row["tok_per_s"] == pytest.approx(row["tokens"] / row["median_s"])
    # The large model of a pair is the wider and deeper one, as in the real pair.
    assert data["models"]["Qwen3-32B"]["parameters"] > data["models"]["Qwen3-0.6B"]["parameters"]
    table = script.markdown_table(data).splitlines()
    assert "DRY RUN" in table[0]
    assert len([line for line in table if line.startswith("| ") and "context" not in line]) == 2 * len(
        settings.contexts
    )


def test_a_spent_budget_stops_cleanly_and_still_writes_the_json(tmp_path):
    out = tmp_path / "costs.json"
    script = gpu_costs
    assert (
        script.main(["--device", "cpu", "--tiny", "--pairs", "llama3", "--max-seconds", "1e-9", "--out", str(out)]) == 0
    )
    data = json.loads(out.read_text())
    assert data["finished"] is True and data["complete"] is False
    assert data["models"] == {}
    assert data["skipped"] == ["Llama-3.1-8B: the time budget was spent", "Llama-3.2-1B: the time budget was spent"]


def test_repetitions_stop_at_the_budget_and_at_the_unit_time():
    script = gpu_timing

    class Clock:
        def __init__(self, left_for: int):
            self.calls, self.left_for = 0, left_for

        def spent(self) -> bool:
            return self.calls >= self.left_for

    timer = script.Timer(None, "cpu")
    clock = Clock(left_for=4)

    def call():
        clock.calls += 1

    times = script.repeat(timer, call, lambda: None, 2, 50, 1, 1e9, clock)
    assert len(times) == 2  # two warm-ups, then two timed calls before the budget says spent
    unit = script.repeat(timer, lambda: None, lambda: None, 0, 50, 3, -1.0, Clock(left_for=10**9))
    assert len(unit) == 3  # the unit's time is up at once: only the minimum


def test_quantiles_and_the_shape_table():
    timing, shapes = gpu_timing, gpu_shapes
    assert timing.quantile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert timing.quantile([1.0, 2.0, 3.0, 4.0], 0.9) == pytest.approx(3.7)
    # The parameter counts the published model cards give (to their rounding).
    counts = {name: shape.parameters() / 1e9 for name, shape in shapes.SHAPES.items()}
    assert counts["Qwen3-0.6B"] == pytest.approx(0.596, abs=0.005)
    assert counts["Qwen3-32B"] == pytest.approx(32.8, abs=0.05)
    assert counts["Qwen2.5-1.5B"] == pytest.approx(1.54, abs=0.01)
    assert counts["Qwen2.5-32B"] == pytest.approx(32.76, abs=0.05)
    assert counts["Llama-3.2-1B"] == pytest.approx(1.24, abs=0.01)
    assert counts["Llama-3.1-8B"] == pytest.approx(8.03, abs=0.01)
    assert all("config.json" in shape.source for shape in shapes.SHAPES.values())


# --------------------------------------------------------------------------- the profile made of it


@pytest.mark.slow
def test_the_profile_from_the_dry_run_charges_exactly_the_measured_medians(dry_run):
    path, data = dry_run
    costs = load_costs(path)
    profile = gpu_profile.profile_from_file(path, "qwen3", "paper")
    paper = get_profile("paper")
    context = gpu_profile.choose_context(costs, ("Qwen3-0.6B", "Qwen3-32B"))
    assert context in data["settings"]["contexts"]
    for role, name in ((GENERALIST, "Qwen3-32B"), (GENERIC, "Qwen3-0.6B")):
        model = data["models"][name]
        rows = [r for r in model["decode"] + model["verify"] if r["context"] == context]
        assert len(rows) == 9
        for row in rows:
            assert profile.cost(role).seconds(row["tokens"], first=False) == row["median_s"]
        for row in model["prefill"]:
            assert profile.cost(role).seconds(row["tokens"], first=True) == row["median_s"]
        decode_source = profile.source(f"{role}.decode")
        assert "DRY RUN" in decode_source and str(path) in decode_source and name in decode_source
    # The device side, the link and the Cloud's parallelism are the published profile's, sources and all.
    assert profile.specialist == paper.specialist and profile.link == paper.link
    assert profile.cloud_parallel == paper.cloud_parallel
    for number in ("specialist.decode", "specialist.prefill", "link.rtt_ms", "cloud_parallel"):
        assert profile.source(number) == paper.source(number)
    assert profile.generalist != paper.generalist


def test_the_profile_equals_the_json_on_a_hand_made_measurement():
    def timing(seconds: float) -> dict:
        return {"reps": 7, "median_s": seconds, "p90_s": seconds * 1.2, "min_s": seconds, "mean_s": seconds}

    def model(base: float, slope: float) -> dict:
        return {
            "shape_source": "config.json",
            "decode": [{"context": c, "tokens": 1, **timing(base + slope)} for c in (512, 2048)],
            "verify": [
                {"context": c, "k": k, "tokens": k + 1, **timing(base + slope * (k + 1) + (0.001 if k == 3 else 0))}
                for c in (512, 2048)
                for k in range(1, 9)
            ],
            "prefill": [{"tokens": n, **timing(0.002 + n * slope)} for n in (128, 2048)],
        }

    data = {
        "schema": "specsteer.gpu_costs/1",
        "device": {"name": "Some GPU"},
        "torch": "t",
        "transformers": "x",
        "dtype": "bfloat16",
        "pairs": [{"pair": "llama3", "small": "Llama-3.2-1B", "large": "Llama-3.1-8B"}],
        "models": {"Llama-3.1-8B": model(0.02, 0.0004), "Llama-3.2-1B": model(0.006, 0.0001)},
    }
    profile = measured_cloud_profile(parse_costs(data), "llama3", "phone-4g", context=2048)
    generalist = profile.cost(GENERALIST)
    assert generalist.seconds(1, False) == pytest.approx(0.0204)
    assert generalist.seconds(4, False) == pytest.approx(0.02 + 0.0016 + 0.001)  # the bump at k = 3 is kept
    assert generalist.seconds(9, False) == pytest.approx(0.0236)
    assert generalist.seconds(11, False) == pytest.approx(0.0236 + 2 * generalist.decode.per_token_s)
    assert generalist.seconds(1088, True) == pytest.approx(0.002 + 1088 * 0.0004)  # between the prompt lengths
    assert profile.cost(GENERIC).seconds(5, False) == pytest.approx(0.0065)
    assert profile.cost(SPECIALIST) == get_profile("phone-4g").specialist
    assert "Some GPU" in profile.label and "DRY RUN" not in profile.source("generalist.decode")
    # The fitted line under the table keeps the measured total (least squares with an intercept).
    sizes = range(1, 10)
    line = generalist.decode
    assert sum(line.base_s + line.per_token_s * n for n in sizes) == pytest.approx(
        sum(generalist.seconds(n, False) for n in sizes)
    )


def test_a_measured_pass_cost_interpolates_and_extends_along_the_line():
    cost = MeasuredPassCost.from_points([(1, 0.010), (3, 0.014), (5, 0.016)])
    assert cost.seconds(2) == pytest.approx(0.012)
    assert cost.seconds(4) == pytest.approx(0.015)
    assert cost.seconds(7) == pytest.approx(0.016 + 2 * cost.per_token_s)
    assert cost.per_token_s == pytest.approx(0.0015)
    assert cost.seconds(0) == pytest.approx(0.010 - cost.per_token_s)
    with pytest.raises(ValueError, match="distinct"):
        MeasuredPassCost(0.0, 0.0, ((3, 0.1), (1, 0.1)))
    with pytest.raises(ValueError, match="positive"):
        MeasuredPassCost(0.0, 0.0, ((1, 0.0),))


@pytest.mark.slow
def test_what_cannot_be_used_is_refused_with_a_reason(dry_run):
    _, data = dry_run
    with pytest.raises(ValueError, match="schema"):
        parse_costs({**data, "schema": "other"})
    broken = json.loads(json.dumps(data))
    broken["models"]["Qwen3-32B"]["verify"][0]["median_s"] = -1.0
    with pytest.raises(ValueError, match="positive"):
        parse_costs(broken)
    costs = parse_costs(data)
    with pytest.raises(ValueError, match="was not measured"):
        measured_cloud_profile(costs, "llama3")
    with pytest.raises(ValueError, match="context 3"):
        measured_cloud_profile(costs, "qwen3", context=3)
    with pytest.raises(ValueError, match="unknown deployment profile"):
        measured_cloud_profile(costs, "qwen3", "nowhere")
    lacking = json.loads(json.dumps(data))
    del lacking["models"]["Qwen3-0.6B"]
    with pytest.raises(ValueError, match="no measurements of Qwen3-0.6B"):
        measured_cloud_profile(parse_costs(lacking), "qwen3")


@pytest.mark.slow
def test_a_dry_run_reads_and_says_what_it_is(dry_run):
    costs = load_costs(dry_run[0])
    assert costs.dry_run and "not a GPU figure" in costs.describe()
    profile = measured_cloud_profile(costs, "qwen3", "paper")
    assert all(math.isfinite(profile.cost(role).seconds(5, False)) for role in (GENERALIST, GENERIC))


# --------------------------------------------------------------------------- the command


@pytest.mark.slow
def test_the_command_projects_the_example_traces_with_both_profiles(dry_run, capsys):
    """With no --database, the example runs' LongLaMP grid (assets/example_runs.db, read-only) is projected."""
    path, _ = dry_run
    argv = [str(path), "--rtt-ms", "0,50", "--json"]
    assert gpu_profile_cli.main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["dry_run"] is True and result["pair"]["large"] == "Qwen3-32B"
    from specsteer.cli.bench import _stored_runs

    runs = _stored_runs(str(EXAMPLE_RUNS_DB), list(DEFAULT_RUNS))
    published = projection_rows(group_runs(runs), get_profile("paper"), [0.0, 50.0])
    measured = measured_cloud_profile(load_costs(path), "qwen3", "paper", origin=str(path))
    rows = result["projection"]
    assert len(rows) == len(published) > 0
    for row, expected in zip(rows, published):
        assert (row["method"], row["rtt_ms"]) == (expected["method"], expected["rtt_ms"])
        assert row["published_tok_per_s"] == pytest.approx(expected["projected_tok_per_s"])
    llm = [run for run in runs if run.method == "llm"]
    at_zero = next(row for row in rows if row["method"] == "llm" and row["rtt_ms"] == 0.0)
    assert at_zero["gpu_measured_tok_per_s"] == pytest.approx(project_runs(llm, measured).tok_per_s)
    assert {c["role"] for c in result["costs"]} == {GENERALIST, GENERIC}


def test_the_command_refuses_a_file_that_is_not_a_measurement(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "nope"}))
    assert gpu_profile_cli.main([str(bad), "--no-projection"]) == 2
    assert "schema" in capsys.readouterr().err


@pytest.mark.slow
def test_a_trace_step_list_projects_under_the_measured_profile(dry_run):
    """A hand-made SpecSteer-like round: the projection charges the measured verify pass."""
    path, data = dry_run
    profile = measured_cloud_profile(load_costs(path), "qwen3", "paper")
    context = gpu_profile.choose_context(load_costs(path), ("Qwen3-0.6B", "Qwen3-32B"))
    trace = [
        TraceStep("forward", "generalist", 100, 0.0),  # the prompt's prefill
        TraceStep("message", "uplink", 40, 0.0),  # a draft arrives (no link in the paper's setting)
        TraceStep("forward", "generalist", 5, 0.0),  # a round verifying k = 4
    ]
    verify = next(r for r in data["models"]["Qwen3-32B"]["verify"] if r["context"] == context and r["k"] == 4)
    passes = profile.cost(GENERALIST).seconds(100, True) + verify["median_s"]
    no_host = replace(profile, edge_host=NO_HOST_OVERHEAD, cloud_host=NO_HOST_OVERHEAD)
    assert project_runs([MeasuredRun(trace, 0.0, 5)], no_host).seconds == pytest.approx(passes)
    # the base profile's host overhead on top: the Cloud's 1 + 5 logits rows (the Edge's message, and the host
    # time it costs the Edge, arrive while the Cloud is still reading its prompt)
    host = 6 * profile.cloud_host.per_row_s
    assert project_runs([MeasuredRun(trace, 0.0, 5)], profile).seconds == pytest.approx(passes + host)


@pytest.mark.slow
def test_the_real_shapes_build_the_published_models_on_the_meta_device():
    """Each real shape, built as the script builds it but on the meta device (no memory), has the
    parameter count its shape gives and the one its model card publishes."""
    import torch
    import transformers

    script = gpu_shapes
    published = {  # parameters, to the model cards' rounding
        "Qwen3-0.6B": 0.6e9,
        "Qwen3-32B": 32.8e9,
        "Qwen2.5-1.5B": 1.54e9,
        "Qwen2.5-32B": 32.5e9,
        "Llama-3.2-1B": 1.24e9,
        "Llama-3.1-8B": 8.03e9,
    }
    for name, shape in script.SHAPES.items():
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(script.model_config(shape, transformers))
        built = sum(p.numel() for p in model.parameters())
        assert built == shape.parameters(), name
        assert built == pytest.approx(published[name], rel=0.02), name
