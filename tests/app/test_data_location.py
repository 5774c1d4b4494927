"""The page says where its data lives and whether a restart keeps it (here: a Space without persistent storage)."""

from __future__ import annotations

import app
import storage
from specsteer.service import pairings


def test_the_page_says_a_restart_loses_the_data_on_a_space_without_persistent_storage(tmp_path, monkeypatch):
    monkeypatch.setenv(pairings.TEST_PAIR_ENV, "tiny")
    monkeypatch.setenv("SPACE_ID", "someone/specsteer")
    monkeypatch.setenv("SPECSTEER_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    storage.reset_engines()
    try:
        demo = app.build_app()
        shown = [str(block.get("props", {}).get("value", "")) for block in demo.config["components"]]
    finally:
        storage.reset_engines()
    [note] = [text for text in shown if text.startswith("Saved data")]
    assert "lost when the app restarts" in note and "persistent storage" in note and str(tmp_path) not in note
