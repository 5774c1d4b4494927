"""Forward-pass costs of the paper's model pairs on one accelerator, measured with random weights: the entry of
``specsteer.evaluation.gpu_costs`` (what it measures and how), for a GPU machine with the repository, PyTorch and
transformers and nothing else.

    python benchmarks/gpu_costs.py --device cuda --out results/gpu_costs_h100.json
    python benchmarks/gpu_costs.py --device cpu --tiny --max-seconds 60 --out results/gpu_costs_cpu_dryrun.json
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specsteer.evaluation.gpu_costs import main  # noqa: E402  (the repository root on the path first)

if __name__ == "__main__":
    sys.exit(main())
