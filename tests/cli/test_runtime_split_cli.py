"""``--runtime transformers/llama.cpp`` in every command that takes a runtime: one spelling (runtimes.base
.check_runtime), the split pair of tiny models generating through ``generate``, served by ``cloud``, and the
same refusal everywhere when the split's token ids disagree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from models.test_runtime_plan import _split_pair, cache, gguf_dir  # noqa: F401 -- the fixtures

from specsteer import cli
from specsteer.cli import bench as bench_cli
from specsteer.cli import cloud as cloud_cli
from specsteer.cli import evaluate as evaluate_cli
from specsteer.cli import generate as generate_cli
from specsteer.evaluation.grid import EvalSpec
from specsteer.models import loading
from specsteer.models.pair import assemble_pair
from specsteer.models.registry import DEFAULT_PAIRING
from specsteer.runtimes.base import check_runtime

SAMPLE = Path(__file__).resolve().parents[2] / "assets" / "samples" / "review_user.jsonl"


@pytest.mark.parametrize(
    "name", ["auto", "llama.cpp", "transformers", "transformers/llama.cpp", "llama.cpp/transformers"]
)
def test_the_one_spelling_accepts_a_runtime_auto_and_a_split(name):
    assert check_runtime(name) == name


@pytest.mark.parametrize(
    "name", ["cuda", "auto/llama.cpp", "transformers/", "a/b", "transformers/llama.cpp/x", "", None, 3, ["auto"]]
)
def test_the_one_spelling_refuses_the_rest_saying_what_is_accepted(name):
    with pytest.raises(ValueError, match="or a split such as transformers/llama.cpp"):
        check_runtime(name)


def test_every_command_parses_the_split_and_refuses_a_bad_name_the_same_way(capsys):
    split = "transformers/llama.cpp"
    generate_parser, cloud_parser = generate_cli.build_parser(), cloud_cli.build_parser()
    common = ["--history", "h", "--task", "review", "--input", "x"]
    assert generate_parser.parse_args(["generate", *common, "--runtime", split]).runtime == split
    assert cloud_parser.parse_args(["cloud", "--runtime", split]).runtime == split
    assert (
        evaluate_cli.build_parser().parse_args(["--data", "sample", "--task", "review", "--runtime", split]).runtime
        == split
    )
    assert bench_cli._runtimes(f"auto,{split}") == ["auto", split]
    refusals = []
    for parser, argv in (
        (generate_parser, ["generate", *common, "--runtime", "gpu"]),
        (cloud_parser, ["cloud", "--runtime", "gpu"]),
    ):
        with pytest.raises(SystemExit):
            parser.parse_args(argv)
        refusals.append(capsys.readouterr().err)
    with pytest.raises(SystemExit):
        evaluate_cli.build_parser().parse_args(["--data", "sample", "--task", "review", "--runtime", "gpu"])
    refusals.append(capsys.readouterr().err)
    with pytest.raises(SystemExit):
        bench_cli.main(["speed", "--runtime", "auto,gpu"])
    refusals.append(capsys.readouterr().err)
    for err in refusals:
        assert "unknown runtime 'gpu'; choose one of auto, llama.cpp, transformers, or a split" in err
    # The grid's spec (the Dashboard's form and evaluate) says the same.
    with pytest.raises(ValueError, match="unknown runtime 'gpu'"):
        EvalSpec(data="x", task="review", runtime="gpu").validate()


@pytest.fixture
def split_loads(cache, gguf_dir, monkeypatch):  # noqa: F811 -- the imported fixtures
    """``load_pair`` of the default pairing assembles the tiny split pair instead of reading the real files;
    ``refuse`` swaps two of the Generalist's token texts, so the split's ids disagree."""
    pair, generalist = _split_pair(gguf_dir)
    texts = generalist.token_texts()
    state = {"refuse": False, "loaded": []}

    def fake_load(pairing, planned, *args, **kwargs):
        runtimes = tuple(model.runtime for model in planned)
        state["loaded"].append(runtimes)
        swapped = [texts[1], texts[0], *texts[2:]] if state["refuse"] else texts
        monkeypatch.setattr(generalist, "token_texts", lambda: swapped)
        large = generalist if len(runtimes) > 1 else None
        return assemble_pair(pairing.id, pair.specialist, large, pair.tokenizer)

    monkeypatch.setattr(loading, "_load_pair_uncached", fake_load)
    loading.clear_loaded_pairs()
    yield state
    loading.clear_loaded_pairs()


def _generate(*extra):
    return cli.main(
        [
            "generate",
            "--pairing",
            DEFAULT_PAIRING,
            "--history",
            str(SAMPLE),
            "--task",
            "review",
            "--input",
            "Write a review of the Aurora wireless earbuds.",
            "--max-new-tokens",
            "8",
            "--runtime",
            "transformers/llama.cpp",
            *extra,
        ]
    )


def test_generate_runs_the_split_asked_for_and_its_stats_name_both_runtimes(split_loads, capsys):
    assert _generate("--json") == 0
    stats = json.loads(capsys.readouterr().out)["stats"]
    assert split_loads["loaded"] == [("transformers", "llama.cpp")]
    assert stats["runtime"] == "transformers/llama.cpp"
    assert stats["stream_runtimes"]["specialist+"].startswith("transformers")
    assert stats["stream_runtimes"]["generalist"].startswith("llama.cpp")


def test_cloud_loads_the_split_asked_for(split_loads):
    args = cloud_cli.build_parser().parse_args(
        ["cloud", "--pairing", DEFAULT_PAIRING, "--runtime", "transformers/llama.cpp"]
    )
    pair = cloud_cli._cloud_pair(args)
    assert not isinstance(pair, int) and pair.runtime == "transformers/llama.cpp"


def test_a_split_that_cannot_load_is_refused_the_same_way_by_generate_cloud_and_evaluate(split_loads, capsys, tmp_path):
    split_loads["refuse"] = True
    assert _generate() == 1
    message = capsys.readouterr().err
    assert "disagree on 2 of 259 ids" in message and "cannot run on llama.cpp beside a transformers" in message
    args = cloud_cli.build_parser().parse_args(
        ["cloud", "--pairing", DEFAULT_PAIRING, "--runtime", "transformers/llama.cpp"]
    )
    assert cloud_cli._cloud_pair(args) == 1
    assert "disagree on 2 of 259 ids" in capsys.readouterr().err
    code = evaluate_cli.main(
        [
            "--data",
            "sample",
            "--task",
            "review",
            "--limit",
            "1",
            "--methods",
            "slm+",
            "--pairing",
            DEFAULT_PAIRING,
            "--runtime",
            "transformers/llama.cpp",
            "--max-new-tokens",
            "4",
            "--database",
            f"sqlite:///{tmp_path / 'runs.db'}",
        ]
    )
    assert code == 1
    assert "disagree on 2 of 259 ids" in capsys.readouterr().err
