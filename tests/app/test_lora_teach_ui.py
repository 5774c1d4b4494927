"""The Generate tab's "Teach the Specialist my history" panel: its handlers over the service, without a server."""

from __future__ import annotations

from dataclasses import replace

from service.test_lora_teaching import history  # noqa: F401 -- the fixture
from service.test_service import MemoryStore

import storage
from specsteer.models.tiny import TEST_PAIRING_ID, shared_tiny_pair
from specsteer.service.app_service import AppService
from specsteer.service.limits import PUBLIC_LIMITS
from specsteer.service.pair_catalog import PairCatalog
from ui.lora_teach import BASE_NOTE, TeachPanel


def test_the_panel_shows_progress_then_hands_the_label_to_the_page(url, history):  # noqa: F811
    service = AppService(
        store=MemoryStore(),
        runs=storage.SqlRunStore(url),
        pairs=PairCatalog({TEST_PAIRING_ID: shared_tiny_pair}),
        limits=replace(PUBLIC_LIMITS, max_lora_steps=1),
    )
    frames = list(TeachPanel(service).teach(history, "review", TEST_PAIRING_ID, "auto"))
    status, label = frames[-1]
    assert "ss-box-ok" in status and isinstance(label, str) and "@" in label
    assert service.teacher.adapter(label).details()["steps"] == 1
    assert all("ss-box-busy" in html for html, _ in frames[:-1])
    refused = list(TeachPanel(service).teach(history, "review", TEST_PAIRING_ID, "llama.cpp"))
    assert len(refused) == 1 and "ss-box-error" in refused[0][0]
    note, cleared = TeachPanel.forget()
    assert cleared == "" and "base model" in note and BASE_NOTE[:20] in note


def test_the_statistics_name_a_taught_specialist_and_only_then():
    from specsteer.method.events import GenerationStats
    from ui.stats_html import StatsView, stats_html

    base = GenerationStats(method="specsteer")
    assert "taught (LoRA)" not in stats_html(StatsView.final(base))
    base.specialist_lora = "review_user@0123abcd"
    strip = stats_html(StatsView.final(base))
    assert "taught (LoRA)" in strip and "review_user@0123abcd" in strip
    base.specialist_lora = '<img src=x onerror="alert(1)">@1'  # a label is the service's, but escape anyway
    assert "<img" not in stats_html(StatsView.final(base))
