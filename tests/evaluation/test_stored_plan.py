"""evaluate and bench store the plan they loaded (each stream's runtime and the reasons), read back by the
Dashboard and the summaries; runs stored before plans (a plain runtime string) still read and resume."""

from __future__ import annotations

from dataclasses import replace

import pytest
from models.test_runtime_plan import PROMPT_HEAVY, _save, _split_pair, cache, gguf_dir  # noqa: F401 -- fixtures

import storage
from specsteer.data.sources import bundled_sample_path
from specsteer.evaluation.bench_report import auto_rows
from specsteer.evaluation.grid import EvalSpec, open_or_resume, run_config, run_grid
from specsteer.models import loading
from specsteer.models.calibration import RuntimeChoice
from specsteer.models.pair import assemble_pair
from specsteer.models.registry import DEFAULT_PAIRING
from specsteer.models.runtime_plan import PLAN_KEY, RuntimePlan, StoredPlan, plan_record
from specsteer.models.tiny import tiny_pair
from specsteer.service.evaluation_runs import run_label, runtime_note

SAMPLE = str(bundled_sample_path("review"))
FAST = EvalSpec(data=SAMPLE, task="review", methods=("slm+",), alphas=(1.0,), max_new_tokens=3, retrieval_k=1, limit=1)
SPLIT = RuntimePlan(RuntimeChoice("transformers", "reads faster"), RuntimeChoice("llama.cpp", "steps faster"))

pytestmark = pytest.mark.usefixtures("fresh_engines")


def test_a_stored_plan_reads_back_from_every_shape_stored():
    new = StoredPlan.read({"runtime": "transformers/llama.cpp", PLAN_KEY: plan_record(SPLIT)})
    assert (new.runtime, new.specialist, new.generalist) == ("transformers/llama.cpp", "transformers", "llama.cpp")
    assert "reads faster" in new.reason and "steps faster" in new.reason
    assert new.describe().startswith("transformers/llama.cpp (Specialist pair transformers, Generalist llama.cpp): ")
    old = StoredPlan.read({"runtime": "llama.cpp"})  # before plans: a plain string
    assert (old.runtime, old.specialist, old.generalist, old.reason) == ("llama.cpp", "llama.cpp", "llama.cpp", "")
    assert old.describe() == "llama.cpp"
    old_split = StoredPlan.read({"runtime": "transformers/llama.cpp"})
    assert old_split.mixed and old_split.generalist == "llama.cpp"
    assert StoredPlan.read({}).runtime == "transformers"  # before the runtime choice
    assert StoredPlan.read({"runtime": plan_record(SPLIT)}).generalist == "llama.cpp"  # a record as the value
    assert new.reader == old.reader == ""
    handed = RuntimePlan.uniform(RuntimeChoice("llama.cpp", "measured", prompt_reader="transformers"))
    assert StoredPlan.read({"runtime": "llama.cpp", PLAN_KEY: plan_record(handed)}).reader == "transformers fp32"
    # a record stored before the reader's dtype was: the fp32 reader, the only one there was
    before = plan_record(handed)
    del before["specialist_pair"]["prompt_reader_dtype"]  # type: ignore[attr-defined]
    assert StoredPlan.read({"runtime": "llama.cpp", PLAN_KEY: before}).reader == "transformers fp32"
    bf16 = RuntimePlan.uniform(
        RuntimeChoice("llama.cpp", "measured", prompt_reader="transformers", reader_dtype="bf16")
    )
    assert StoredPlan.read({"runtime": "llama.cpp", PLAN_KEY: plan_record(bf16)}).reader == "transformers bf16"


def test_the_dashboard_names_the_runtime_of_old_and_new_runs():
    from datetime import UTC, datetime

    def stored(config):
        now = datetime.now(UTC)
        return storage.StoredRun(1, "r", config, "finished", None, now, now, 2)

    assert "· llama.cpp · finished ·" in run_label(stored({"task": "review", "runtime": "llama.cpp"}))
    new = {"task": "review", "runtime": SPLIT.runtime, PLAN_KEY: plan_record(SPLIT)}
    assert "· transformers/llama.cpp · finished ·" in run_label(stored(new))
    assert runtime_note(new).startswith("Runtime: transformers/llama.cpp (Specialist pair transformers")
    assert "reads faster" in runtime_note(new)


def test_a_run_stores_the_plan_of_the_pair_it_ran_on_and_resumes_a_run_stored_before_plans(url):
    pair = replace(tiny_pair(), runtime_plan=RuntimePlan.uniform(RuntimeChoice("transformers", "asked for")))
    store = storage.SqlRunStore(url)
    result = run_grid(replace(FAST, run_name="planned"), store, pair=pair)
    config = storage.get_run_by_name("planned", url=url).config
    assert config["runtime"] == "transformers" and config[PLAN_KEY]["reason"] == "asked for"
    # Resumed on a machine whose reasons read otherwise: the same run, its record kept as stored.
    again = replace(pair, runtime_plan=RuntimePlan.uniform(RuntimeChoice("transformers", "measured since")))
    assert run_grid(replace(FAST, run_name="planned"), store, pair=again).run_id == result.run_id
    assert storage.get_run_by_name("planned", url=url).config[PLAN_KEY]["reason"] == "asked for"
    # A run stored before plans (no record) resumes too; another runtime is still refused.
    spec = replace(FAST, run_name="old")
    old = run_config(spec, pair.pairing_id, pair.runtime, pair.precision, 1)
    run_id = store.open_run("old", old)
    assert run_grid(spec, store, pair=pair).run_id == run_id
    assert PLAN_KEY not in storage.get_run_by_name("old", url=url).config
    other = run_config(spec, pair.pairing_id, SPLIT.runtime, pair.precision, 1, plan=SPLIT)
    with pytest.raises(ValueError, match="different config"):
        open_or_resume(store, "old", other)


def test_a_resume_whose_prompt_hand_off_differs_from_the_runs_is_refused_with_the_way_out(url):
    store = storage.SqlRunStore(url)
    spec = replace(FAST, run_name="handed")
    alone = RuntimePlan.uniform(RuntimeChoice("llama.cpp", "measured"))
    handed = RuntimePlan.uniform(RuntimeChoice("llama.cpp", "measured", prompt_reader="transformers"))
    run_id = open_or_resume(store, "handed", run_config(spec, "p", "llama.cpp", None, 1, plan=handed))
    # the same plan (other words for its reasons) resumes; the stored record is kept
    reworded = RuntimePlan.uniform(RuntimeChoice("llama.cpp", "measured again", prompt_reader="transformers"))
    assert open_or_resume(store, "handed", run_config(spec, "p", "llama.cpp", None, 1, plan=reworded)) == run_id
    with pytest.raises(
        ValueError, match="read by transformers fp32 .the hand-off., and this machine's plan now runs no "
    ):
        open_or_resume(store, "handed", run_config(spec, "p", "llama.cpp", None, 1, plan=alone))
    # the other way round, llama.cpp by name is the way to run as the stored run ran
    open_or_resume(store, "alone", run_config(spec, "p", "llama.cpp", None, 1, plan=alone))
    with pytest.raises(ValueError, match="--runtime llama.cpp"):
        open_or_resume(store, "alone", run_config(spec, "p", "llama.cpp", None, 1, plan=handed))


@pytest.fixture
def loads(cache, gguf_dir, monkeypatch):  # noqa: F811 -- the imported fixtures
    """load_pair of the default pairing assembles tiny models: the split pair, or (``refuse``) a split whose
    ids disagree, then both models on llama.cpp (auto's fallback)."""
    from specsteer.runtimes.llamacpp import LlamaCppModel

    pair, generalist = _split_pair(gguf_dir)
    texts = generalist.token_texts()
    state = {"refuse": False, "loaded": []}

    def fake_load(pairing, planned, *args, **kwargs):
        runtimes = tuple(model.runtime for model in planned)
        state["loaded"].append(runtimes)
        if runtimes == ("llama.cpp", "llama.cpp"):
            small = LlamaCppModel(gguf_dir / "small.gguf", threads=1)
            return assemble_pair(pairing.id, small, generalist, pair.tokenizer)
        swapped = [texts[1], texts[0], *texts[2:]] if state["refuse"] else texts
        monkeypatch.setattr(generalist, "token_texts", lambda: swapped)
        return assemble_pair(pairing.id, pair.specialist, generalist, pair.tokenizer)

    monkeypatch.setattr(loading, "_load_pair_uncached", fake_load)
    loading.clear_loaded_pairs()
    yield state
    loading.clear_loaded_pairs()


def test_auto_stores_the_split_it_loaded_with_the_calibrations_reasons(loads, url):
    _save(PROMPT_HEAVY)
    spec = replace(FAST, pairing=DEFAULT_PAIRING, run_name="auto-split")
    result = run_grid(spec, storage.SqlRunStore(url))
    assert result.status == "finished" and loads["loaded"] == [("transformers", "llama.cpp")]
    config = storage.get_run_by_name("auto-split", url=url).config
    assert config["runtime"] == "transformers/llama.cpp"
    plan = StoredPlan.read(config)
    assert (plan.specialist, plan.generalist) == ("transformers", "llama.cpp")
    assert "1600 tok/s" in plan.reason  # the calibration's measured prompt speed, as load_pair's plan says


def test_a_run_whose_planned_split_fell_back_at_load_fails_saying_which_runtime_loaded(loads, url):
    _save(PROMPT_HEAVY)
    loads["refuse"] = True
    spec = replace(FAST, pairing=DEFAULT_PAIRING, run_name="fell-back")
    with pytest.raises(ValueError, match="loaded on llama.cpp, not on transformers/llama.cpp as planned"):
        run_grid(spec, storage.SqlRunStore(url))
    stored = storage.get_run_by_name("fell-back", url=url)
    assert stored.status == "failed" and stored.cell_count == 0


def test_benchs_auto_rows_carry_the_plan_auto_made_for_each_method():
    rows = [
        {"method": "specsteer", "runtime": "transformers/llama.cpp", "tok_per_s": 2.0},
        {"method": "specsteer", "runtime": "llama.cpp", "tok_per_s": 1.0},
    ]
    (auto,) = auto_rows(rows, {"specsteer": SPLIT.runtime}, {"specsteer": SPLIT})
    assert auto["runtime"] == "auto" and auto["auto_picked"] == "transformers/llama.cpp"
    assert auto[PLAN_KEY]["generalist"]["runtime"] == "llama.cpp" and "reads faster" in auto[PLAN_KEY]["reason"]
    assert PLAN_KEY not in auto_rows(rows, {"specsteer": "llama.cpp"})[0]  # no plan given: none invented
