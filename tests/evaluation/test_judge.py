"""An LLM judge beside ROUGE: the rubric's prompts and how answers are read, judging a run (resumable, errors
stored with their reason, pairs in both orders) against an in-memory store, and the grades read back with
their intervals. No model: a scripted judge answers."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from specsteer.evaluation.judge_rubric import (
    CRITERIA,
    MAX_TEXT_CHARS,
    SCORE_ANSWER_PATTERN,
    VERDICT_ANSWER_PATTERN,
    JudgeContext,
    check_criteria,
    history_text,
    pair_prompt,
    read_score,
    read_verdict,
    score_prompt,
)
from specsteer.evaluation.judge_run import JudgeDone, JudgePlan, JudgeProgress, judge_run_events, record_context
from specsteer.evaluation.judge_scores import (
    paired_differences,
    row_columns,
    scale_note,
    score_summaries,
    summary_json,
    summary_lines,
)
from specsteer.evaluation.judges import JudgeFailure
from specsteer.evaluation.metrics import bootstrap_interval
from specsteer.method.events import GenerationStats
from specsteer.stores.judges import JudgeIdentity, JudgeScore, PairVerdict
from specsteer.stores.runs import CellResult, GridPoint

CONTEXT = JudgeContext(
    task="Write an invitation to the harbour party.",
    profile="Name: Ada\nWriting_style: dry, short sentences\nPrivacy_info: Owns a red boat",
    texts=(("A note on boats", "Boats are slow. I like them."), ("", "Tea at five.")),
)
POINTS = (GridPoint("slm+"), GridPoint("llm"), GridPoint("specsteer", 1.0, 1.0))


# --------------------------------------------------------------------------- the rubric


def test_a_grade_prompt_holds_the_context_the_criterion_and_the_answer_in_that_order():
    prompt = score_prompt("personalization", CONTEXT, "Come to the party.")
    order = [prompt.index(part) for part in ("Name: Ada", "Boats are slow", "harbour party", "Come to the party.")]
    assert order == sorted(order)
    assert "Text 1 (written for: A note on boats)" in prompt and "Text 2\nTea at five." in prompt
    assert "Rating: [[N]]" in prompt and "1 (very poor) to 10 (excellent)" in prompt
    # One record's prompts share their context: everything before the answer is the same for every output.
    other = score_prompt("personalization", CONTEXT, "Something else entirely.")
    shared = prompt[: prompt.index("Come to the party.")]
    assert other.startswith(shared)
    # Overall without profile: the task alone, neither the profile nor the texts.
    plain = score_prompt("overall_without_profile", CONTEXT, "Come to the party.")
    assert "Name: Ada" not in plain and "Boats are slow" not in plain and "harbour party" in plain
    # The three criteria ask three different things.
    assert len({score_prompt(c, CONTEXT, "x").split(">>>")[1] for c in CRITERIA}) == 3


def test_a_pair_prompt_shows_both_answers_and_asks_for_a_verdict():
    prompt = pair_prompt("overall", CONTEXT, "First text.", "Second text.")
    assert prompt.index("Writing A\n<<<\nFirst text.") < prompt.index("Writing B\n<<<\nSecond text.")
    assert "Verdict: [[A]]" in prompt and "Verdict: [[tie]]" in prompt


def test_a_history_is_bounded():
    long = JudgeContext("task", "", tuple((f"t{i}", "word " * 2000) for i in range(20)))
    text = history_text(long)
    assert text.count("[… cut here]") >= 1 and len(text) < 8 * (MAX_TEXT_CHARS + 100)
    assert "Text 9" not in text


@pytest.mark.parametrize(
    ("answer", "score", "kind"),
    [
        ("Fits the voice well.\nRating: [[7]]", 7.0, None),
        ("Grade: [[ 8.5 ]]", 8.5, None),
        ("Rating: [[6]] ... as I said, [[6]]", 6.0, None),
        ("Rating: [[3]] or maybe [[9]]", None, "malformed"),
        ("Rating: [[11]]", None, "malformed"),
        ("Rating: [[0]]", None, "malformed"),
        ("It reads well, maybe a seven.", None, "malformed"),
        ("", None, "malformed"),
        ("I'm sorry, but I can't help with grading this.", None, "refusal"),
        # Without the brackets (the small local judge often writes so): read when it is the only grade.
        ("### Grade: 8\n#### Reasoning: close to her voice.", 8.0, None),
        ("**Rating:** 7/10", 7.0, None),
        ("Grade: 8, though a Rating: 3 fits too", None, "malformed"),
        ("Rating: [[5]] (Grade: 2 before I read it again)", 5.0, None),
    ],
)
def test_a_grade_is_read_or_the_reason_it_is_not(answer, score, kind):
    reading = read_score(answer)
    assert (reading.value, reading.reason_kind) == (score, kind)
    assert (reading.reason is None) == (kind is None)


@pytest.mark.parametrize(
    ("answer", "winner", "kind"),
    [
        ("A keeps her voice. Verdict: [[A]]", "first", None),
        ("Verdict: [[b]]", "second", None),
        ("Verdict: [[tie]]", "tie", None),
        ("Verdict: [[C]]", "tie", None),
        ("[[A]] no, [[B]]", None, "malformed"),
        ("Both are fine.", None, "malformed"),
        ("As an AI, I cannot choose.", None, "refusal"),
        ("**Verdict:** B, it keeps her voice.", "second", None),
    ],
)
def test_a_verdict_is_read_or_the_reason_it_is_not(answer, winner, kind):
    reading = read_verdict(answer)
    assert (reading.value, reading.reason_kind) == (winner, kind)


def test_the_answer_patterns_match_what_the_readers_read():
    import re

    assert re.fullmatch(SCORE_ANSWER_PATTERN, "Short reason.\nRating: [[10]]")
    assert not re.fullmatch(SCORE_ANSWER_PATTERN, "Rating: [[0]]")
    assert re.fullmatch(VERDICT_ANSWER_PATTERN, "B is closer. Verdict: [[B]]")


def test_criteria_are_checked():
    assert check_criteria(["overall", " personalization"]) == ("personalization", "overall")
    with pytest.raises(ValueError, match="unknown judge criterion 'style'"):
        check_criteria(["style"])
    with pytest.raises(ValueError, match="at least one"):
        check_criteria(["", " "])


# --------------------------------------------------------------------------- judging a run


class MemoryJudgeStore:
    """A dictionary-backed JudgeStore, as the protocol describes it."""

    def __init__(self):
        self.grades: dict[tuple, JudgeScore] = {}
        self.pairs: dict[tuple, PairVerdict] = {}

    def settled_scores(self, run_id, judge_key):
        return {
            (s.cell_key, s.criterion)
            for (r, _, k, _), s in self.grades.items()
            if r == run_id and k == judge_key and s.settled
        }

    def save_score(self, run_id, score):
        key = (run_id, score.cell_key, score.judge.key, score.criterion)
        if key in self.grades and self.grades[key].score is not None:
            return False
        self.grades[key] = score
        return True

    def scores(self, run_id):
        return [s for (r, *_), s in self.grades.items() if r == run_id]

    def settled_verdicts(self, run_id, judge_key):
        return {
            (v.first_key, v.second_key, v.criterion)
            for (r, *_, k, _), v in self.pairs.items()
            if r == run_id and k == judge_key and v.settled
        }

    def save_verdict(self, run_id, verdict):
        key = (run_id, verdict.first_key, verdict.second_key, verdict.judge.key, verdict.criterion)
        if key in self.pairs and self.pairs[key].winner is not None:
            return False
        self.pairs[key] = verdict
        return True

    def verdicts(self, run_id):
        return [v for (r, *_), v in self.pairs.items() if r == run_id]


class ScriptedJudge:
    """Answers from a function of the prompt; records every prompt."""

    def __init__(self, answer, model="scripted", weak=False):
        self.answer = answer
        self.prompts: list[str] = []
        self._identity = JudgeIdentity(model, "local" if weak else "endpoint", weak)

    @property
    def identity(self):
        return self._identity

    def ask(self, prompt, answer_pattern):
        self.prompts.append(prompt)
        return self.answer(prompt, answer_pattern)

    def close(self):
        pass


def cells_for(records: int, outputs=None) -> list[CellResult]:
    outputs = outputs or {"slm+": "copied text", "llm": "generic text", "specsteer": "steered text"}
    return [
        CellResult(
            f"r{n}", point, f"{outputs[point.method]} {n}", {"rougeL": 0.1 * (i + 1)}, GenerationStats(point.method)
        )
        for n in range(records)
        for i, point in enumerate(POINTS)
    ]


def contexts_for(records: int) -> tuple[list[str], dict[str, JudgeContext]]:
    order = [f"r{n}" for n in range(records)]
    return order, {record: replace(CONTEXT, task=f"Task of {record}") for record in order}


def by_method(prompt: str, pattern: str) -> str:
    """Grades by which output the prompt shows; SpecSteer's answer on record r1 is unreadable."""
    if "Verdict" in pattern:
        return "Verdict: [[A]]"  # always the first shown: a judge that reads the order, not the texts
    if "steered text 1" in prompt:
        return "It is fine, I think."
    grade = {"copied": 3, "generic": 6, "steered": 7}[prompt.split("<<<\n")[1].split()[0]]
    return f"Reasons.\nRating: [[{grade}]]"


def run_all(judge, store, records=3, **plan) -> list:
    order, contexts = contexts_for(records)
    return list(judge_run_events(1, cells_for(records), contexts, order, judge, store, JudgePlan(**plan)))


def test_a_run_is_graded_cell_by_cell_and_an_unreadable_answer_is_stored_with_its_reason():
    store, judge = MemoryJudgeStore(), ScriptedJudge(by_method)
    events = run_all(judge, store, criteria=("personalization",))
    progress = [e for e in events if isinstance(e, JudgeProgress)]
    done = events[-1]
    assert isinstance(done, JudgeDone) and done.asked == 9 and done.skipped == 0
    assert done.outcomes == {"scored": 8, "malformed": 1}
    assert [p.done for p in progress] == list(range(1, 10)) and all(p.total == 9 for p in progress)
    scores = store.scores(1)
    failed = [s for s in scores if s.score is None]
    assert len(failed) == 1 and failed[0].point == POINTS[2] and failed[0].record_id == "r1"
    assert failed[0].reason_kind == "malformed" and "no grade" in failed[0].reason
    # Each stored grade keeps the prompt it answered and the answer.
    graded = next(s for s in scores if s.point == POINTS[0] and s.record_id == "r0")
    assert graded.score == 3 and "copied text 0" in graded.prompt and "[[3]]" in graded.answer
    # A record's prompts are asked together, its context first: records in order.
    assert [p.what.split(",")[0] for p in progress] == ["record r0"] * 3 + ["record r1"] * 3 + ["record r2"] * 3


def test_judging_again_asks_only_what_is_not_settled():
    store = MemoryJudgeStore()
    calls = {"n": 0}

    def flaky(prompt, pattern):
        calls["n"] += 1
        if "generic text 2" in prompt:
            raise JudgeFailure("timeout", "the judge did not answer within 1 s")
        return by_method(prompt, pattern)

    run_all(ScriptedJudge(flaky), store, criteria=("personalization",))
    assert calls["n"] == 9
    timeout = [s for s in store.scores(1) if s.reason_kind == "timeout"]
    assert len(timeout) == 1 and not timeout[0].settled
    # The second run asks the timed-out cell again and nothing else; the malformed answer stays.
    second = ScriptedJudge(by_method)
    events = run_all(second, store, criteria=("personalization",))
    assert len(second.prompts) == 1 and "generic text 2" in second.prompts[0]
    assert events[-1].skipped == 8 and events[-1].outcomes == {"scored": 1}
    assert sum(s.reason_kind == "malformed" for s in store.scores(1)) == 1
    # Another judge grades everything anew: its grades are its own.
    other = ScriptedJudge(by_method, model="another")
    run_all(other, store, criteria=("personalization",))
    assert len(other.prompts) == 9


def test_stored_answers_without_a_grade_are_read_again_before_anything_is_asked():
    store = MemoryJudgeStore()
    judge = ScriptedJudge(by_method)
    run_all(judge, store, records=2, criteria=("personalization",), points=POINTS[:2], pairwise=True)
    llm = next(s for s in store.scores(1) if s.point == POINTS[1] and s.record_id == "r0")
    pair = next(v for v in store.verdicts(1) if v.record_id == "r1")
    # As an older reader left them: no grade, no verdict, the answers kept.
    store.grades[(1, llm.cell_key, llm.judge.key, llm.criterion)] = replace(
        llm, score=None, answer="### Grade: 6", reason_kind="malformed", reason="no grade"
    )
    key = (1, pair.first_key, pair.second_key, pair.judge.key, pair.criterion)
    store.pairs[key] = replace(pair, winner=None, answer="Verdict: B", reason_kind="malformed", reason="none")
    again = ScriptedJudge(by_method)
    events = run_all(again, store, records=2, criteria=("personalization",), points=POINTS[:2], pairwise=True)
    assert events[-1].reread == 2 and again.prompts == []
    assert next(s for s in store.scores(1) if s.cell_key == llm.cell_key).score == 6
    assert store.pairs[key].winner == "second" and store.pairs[key].reason_kind is None


def test_the_plan_chooses_points_records_and_criteria():
    store, judge = MemoryJudgeStore(), ScriptedJudge(by_method)
    run_all(judge, store, criteria=("overall", "overall_without_profile"), points=POINTS[1:], records=2)
    scores = store.scores(1)
    assert {s.record_id for s in scores} == {"r0", "r1"}
    assert {s.point for s in scores} == set(POINTS[1:])
    assert {s.criterion for s in scores} == {"overall", "overall_without_profile"}
    with pytest.raises(ValueError, match="no cells at lightcosteer b=1"):
        run_all(judge, store, points=(GridPoint("lightcosteer", None, 1.0),))
    with pytest.raises(ValueError, match="at least 1"):
        JudgePlan(records=0)


def test_pairs_are_asked_in_both_orders():
    store, judge = MemoryJudgeStore(), ScriptedJudge(by_method)
    run_all(judge, store, records=2, criteria=("personalization",), points=POINTS[:2], pairwise=True)
    verdicts = store.verdicts(1)
    assert len(verdicts) == 4  # 2 records x 1 pair x 2 orders
    orders = {(v.record_id, v.first, v.second) for v in verdicts}
    assert ("r0", POINTS[0], POINTS[1]) in orders and ("r0", POINTS[1], POINTS[0]) in orders
    assert all(v.winner == "first" for v in verdicts)
    assert {v.preferred for v in verdicts if v.record_id == "r0"} == set(POINTS[:2])


def test_a_stop_keeps_what_is_stored_and_drops_the_answer_in_flight():
    store, cancel = MemoryJudgeStore(), threading.Event()

    def stopping(prompt, pattern):
        if "generic text 0" in prompt:
            cancel.set()  # the stop arrives while this answer is being written
        return by_method(prompt, pattern)

    order, contexts = contexts_for(2)
    plan = JudgePlan(criteria=("personalization",))
    events = list(judge_run_events(1, cells_for(2), contexts, order, ScriptedJudge(stopping), store, plan, cancel))
    assert events[-1].cancelled and events[-1].asked == 1
    assert [s.point for s in store.scores(1)] == [POINTS[0]]


def test_record_context_reads_a_cogenesis_record(tmp_path):
    from evaluation.test_record_lora import cogenesis_record, write_records

    from specsteer.data.datasets import load_cogenesis

    record = load_cogenesis(write_records(tmp_path, [cogenesis_record(4)]))[0]
    context = record_context(record)
    assert context.task == "Write an invitation to event 4."
    assert "Privacy_info: Owns a red boat" in context.profile
    assert context.texts[0] == ("Title 0", "Note 0 by user 4: walks by the river, tea at five.")


# --------------------------------------------------------------------------- reading the grades back


def graded_run() -> list[JudgeScore]:
    store = MemoryJudgeStore()
    run_all(ScriptedJudge(by_method, weak=True, model="small"), store, records=4, criteria=("personalization",))
    return store.scores(1)


def test_grades_are_summed_up_with_record_bootstrap_intervals():
    scores = graded_run()
    summaries = {s.point: s for s in score_summaries(scores)}
    assert summaries[POINTS[0]].mean == 3 and summaries[POINTS[0]].scored == 4
    steered = summaries[POINTS[2]]
    assert (steered.scored, steered.failures) == (3, {"malformed": 1})
    assert (steered.low, steered.high) == bootstrap_interval([7.0, 7.0, 7.0])
    assert steered.text() == "7.00 [7.00, 7.00] (n=3)"
    # SpecSteer against each baseline, record by record over the records both graded.
    differences = {d.theirs.method: d for _, d in paired_differences(scores)}
    assert differences["llm"].records == 3 and differences["llm"].mean == 1 and differences["llm"].wins == 3
    assert differences["slm+"].mean == 4 and differences["llm"].metric == "weak judge: personalization"


def test_a_weak_judge_says_so_wherever_its_grades_appear():
    scores = graded_run()
    note = scale_note(scores)
    assert "small (local, weak judge)" in note and "1 malformed" in note and "not the paper's judge" in note
    lines = summary_lines(scores, cells=cells_for(4))
    assert lines[0] == note and any("R-L" in line and "on the same records" in line for line in lines)
    rows = row_columns([{"method": "llm"}, {"method": "lightcosteer", "beta": 1.0}], scores)
    assert rows[0]["judge"] == {"weak judge: personalization": "6.00 [6.00, 6.00]"}
    assert rows[1]["judge"] == {"weak judge: personalization": "–"}
    document = summary_json(scores)
    assert all(grade["weak_judge"] for grade in document["grades"]) and document["scale"] == [1, 10]
    # Only the records asked for.
    assert {g["graded"] for g in summary_json(scores, {"r0"})["grades"]} == {1}
    assert row_columns([{"method": "llm"}], []) == [{"method": "llm"}]


def test_each_rubrics_differences_stand_under_its_heading_and_the_model_is_named_once():
    from dataclasses import replace

    scores = graded_run()
    older = [replace(s, judge=replace(s.judge, rubric="older"), score=None if s.score is None else 1.0) for s in scores]
    lines = summary_lines(scores + older)
    assert lines[0].count("small (local, weak judge)") == 1
    headings = [i for i, line in enumerate(lines) if line.endswith(":") and ", rubric " in line]
    assert len(headings) == 2
    for start, end in zip(headings, [*headings[1:], len(lines)]):
        section = lines[start:end]
        differences = [line for line in section if "better" in line]
        assert len(differences) == 2 and all(line.startswith("  ") for line in differences)
        # The older rubric's grades are all 1, so its differences are 0; the current one's are not.
        assert all("+0.00" in line for line in differences) == ("older" in section[0])
    # The Dashboard's table: a column per rubric, neither overwriting the other.
    (row,) = row_columns([{"method": "llm"}], scores + older)
    assert row["judge"] == {
        f"weak judge ({scores[0].judge.rubric}): personalization": "6.00 [6.00, 6.00]",
        "weak judge (older): personalization": "1.00 [1.00, 1.00]",
    }
    assert {d["rubric"] for d in summary_json(scores + older)["differences"]} == {scores[0].judge.rubric, "older"}


def test_the_dashboard_table_shows_the_judge_column():
    from specsteer.evaluation import result_table

    rows = row_columns([{"method": "llm", "records": 4}], graded_run())
    shown = result_table.display_rows(rows)
    assert shown[0]["weak judge: personalization"] == "6.00 [6.00, 6.00]"


def test_a_prompt_too_long_for_the_local_judge_is_a_refusal_not_a_crash():
    from specsteer.evaluation.judges import LocalJudge
    from specsteer.models.tiny import shared_test_pair

    pair = shared_test_pair("tiny-test")
    assert pair is not None
    judge = LocalJudge(pair, "tiny-test-generalist", max_new_tokens=4)
    assert isinstance(judge.ask("Grade this. Rating: [[N]]", SCORE_ANSWER_PATTERN), str)  # a short one is asked
    with pytest.raises(JudgeFailure) as failure:
        judge.ask("a long profile " * 20_000, SCORE_ANSWER_PATTERN)
    assert failure.value.kind == "refusal"
    assert "larger than this Cloud accepts" in str(failure.value)


def test_the_local_judge_finishes_an_answer_cut_at_its_budget_from_the_rubrics_cue():
    from specsteer.evaluation.judge_rubric import VERDICT_ANSWER_PATTERN
    from specsteer.evaluation.judges import CUE_TOKENS, LocalJudge
    from specsteer.models.tiny import shared_test_pair

    pair = shared_test_pair("tiny-test")
    assert pair is not None
    judge = LocalJudge(pair, "tiny-test-generalist", max_new_tokens=4)
    prompt = "Grade this writing."
    uncued = judge.ask(prompt, r"no cue for this pattern")  # the random tiny model writes no [[N]] in 4 tokens
    assert "[[" not in uncued
    for pattern, cue in ((SCORE_ANSWER_PATTERN, "Rating: [["), (VERDICT_ANSWER_PATTERN, "Verdict: [[")):
        answer = judge.ask(prompt, pattern)
        lead, added, grade = answer.partition(f"\n\n{cue}")
        assert added and lead == uncued.rstrip()  # the model's own words, then the cue where it was added
        assert len(grade) <= CUE_TOKENS  # the tiny tokenizer's tokens are bytes: at most one character each
    # Grades finished from a cue are never mixed with grades read without one.
    assert judge.identity.key != JudgeIdentity("tiny-test-generalist", "local", weak=True).key
