"""``specsteer judge`` end to end on a tiny run over CoGenesis-shaped records: the local (weak) judge on the tiny
pair grades every cell or stores why not, pairs in both orders, resumes; the grades then read back in ``judge
--summary``, ``report``, ``sweep`` and a campaign's export, with agreement with the campaign's people; a
read-only database made before judges reports as before."""

from __future__ import annotations

import json
import sqlite3

import pytest
from evaluation.test_joined_runs import retest_spec
from evaluation.test_record_lora import cogenesis_record, write_records

import storage
from specsteer.cli import main
from specsteer.evaluation.grid import run_grid
from specsteer.evaluation.judges import LOCAL_RUBRIC
from specsteer.models.tiny import tiny_pair
from specsteer.stores.judges import JudgeIdentity, JudgeScore

SCRIPTED = JudgeIdentity("scripted-judge", "endpoint")
GRADES = {"slm+": 3.0, "llm": 6.0, "specsteer": 7.0}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A finished run of SLM+, LLM and SpecSteer (α = 1) over three records (4 new tokens each)."""
    storage.reset_engines()
    folder = tmp_path_factory.mktemp("judged")
    url = f"sqlite:///{folder / 'runs.db'}"
    spec = retest_spec(write_records(folder, [cogenesis_record(n) for n in range(3)]), max_new_tokens=4)
    result = run_grid(spec, storage.SqlRunStore(url), pair=tiny_pair(seed=0, generalist_seed=1))
    assert result.status == "finished" and len(result.cells) == 9
    yield url, result.run_id, folder
    storage.reset_engines()


def judge(url, *more):
    return main(["judge", "--run", "steered", "--database", url, *more])


def test_the_local_judge_grades_each_cell_or_says_why_and_resumes(run, capsys, monkeypatch):
    monkeypatch.delenv("SPECSTEER_JUDGE_URL", raising=False)
    url, run_id, _ = run
    args = ("--pairing", "tiny-test", "--criteria", "personalization", "--pairwise", "--max-tokens", "6")
    assert judge(url, *args) == 0
    err = capsys.readouterr().err
    assert "no $SPECSTEER_JUDGE_URL, so the offline Generalist judges here (a weak judge)" in err
    assert "[1/27] record 0_1, slm+, personalization:" in err and "[27/27]" in err
    store = storage.SqlJudgeStore(url)
    scores = store.scores(run_id)
    # A tiny random model rarely writes [[N]]: each cell holds a grade or the reason it has none.
    assert len(scores) == 9 and all((s.score is None) != (s.reason is None) for s in scores)
    local = JudgeIdentity("tiny-test-generalist", "local", weak=True, rubric=LOCAL_RUBRIC)
    assert all(s.judge == local for s in scores)
    assert all(s.prompt.startswith("You are grading writing") and "Privacy_info" in s.prompt for s in scores)
    verdicts = store.verdicts(run_id)
    assert len(verdicts) == 18 and {(v.first.method, v.second.method) for v in verdicts} >= {
        ("llm", "slm+"),
        ("slm+", "llm"),
    }
    # Resumed: everything is settled, nothing is asked again.
    assert judge(url, *args) == 0
    assert "judged 0 (nothing new); 27 already settled" in capsys.readouterr().err


def test_bad_requests_are_refused_with_the_reason(run, capsys, monkeypatch):
    url, _, folder = run
    monkeypatch.delenv("SPECSTEER_JUDGE_URL", raising=False)
    cases = [
        (["judge", "--run", "nothing", "--database", url], "no run named 'nothing'"),
        (["judge", "--run", "steered", "--database", url, "--criteria", "style"], "unknown judge criterion 'style'"),
        (["judge", "--run", "steered", "--database", url, "--methods", "costeer"], "no costeer cells"),
        (["judge", "--run", "steered", "--database", url, "--judge", "endpoint"], "needs $SPECSTEER_JUDGE_URL"),
        (["judge", "--run", "steered", "--database", str(folder / "absent.db")], "no database file"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        assert message in capsys.readouterr().err
    monkeypatch.setenv("SPECSTEER_JUDGE_URL", "http://127.0.0.1:9/v1")
    assert judge(url, "--judge", "endpoint") == 2  # no model named
    assert "name the judge's model" in capsys.readouterr().err


def scripted_grades(url: str, run_id: int) -> None:
    store = storage.SqlJudgeStore(url)
    for cell in storage.run_cells(run_id, url=url):
        grade = GRADES[cell.point.method]
        store.save_score(run_id, JudgeScore(cell.record_id, cell.point, "personalization", SCRIPTED, grade))


def test_the_grades_read_back_beside_rouge_everywhere(run, capsys, tmp_path):
    url, run_id, _ = run
    scripted_grades(url, run_id)
    assert judge(url, "--summary", "--criteria", "personalization", "--json") == 0
    document = json.loads(capsys.readouterr().out)
    grades = {(g["judge"], g["method"]): g for g in document["grades"]}
    assert grades[("scripted-judge", "specsteer")]["mean"] == 7.0 and grades[("scripted-judge", "llm")]["graded"] == 3
    assert not grades[("scripted-judge", "llm")]["weak_judge"]
    (llm,) = [d for d in document["differences"] if d["judge"] == "scripted-judge" and d["theirs"] == "llm"]
    assert (llm["mean"], llm["wins"], llm["verdict"]) == (1.0, 3, "higher")
    assert isinstance(document["position_bias"], list) and document["human_agreement"] == []

    assert main(["report", "--run", "steered", "--database", url]) == 0
    text = capsys.readouterr().out
    assert "LLM judge, run 'steered', the same records:" in text
    assert "scripted-judge (endpoint), rubric cogenesis-1:" in text and "7.00 [7.00, 7.00] (n=3)" in text
    assert "R-L" in text and "on the same records" in text
    assert "SpecSteer α=1 β=1 − LLM: judge: personalization +1.00" in text
    assert main(["report", "--run", "steered", "--database", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["judge"]["steered"]["grades"]
    assert main(["sweep", "--run-name", "steered", "--database", url]) == 0
    assert "LLM judge, the same records:" in capsys.readouterr().out

    # The same database as the example runs ship: read-only, made before judges. It reports as before.
    examples = tmp_path / "examples.db"
    with sqlite3.connect(url.removeprefix("sqlite:///")) as source, sqlite3.connect(examples) as copy:
        source.backup(copy)  # the write-ahead log included
    with sqlite3.connect(examples) as connection:
        connection.execute("DROP TABLE judge_scores")
        connection.execute("DROP TABLE judge_verdicts")
    for argv in (["report", "--run", "steered"], ["sweep", "--run-name", "steered"]):
        assert main([*argv, "--database", str(examples)]) == 0
        assert "LLM judge" not in capsys.readouterr().out
    examples.chmod(0o444)
    assert main(["judge", "--run", "steered", "--database", str(examples), "--summary"]) == 0
    assert "no judge grades stored for these cells" in capsys.readouterr().out


def test_a_campaign_from_the_run_gets_the_judges_agreement_and_its_grades_in_the_export(run, capsys, tmp_path):
    from specsteer.service.app_service import AppService, PairCatalog
    from specsteer.service.campaign_import import RunCampaignRequest, create_from_run

    url, run_id, _ = run
    scripted_grades(url, run_id)
    app = AppService(storage.SqlGenerationStore(url), storage.SqlRunStore(url), PairCatalog())
    campaigns = app.campaigns(storage.SqlCampaignStore(url), storage.SqlJudgeStore(url))
    created = create_from_run(campaigns, RunCampaignRequest("study", "steered", annotators=("ann",)))
    seat = campaigns.join("study", "ann", created.codes["ann"])
    preferred = []
    for position in range(3):
        view = campaigns.view(seat, position)
        choice = "A" if position < 2 else "B"
        campaigns.save(seat, view, choice)
        preferred.append((view.slots[ord(choice) - ord("A")].method, [slot.method for slot in view.slots]))
    agree = sum(GRADES[winner] > GRADES[other] for winner, shown in preferred for other in shown if other != winner)
    assert judge(url, "--summary", "--criteria", "personalization") == 0
    text = capsys.readouterr().out
    assert f"with the people of campaign 'study': {100 * agree / 6:.0f} % ({agree} of 6;" in text

    target = tmp_path / "study.jsonl"
    assert main(["campaign", "export", "study", "--format", "jsonl", "--output", str(target), "--database", url]) == 0
    rows = [json.loads(line) for line in target.read_text().splitlines()]
    assert len(rows) == 3 and all(row["judge[scripted-judge]"] == "scripted-judge (endpoint)" for row in rows)
    assert {row["judge[scripted-judge]:specsteer:personalization"] for row in rows} == {7.0}
    assert {row["judge[scripted-judge]:slm+:personalization"] for row in rows} == {3.0}
