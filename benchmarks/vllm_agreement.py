"""How closely the vLLM Cloud's verdicts follow the in-process Cloud's, round by round, on the tiny pair.

Both Clouds get the same Open and the same Drafts (drafted by the pair's Specialist, greedy or sampled at
temperature 1 from varied prompts). Per round it compares: the accepted count; the candidate ids and their
order; the values (the vLLM Cloud sends log p_L - beta log p_S0, the in-process one z_L - beta z_S0: after
removing each row's mean difference they should agree to float rounding); the recovered token (the
argmax of the values, i.e. greedy recovery with no private term); and the tokens computed per round.

    python benchmarks/vllm_agreement.py --out results/vllm_agreement.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from specsteer.cloud.verifier import Cloud  # noqa: E402
from specsteer.cloud.vllm import EngineSettings, VllmCloud, launch_cloud, save_pair  # noqa: E402
from specsteer.method.decoding import ForwardLog, Sampler, Stream  # noqa: E402
from specsteer.method.drafting import draft  # noqa: E402
from specsteer.models.tiny import VLLM_PAIRING_ID, shared_test_pair  # noqa: E402
from specsteer.protocol.wire import Draft, Open  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--draft-len", type=int, default=4)
    parser.add_argument("--block-size", type=int, default=32)
    parser.add_argument("--out", default="results/vllm_agreement.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    pair = shared_test_pair(VLLM_PAIRING_ID)
    work = Path(tempfile.mkdtemp(prefix="vllm-agreement-"))
    dirs = save_pair(pair, work / "models")
    settings = EngineSettings(block_size=args.block_size, kv_cache_bytes=64 * 2**20, max_model_len=2048, threads=1)
    started = time.perf_counter()
    launched = launch_cloud(VLLM_PAIRING_ID, pair.vocab_size, *dirs, settings, work / "logs", 900, print)
    startup = time.perf_counter() - started
    rows = []
    try:
        for session in range(args.sessions):
            sample = session % 2 == 1
            text = f"Session {session}: write about the weather, the sea and the number {session * 7}. " * (
                1 + session % 4
            )
            prompt = tuple(pair.tokenizer.encode(text))
            message = Open(
                bytes([session + 1]) * 16,
                "ratio",
                prompt,
                args.rounds * (args.draft_len + 1) + 8,
                alpha=0.3,
                beta=1.0,
                temperature=1.0 if sample else 0.0,
                seed=session,
            )
            here = Cloud(pair.generalist, pair.specialist, pair.vocab_size, ForwardLog())
            here.open(message)
            there_log = ForwardLog()
            there = VllmCloud(launched.pair, there_log)
            there.open(message)
            edge = Stream(pair.specialist, list(prompt), pair.vocab_size, ForwardLog(), "edge", 4096)
            sampler = Sampler.make(sample, 1.0, 1.0, session + 100) if sample else Sampler()
            append: list[int] = []
            for number in range(args.rounds):
                ids, draft_rows = draft(edge, args.draft_len, sampler, frozenset())
                message_draft = Draft(message.session, tuple(ids), tuple(append))
                mark = len(there_log.trace)
                expected = here.verify(message_draft)
                got = there.verify(message_draft)
                computed = sum(step.size for step in there_log.trace[mark:] if step.who == "generalist")
                row = {
                    "session": session,
                    "round": number,
                    "sampled": sample,
                    "sequence": len(there.tokens),
                    "accepted_equal": expected.accepted == got.accepted,
                    "ids_equal": expected.ids == got.ids,
                    "same_id_set": set(expected.ids) == set(got.ids),
                    "generalist_tokens_computed": computed,
                }
                if expected.ids and got.ids and set(expected.ids) == set(got.ids):
                    order = {token: i for i, token in enumerate(got.ids)}
                    mine = torch.tensor([got.values[order[t]] for t in expected.ids], dtype=torch.float64)
                    theirs = torch.tensor(expected.values, dtype=torch.float64)
                    shift = (theirs - mine).mean()
                    row["values_max_abs_diff_after_shift"] = float((theirs - mine - shift).abs().max())
                    row["recovered_equal"] = int(theirs.argmax()) == int(mine.argmax())
                rows.append(row)
                # Both Clouds now hold prefix + accepted drafts; the Edge keeps the same and chooses the
                # next token from the in-process verdict (its recovery or bonus), as a real Edge would.
                accepted = expected.accepted
                if accepted < len(ids):  # the row draft `accepted` came from follows the kept tokens
                    edge.truncate(len(edge) - len(ids) + accepted, draft_rows[accepted])
                if expected.ids:
                    choice = expected.ids[int(torch.tensor(expected.values).argmax())]
                    append = [choice]
                    edge.append([choice])
                else:
                    append = []
                if not got.accepted == expected.accepted:
                    break  # the sessions' states now differ; stop this session
    finally:
        launched.stop()
    summary = {
        "rounds": len(rows),
        "accepted_equal": sum(r["accepted_equal"] for r in rows),
        "ids_equal": sum(r["ids_equal"] for r in rows),
        "same_id_set": sum(r["same_id_set"] for r in rows),
        "recovered_compared": sum("recovered_equal" in r for r in rows),
        "recovered_equal": sum(r.get("recovered_equal", False) for r in rows),
        "values_max_abs_diff_after_shift": max(
            (r.get("values_max_abs_diff_after_shift", 0.0) for r in rows), default=0
        ),
        "generalist_tokens_computed_per_round_mean": round(
            sum(r["generalist_tokens_computed"] for r in rows) / max(1, len(rows)), 2
        ),
        "sequence_mean": round(sum(r["sequence"] for r in rows) / max(1, len(rows)), 1),
        "engine_startup_s": round(startup, 1),
    }
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
            if "Model name" in line
        ),
        "",
    )
    document = {
        "command": " ".join(["python", *sys.argv]),
        "cpu": cpu,
        "settings": vars(args),
        "summary": summary,
        "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(document, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
