"""Builds a LongMemEval fixture in the official format from the shared sample (which is not):

    .venv/bin/python tests/longmemeval_fixture.py SAMPLE.json OUT_FOLDER

The sample (../shared/datasets/longmemeval-sample/, three genuine LongMemEval-S haystacks, MIT)
gives each haystack a list of questions; the official format has one question per haystack. The
fixture keeps, for each haystack, its first question with its own answer and answer sessions,
the haystack's date and sessions as they are, adds an abstention question per haystack (the next
haystack's question, ``<id>_abs``), and writes README.md beside it saying so. The tests
build it into a temporary folder; nothing derived from the shared data is committed.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

NAME = "longmemeval_s_fixture.json"


def build_fixture(sample: Path, out: Path, abstention: bool = True) -> Path:
    """The fixture under ``out``; without ``abstention``, the answerable questions only (half the
    haystacks to embed, for a test that measures retrieval alone)."""
    data = json.loads(Path(sample).read_text(encoding="utf-8"))
    questions = []
    for haystack in data:
        questions.append({
            "question_id": haystack["question_id"], "question_type": haystack["question_type"],
            "question": haystack["questions"][0], "answer": haystack["answers"][0],
            "question_date": haystack["question_date"],
            "haystack_session_ids": haystack["haystack_session_ids"], "haystack_dates": haystack["haystack_dates"],
            "haystack_sessions": haystack["haystack_sessions"],
            "answer_session_ids": haystack["answer_session_ids"][0],
        })
    # abstention questions, derived: each haystack asked the next haystack's question, whose
    # answer sessions it does not hold (the official _abs questions are edited questions instead)
    for i, haystack in enumerate(data if abstention else []):
        other = data[(i + 1) % len(data)]
        questions.append({
            "question_id": haystack["question_id"] + "_abs", "question_type": haystack["question_type"],
            "question": other["questions"][0], "answer": "The information provided is not enough.",
            "question_date": haystack["question_date"],
            "haystack_session_ids": haystack["haystack_session_ids"], "haystack_dates": haystack["haystack_dates"],
            "haystack_sessions": haystack["haystack_sessions"], "answer_session_ids": [],
        })
    out.mkdir(parents=True, exist_ok=True)
    path = out / NAME
    path.write_text(json.dumps(questions), encoding="utf-8")
    (out / "README.md").write_text(
        f"# {NAME}: derived, not official\n\nBuilt by tests/longmemeval_fixture.py from {Path(sample).name} "
        "(three genuine LongMemEval-S haystacks, MIT; see its README): for each haystack, its first question, "
        "answer and answer sessions, in LongMemEval's official format; and for each haystack an abstention "
        "question (`<id>_abs`, no answer sessions) that is the next haystack's first question asked of this "
        "haystack, which does not hold its answer (the official `_abs` questions are edited questions, not "
        "borrowed ones). Not an official LongMemEval file: its figures are not LongMemEval's.\n", encoding="utf-8")
    return path


if __name__ == "__main__":
    print(build_fixture(Path(sys.argv[1]), Path(sys.argv[2])))
