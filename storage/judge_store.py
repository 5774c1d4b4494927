"""``SqlJudgeStore``: ``specsteer.stores.protocols.JudgeStore`` on one database, over ``storage.judge_scores``."""

from __future__ import annotations

from specsteer.stores.judges import JudgeScore, PairVerdict
from storage.judge_scores import run_scores, run_verdicts, save_score, save_verdict, settled_scores, settled_verdicts


class SqlJudgeStore:
    """``JudgeStore`` on one database (default: ``DATABASE_URL`` / the SQLite file)."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url

    def settled_scores(self, run_id: int, judge_key: str) -> set[tuple[str, str]]:
        return settled_scores(run_id, judge_key, url=self.url)

    def save_score(self, run_id: int, score: JudgeScore) -> bool:
        return save_score(run_id, score, url=self.url)

    def scores(self, run_id: int) -> list[JudgeScore]:
        return run_scores(run_id, url=self.url)

    def settled_verdicts(self, run_id: int, judge_key: str) -> set[tuple[str, str, str]]:
        return settled_verdicts(run_id, judge_key, url=self.url)

    def save_verdict(self, run_id: int, verdict: PairVerdict) -> bool:
        return save_verdict(run_id, verdict, url=self.url)

    def verdicts(self, run_id: int) -> list[PairVerdict]:
        return run_verdicts(run_id, url=self.url)
