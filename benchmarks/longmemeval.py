"""LongMemEval (issue 45): the sample's real haystacks, and an M-shaped file in bounded memory.

    .venv/bin/python benchmarks/longmemeval.py [--questions 20] [--sessions 500]

sample: the fixture built from ../shared/datasets/longmemeval-sample (three genuine LongMemEval-S
haystacks, first question each: tests/longmemeval_fixture.py) evaluated with the bundled
all-MiniLM-L6-v2 under the lab, bm25 and vector presets: LongMemEval's session- and turn-level
metrics (the official protocol's) beside lab's recall@10. Three questions: no target, the point is
that the numbers are computed right (the tests check the metric code against hand-computed cases).

load: writes a synthetic file of the official format and shape (each question with its own haystack of
``--sessions`` sessions of 10 turns of ~60 words, as LongMemEval-M has about 500 sessions per
question) under .lab/bench/, then, each in a fresh process, measures the peak memory (RSS) of
(a) lab's loader (`lab.eval.longmemeval.load_longmemeval`: one question decoded at a time; every turn
stored, ``corpus='all'``, as the figures were first measured, not the user-turn default) and
(b) `json.load` of the whole file (what a loader that reads the tree at once pays before building
anything). The loader keeps every memory it builds, as any evaluation dataset does; what streaming
removes is the whole JSON tree in memory. Results: stdout and benchmarks/results/longmemeval.json.
"""
from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATASETS, ROOT, report  # noqa: E402

WORDS = ("memory session travel garden recipe budget meeting doctor violin mortgage marathon project "
         "weekend coffee library museum train ticket dinner birthday painting hiking camera").split()


def write_file(path: Path, questions: int, sessions: int) -> None:
    rng = random.Random(0)
    with open(path, "w", encoding="utf-8") as f:
        f.write("[")
        for q in range(questions):
            ids = [f"s{q}_{s}" for s in range(sessions)]
            item = {"question_id": f"q{q}", "question_type": "multi-session", "question": "Where did I travel?",
                    "answer": "Lisbon", "question_date": "2023/06/01 (Thu) 10:00",
                    "haystack_session_ids": ids,
                    "haystack_dates": [f"2023/05/{1 + s % 28:02d} (Mon) 09:{s % 60:02d}" for s in range(sessions)],
                    "haystack_sessions": [[{"role": "user" if t % 2 == 0 else "assistant",
                                            "content": " ".join(rng.choice(WORDS) for _ in range(60)),
                                            **({"has_answer": True} if s == 0 and t == 0 else {})}
                                           for t in range(10)] for s in range(sessions)],
                    "answer_session_ids": [ids[0]]}
            f.write(("," if q else "") + json.dumps(item))
        f.write("]")


PEAK = "import resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2)"


def peak_gb(code: str) -> float:
    out = subprocess.run([sys.executable, "-c", code + "\n" + PEAK], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    return round(float(out.stdout.strip().splitlines()[-1]), 3)


def sample_part() -> dict:
    import tempfile

    sys.path.insert(0, str(ROOT / "tests"))
    from longmemeval_fixture import build_fixture

    from lab.eval.runner import EvalOptions
    from lab.eval.dataset_ref import DatasetRef
    from lab.flow.evaluate import EvalCandidate, Overrides, evaluate
    from lab.workspace import Workspace

    with tempfile.TemporaryDirectory() as tmp:
        fixture = build_fixture(DATASETS / "longmemeval-sample" / "longmemeval_s_sample.json", Path(tmp), abstention=False)
        ws = Workspace(eval_root=ROOT / ".lab" / "bench" / "longmemeval-eval", datasets=DATASETS, tracking_uri=None)
        out = {}
        for done in evaluate(EvalCandidate(("lab", "bm25", "vector")), Overrides(), DatasetRef(str(fixture)),
                             EvalOptions(), ws, out=Path(tmp) / "runs", tracked=False):
            m = done.result.metrics
            out[done.config.name] = {"recall@10": round(m["metrics"]["recall@10"], 4),
                                     "session": m["longmemeval"]["session"], "turn": m["longmemeval"]["turn"],
                                     "scored_questions": m["longmemeval"]["questions"]}
    return {"questions": 3, "model": "all-MiniLM-L6-v2", "presets": out}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--questions", type=int, default=20)
    ap.add_argument("--sessions", type=int, default=500)
    args = ap.parse_args()
    folder = ROOT / ".lab" / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"longmemeval_m_shape_{args.questions}x{args.sessions}.json"
    if not path.is_file():
        write_file(path, args.questions, args.sessions)
    base = peak_gb("import lab.eval.longmemeval, polars")
    streamed = peak_gb(f"from lab.eval.longmemeval import load_longmemeval; d = load_longmemeval({str(path)!r}, "
                       "verify=False, corpus='all'); print(len(d.memories), file=__import__('sys').stderr)")
    whole = peak_gb(f"import json, lab.eval.longmemeval, polars; d = json.load(open({str(path)!r}))")
    report("longmemeval", {
        "sample": sample_part(),
        "m_shaped_load": {"file": {"questions": args.questions, "sessions_per_question": args.sessions, "turns_per_session": 10,
                 "bytes": path.stat().st_size, "memories": args.questions * args.sessions * 10},
                    "peak_rss_gb": {"imports_only": base, "lab_loader_streaming": streamed, "json_load_whole_file": whole},
                    "note": "each in a fresh process; the loader's peak includes every memory it keeps (the dataset), "
                "json.load's is the tree alone, before any memory is built"}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
