"""benchmarks/bench_first_click.py on the tiny pair: the app started in a child process, its warm-up waited for,
three Generate clicks measured (first, second, cold), the child stopped by its pid. No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specsteer.data.sources import DEFAULT_SAMPLE

pytest.importorskip("gradio_client")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_first_click.py"


@pytest.mark.slow
def test_the_first_click_bench_runs_on_the_tiny_pair_and_stops_the_app(tmp_path):
    out = tmp_path / "first_click.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--pairing", "tiny-test", "--out", str(out), "--timeout-s", "300"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["pairing"] == "tiny-test" and result["warm_up"]
    clicks = result["clicks"]
    assert [c["click"] for c in clicks] == ["first", "second", "cold"]
    assert [c["sample"] for c in clicks[:2]] == [DEFAULT_SAMPLE] * 2 and clicks[2]["sample"] != DEFAULT_SAMPLE
    for c in clicks:
        assert isinstance(c["first_visible_s"], float) and isinstance(c["ttft_s"], float) and c["client_s"] > 0
        assert c["first_visible_s"] <= c["ttft_s"] + 0.01  # a pending draft is on screen no later than a verdict
    assert isinstance(result["first_within_target"], bool)
    assert result["app_exit_status"] is not None  # the child was stopped and waited for
    assert "model" in result["cpu"] and isinstance(result["cpu"]["flags"], list)


def test_a_stat_is_read_off_the_stats_strip():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import bench_first_click as bench
    finally:
        sys.path.remove(str(SCRIPT.parent))
    from ui.stats_html import StatsView, stats_html

    view = StatsView("specsteer", 3, 1.0, 2, 3, 1, 10, 4, "eos", first_visible_s=0.25)
    html = stats_html(view)
    assert bench.stat_seconds(html, "first visible") == 0.25
    assert bench.stat_seconds(html, "first token") is None  # shown as "–"
    with pytest.raises(ValueError, match="no 'speedup' value"):
        bench.stat_seconds(html, "speedup")
