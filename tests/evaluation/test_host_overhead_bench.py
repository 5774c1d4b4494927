"""benchmarks/host_overhead.py on tiny models with a small output: every pass is attributed to the side that ran it,
the host time left is never negative, and the fit the profiles copy is written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "host_overhead.py"


@pytest.mark.slow  # a subprocess that imports torch (the script instruments the runtimes' passes for good)
def test_the_script_splits_host_time_by_side(tmp_path):
    out = tmp_path / "host.json"
    command = [sys.executable, str(SCRIPT), "--tokens", "6", "--repeats", "1", "--vocab", "400"]
    command += ["--methods", "specsteer,llm,slm+", "--out", str(out)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["schema"] == "specsteer.host_overhead/1" and {"cpu", "flags"} <= set(data["machine"])
    assert len(data["load_average_before"]) == 3 and data["command"].startswith("python benchmarks/host_overhead.py")
    runs = {run["method"]: run for run in data["runs"]}
    assert runs["slm+"]["passes"]["cloud"] == 0 and runs["slm+"]["messages_sent"] == {"edge": 0, "cloud": 0}
    assert runs["llm"]["passes"]["edge"] == 0 and runs["llm"]["passes"]["cloud"] >= runs["llm"]["new_tokens"] - 1
    assert runs["specsteer"]["passes"]["edge"] > 0 and runs["specsteer"]["passes"]["cloud"] > 0
    for run in data["runs"]:
        for side in ("edge", "cloud"):
            assert run["host_cpu_s"][side] >= 0 and run["host_wall_s"][side] >= -1e-3
    for side in ("edge", "cloud"):
        assert data["fit"][side]["per_row_s"] >= 0 and data["fit"][side]["per_message_s"] >= 0
    assert set(data["methods"]) == {"specsteer", "llm", "slm+"}
