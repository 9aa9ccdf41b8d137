"""Hostile files at the evaluation commands: LongMemEval files (deep nesting, binary bytes, an
evidence turn with no text, a has_answer or an answer of the wrong kind), damaged run folders given
to `lab compare`, a golden's ``reference_time`` (`lab goldens check` and `lab eval` refuse the same
values with the same line), a damaged ``made_by.json``, symlinked run folders, and a writer killed
between publish()'s two renames, then the next writes. Each refusal is checked for the file and the
problem it names. The short form runs the loaders and publish() in this process (a real process is
killed between the renames) and one pair of commands; the full form runs every case as the command
a user types (`lab eval`, `lab compare`, `lab goldens check`), the kill inside a real `lab eval`."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from outcome import Outcome
from servers import ENV, LAB

from serving import ROOT

GROUP = "files"
FAKE = "fake-hash-256"
# os.rename held right after the earlier run was renamed aside: the process says so in a file
# and waits to be killed (argv[1]: that file; the rest: the command, or "publish OUT")
HELD = r"""
import os, sys, time
from pathlib import Path
real = os.rename
def held(src, dst, *a, **k):
    real(src, dst, *a, **k)
    if ".replaced-" in os.fspath(dst):
        Path(sys.argv[1]).write_text(os.fspath(dst))
        time.sleep(600)
os.rename = held
if sys.argv[2] == "publish":
    from lab.eval.run_folder import maker, publish
    publish(Path(sys.argv[3]), maker("search configuration", "lab", "demo"),
            lambda f: (f / "metrics.json").write_text("second"))
else:
    from lab.cli import main
    sys.exit(main(sys.argv[2:]))
"""


def _q(i: int = 0, **over: Any) -> dict[str, Any]:
    q = {"question_id": f"q{i}", "question_type": "single-session-user", "question": f"what colour is item {i}?",
         "answer": "red", "question_date": "2023/05/30 (Tue) 23:40", "haystack_dates": ["2023/05/20 (Sat) 02:21"],
         "haystack_session_ids": [f"s{i}"], "answer_session_ids": [f"s{i}"],
         "haystack_sessions": [[{"role": "user", "content": f"item {i} is red", "has_answer": True},
                                {"role": "assistant", "content": "noted"}]]}
    return {**q, **over}


DEEP = json.dumps([_q()]).replace('"haystack_sessions": [[', '"haystack_sessions": [[' + "[" * 20000, 1).replace(
    "]]", "]]" + "]" * 20000, 1).encode()
# (case, the file's bytes, what the refusal must name)
LONGMEMEVAL: list[tuple[str, bytes, tuple[str, ...]]] = [
    ("deep nesting in a session", DEEP, ("mine.json question 1 ('q0')", "nested deeper")),
    ("binary bytes", b"\x00\xff" * 5000, ("mine.json", "not UTF-8 text")),
    *((case, json.dumps([_q(), _q(1, haystack_sessions=[[{"role": "user", "content": text, "has_answer": flag}]])])
       .encode(), ("q1 session s1 turn 0", *said)) for case, text, flag, said in (
        ("an evidence turn of white space", " \n", True, ("evidence turn", "has no text")),
        ("an empty evidence turn", "", True, ("evidence turn", "has no text")),
        ("has_answer a string", "x", "yes", ("has_answer must be true or false",)))),
    ("answer NaN", json.dumps([_q()]).replace('"red"', "NaN", 1).encode(), ("(q0)", "answer must be a text")),
]
REFERENCE_TIMES = [("1e400", "'1e400' is not an ISO 8601"), (".inf", "got float"), ('"tomorrow"', "'tomorrow' is not"),
                   ("5", "got int"), ("[2026]", "got list")]


def _popen(work: Path, args: list[Any], out: Any = subprocess.DEVNULL) -> subprocess.Popen:
    """`lab ARGS` (or, with HELD first, that script) with the group's own evaluation stores."""
    head = [sys.executable, "-c"] if args and args[0] == HELD else LAB
    return subprocess.Popen([*head, *map(str, args)], cwd=ROOT, env={**ENV, "LAB_EVAL_ROOT": str(work / "eval")},
                            stdout=out, stderr=subprocess.STDOUT, text=True)


def _lab(work: Path, *args: Any, timeout: float = 300) -> tuple[int, list[str], str]:
    child = _popen(work, list(args), subprocess.PIPE)
    said = child.communicate(timeout=timeout)[0]
    return child.returncode, [line for line in said.splitlines() if line.strip()], said


def _one_line(case: str, work: Path, args: list[Any], names: tuple[str, ...], code: int = 2) -> Outcome:
    """A command refusing in one line (exit ``code``) that names each of ``names``, no traceback."""
    rc, lines, said = _lab(work, *args)
    last = lines[-1] if lines else "(nothing)"
    ok = rc == code and len(lines) == 1 and "Traceback" not in said and all(n in last for n in names)
    return Outcome(GROUP, case, f"exit {code}, one line naming {list(names)}", f"exit {rc}, {len(lines)} line(s): "
                   f"{last[:200]}", ok)


def _refused(case: str, call: Callable[[], Any], names: tuple[str, ...]) -> Outcome:
    """lab's own error, in one line naming each of ``names``; anything else fails the case."""
    from lab.errors import LabError

    try:
        call()
    except LabError as exc:
        said = str(exc)
        ok = "\n" not in said and all(n in said for n in names)
        return Outcome(GROUP, case, f"refused naming {list(names)}", f"{type(exc).__name__}: {said[:200]}", ok)
    except Exception as exc:  # a crash
        return Outcome(GROUP, case, f"refused naming {list(names)}", f"CRASH {type(exc).__name__}: {exc}"[:200], False)
    return Outcome(GROUP, case, f"refused naming {list(names)}", "accepted", False)


def longmemeval_cases(work: Path, short: bool) -> list[Outcome]:
    from lab.eval.goldens import load_dataset

    out = []
    for n, (case, data, names) in enumerate(LONGMEMEVAL):
        folder = work / f"lme{n}"
        folder.mkdir()
        (folder / "mine.json").write_bytes(data)  # a name that is not LongMemEval's: told by content
        path = folder / "mine.json"
        out.append(_refused(f"LongMemEval loader: {case}", lambda: load_dataset(str(path)), names))
        if not short:
            out.append(_one_line(f"lab eval LongMemEval: {case}", work, ["eval", "--dataset", path, "--preset", "bm25",
                                 "--model", FAKE, "--no-track", "--quiet", "--out", work / "runs"], names))
    return out


def reference_time_cases(work: Path, short: bool) -> list[Outcome]:
    from lab.eval.goldens import describe_golden, load_dataset

    demo = (ROOT / "goldens" / "demo.yaml").read_text()
    out = []
    for n, (raw, problem) in enumerate(REFERENCE_TIMES):
        golden = work / f"ref{n}.yaml"
        golden.write_text(demo.replace('reference_time: "2026-03-14T18:00:00Z"', f"reference_time: {raw}"))
        names = (str(golden), "reference_time", problem)
        out.append(_refused(f"goldens check loader: reference_time {raw}", lambda: describe_golden(golden), names))
        out.append(_refused(f"eval loader: reference_time {raw}", lambda: load_dataset(str(golden)), names))
        if short and n:
            continue  # the short form runs the two commands for the first value only
        check = _one_line(f"lab goldens check: reference_time {raw}", work, ["goldens", "check", golden], names)
        run = _one_line(f"lab eval: reference_time {raw}", work, ["eval", "--dataset", golden, "--model", FAKE,
                                                                 "--no-track", "--quiet", "--out", work], names)
        same = check.observed.split(": ", 1)[-1] == run.observed.split(": ", 1)[-1]
        out += [check, run, Outcome(GROUP, f"goldens check and eval agree: reference_time {raw}", "the same line",
                                    "the same line" if same else f"{check.observed} | {run.observed}", same)]
    golden.write_text(demo.replace('reference_time: "2026-03-14T18:00:00Z"',
                                   "reference_time: 2026-03-14 20:00:00+02:00"))  # YAML reads a datetime
    both = (describe_golden(golden)["reference_time"], load_dataset(str(golden)).reference_time)
    out.append(Outcome(GROUP, "a YAML date-time as reference_time", "ISO 8601 UTC text, the same both ways", str(both),
                       both == ("2026-03-14T18:00:00Z",) * 2))
    return out


def _complete(folder: Path) -> bool:
    return folder.is_dir() and all((folder / f).is_file() for f in ("made_by.json", "metrics.json"))


def _hidden(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def _synthetic_run(out: Path, values: list[float]) -> Path:
    import polars as pl

    from lab.eval.run_folder import maker, publish

    def write(folder: Path) -> None:
        (folder / "metrics.json").write_text(json.dumps({"dataset": "demo", "metrics": {"recall@10": 0.5}}))
        pl.DataFrame({"qid": [f"q{i}" for i in range(len(values))], "recall@10": values}).write_parquet(
            folder / "per_question.parquet")

    return publish(out, maker("search configuration", out.name, "demo"), write)


COMPARE: list[tuple[str, str, Any, str]] = [
    ("metrics.json not JSON", "metrics.json", b"{oops", "is not valid JSON"),
    ("metrics.json with NaN", "metrics.json", b'{"dataset": "demo", "m": NaN}', "holds the number NaN"),
    ("metrics.json deep nesting", "metrics.json", b"[" * 100000 + b"]" * 100000, "nests deeper"),
    ("metrics.json a list", "metrics.json", b"[]", "not an object naming its dataset"),
    ("metrics.json -> /dev/zero", "metrics.json", Path("/dev/zero"), "not a regular file"),
    ("per_question.parquet garbage", "per_question.parquet", b"PAR1garbagePAR1", "not a readable Parquet file"),
    ("per_question.parquet -> /dev/urandom", "per_question.parquet", Path("/dev/urandom"), "not a regular file"),
    ("made_by.json a list", "made_by.json", b"[]", "is a JSON list"),
]


def compare_cases(work: Path, short: bool, runs: tuple[Path, Path] | None) -> list[Outcome]:
    from lab.eval.report import load_run

    a, b = runs or (_synthetic_run(work / "cmp" / "a", [0.0, 1.0, 1.0]), _synthetic_run(work / "cmp" / "b", [1.0] * 3))
    out = []
    for n, (case, name, data, problem) in enumerate(COMPARE):
        bad = work / "cmp" / f"bad{n}"
        shutil.copytree(b, bad)
        (bad / name).unlink()
        (bad / name).symlink_to(data) if isinstance(data, Path) else (bad / name).write_bytes(data)
        names = (f"bad{n}/{name}", problem)
        out.append(_refused(f"compare loader: {case}", lambda: load_run(bad), names))
        if not short:
            out.append(_one_line(f"lab compare: {case}", work, ["compare", a, bad], names))
    return out


def made_by_cases(work: Path, short: bool, out_root: Path | None) -> list[Outcome]:
    from lab.eval.run_folder import MADE_BY, maker, publish

    out = []
    for n, (label, data, problem) in enumerate([("not JSON", b"{oops", "is not valid JSON"),
                                                ("a list", b"[]", "is a JSON list"),
                                                ("binary", b"\x00\xff\xfe", "is not UTF-8 text"),
                                                ("deep", b"[" * 100000 + b"]" * 100000, "nests deeper")]):
        if out_root is None:  # in this process: publish() itself
            folder = _synthetic_run(work / "made" / f"m{n}", [1.0])
            (folder / MADE_BY).write_bytes(data)
            case = _refused(f"publish: made_by.json {label}", lambda: publish(folder, maker(
                "search configuration", folder.name, "demo"), lambda f: None), (f"m{n}/made_by.json", problem))
        else:  # `lab eval` into the run folder it wrote before
            folder = out_root / "demo+fake-bm25"
            (folder / MADE_BY).write_bytes(data)
            case = _one_line(f"lab eval: made_by.json {label}", work, _eval(out_root, "bm25"),
                             ("demo+fake-bm25/made_by.json", problem))
        kept = (folder / MADE_BY).read_bytes() == data
        case.ok, case.observed = case.ok and kept, f"{case.observed}; {'untouched' if kept else 'CHANGED'}"
        out.append(case)
        (folder / MADE_BY).unlink()  # a folder without a maker record: replaced whole by the next write
    return out


def _eval(out_root: Path, preset: str = "lab") -> list[Any]:
    return ["eval", "--dataset", "demo", "--preset", preset, "--model", FAKE, "--no-track", "--quiet",
            "--out", out_root]


def symlink_cases(work: Path, short: bool) -> list[Outcome]:
    from lab.eval.run_folder import maker, publish

    runs, disk, home = work / "links", work / "other-disk", work / "home"
    for p in (runs, disk, home):
        p.mkdir()
    (home / "notes.txt").write_text("keep me")

    def write(root: Path, text: str) -> int:  # publish() here, or `lab eval` (exit code)
        if not short:
            return _lab(work, *_eval(root))[0]
        publish(root / "demo+fake-lab", maker("search configuration", "lab", "demo"),
                lambda f: (f / "metrics.json").write_text(text))
        return 0

    write(disk, "before")
    before = (disk / "demo+fake-lab" / "metrics.json").read_text()
    link = runs / "demo+fake-lab"
    link.symlink_to(disk / "demo+fake-lab", target_is_directory=True)
    rc, target = write(runs, "through"), disk / "demo+fake-lab"
    changed = _complete(target) and (target / "metrics.json").read_text() != before
    out = [Outcome(GROUP, "a run folder that is a symlink", "written through; link kept; no leftover",
                   f"exit {rc}; link {link.is_symlink()}; target rewritten {changed}; leftovers "
                   f"{_hidden(runs) + _hidden(disk)}", rc == 0 and link.is_symlink() and changed
                   and not _hidden(runs) and not _hidden(disk))]
    for case, to, names in (("a symlink to a folder of other files", home, ("home exists and is not a run folder",)),
                            ("a symlink to nothing", work / "gone", ("is a symlink to", "does not resolve"))):
        link.unlink()
        link.symlink_to(to, target_is_directory=True)
        got = _refused(f"publish: {case}", lambda: write(runs, "x"), names) if short else \
            _one_line(f"lab eval: {case}", work, _eval(runs), names, code=4 if to == home else 2)
        kept = sorted(p.name for p in home.iterdir()) == ["notes.txt"] and link.is_symlink() and not _hidden(runs)
        got.ok, got.observed = got.ok and kept, f"{got.observed}; {'nothing touched' if kept else 'TOUCHED'}"
        out.append(got)
    return out


def _held(work: Path, args: list[Any]) -> tuple[int, str]:
    """Run ``args`` under HELD, SIGKILL it once it is between the renames; (pid, its exit)."""
    said = work / f"between-{time.monotonic_ns()}"
    child = _popen(work, [HELD, said, *args])
    deadline = time.monotonic() + 300
    while not said.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    if said.exists():
        os.kill(child.pid, signal.SIGKILL)
    child.kill()
    return child.pid, f"exit {child.wait(timeout=30)}" + ("" if said.exists() else " before the renames")


def kill_cases(work: Path, short: bool) -> list[Outcome]:
    from lab.errors import ConflictError
    from lab.eval.run_folder import maker, publish

    runs = work / "kill"
    out_dir = runs / "demo+fake-lab"
    if short:
        publish(out_dir, maker("search configuration", "lab", "demo"), lambda f: (f / "metrics.json").write_text("1"))
        pid, how = _held(work, ["publish", out_dir])
    else:
        assert _lab(work, *_eval(runs))[0] == 0
        pid, how = _held(work, _eval(runs))
    copies = [runs / f".demo+fake-lab.{k}-{pid}" for k in ("replaced", "writing")]
    ok = how == f"exit {-signal.SIGKILL}" and not out_dir.exists() and all(_complete(c) for c in copies)
    out = [Outcome(GROUP, "SIGKILL between publish's two renames", "no folder at its place; both copies whole, hidden",
                   f"{how}; folder {'there' if out_dir.exists() else 'gone'}; whole {[_complete(c) for c in copies]}",
                   ok)]
    killed = (copies[1] / "metrics.json").read_text() if ok else None  # the killed run's own figures file
    if short:  # the next write is of another maker: refused, after it put the killed run's copy back
        try:
            publish(out_dir, maker("memory system", "lab", "demo"), lambda f: None)
            said = "accepted"
        except ConflictError as exc:
            said = str(exc)[:120]
        back = (out_dir / "metrics.json").read_text() if _complete(out_dir) else "(none)"
        out.append(Outcome(GROUP, "the next write puts the newest whole copy back first", "the killed run's copy; "
                           "no leftover", f"{said}; metrics {back!r}; leftovers {_hidden(runs)}",
                           back == killed and not _hidden(runs) and said.startswith("run folder")))
        return out
    # the next `lab eval`, killed as soon as it starts writing: the copy it put back stays
    child = _popen(work, _eval(runs))
    deadline = time.monotonic() + 300
    while child.poll() is None and not (runs / f".demo+fake-lab.writing-{child.pid}").exists() \
            and time.monotonic() < deadline:
        time.sleep(0.003)
    child.kill()
    child.wait(timeout=30)
    back = _complete(out_dir) and (out_dir / "metrics.json").read_text() == killed
    out.append(Outcome(GROUP, "the next eval killed as it starts writing", "the killed run's copy back in place",
                       f"folder whole {_complete(out_dir)}; the killed run's {back}; leftovers {_hidden(runs)}", back))
    rc = _lab(work, *_eval(runs))[0]
    out.append(Outcome(GROUP, "the eval after that", "exit 0; whole; no leftover",
                       f"exit {rc}; whole {_complete(out_dir)}; leftovers {_hidden(runs)}",
                       rc == 0 and _complete(out_dir) and not _hidden(runs)))
    ps = [_popen(work, _eval(runs), subprocess.PIPE) for _ in range(2)]
    said = [p.communicate(timeout=600)[0] for p in ps]
    ok = [p.returncode for p in ps] == [0, 0] and not any("Traceback" in s for s in said) and _complete(out_dir)
    out.append(Outcome(GROUP, "two evals into one run folder at once", "both exit 0; whole; no leftover",
                       f"exits {[p.returncode for p in ps]}; whole {_complete(out_dir)}; leftovers {_hidden(runs)}",
                       ok and not _hidden(runs)))
    return out


def _part(name: str, run: Callable[[], list[Outcome]]) -> list[Outcome]:
    """A part that crashes is one failed case: the other parts still report theirs."""
    try:
        return run()
    except Exception as exc:
        said = f"CRASH {type(exc).__name__}: {exc}"[:300]
        return [Outcome(GROUP, f"{name}: ran to its end", "no crash", said, False)]


def cases(work: Path, bundles: Any, short: bool, seed: int) -> list[Outcome]:
    out = _part("LongMemEval", lambda: longmemeval_cases(work, short))
    out += _part("reference_time", lambda: reference_time_cases(work, short))
    real = None
    if not short:  # two real run folders, by `lab eval`, for compare and made_by.json
        rc, lines, _ = _lab(work, "eval", "--dataset", "demo", "--preset", "lab", "bm25", "--model", FAKE,
                            "--no-track", "--quiet", "--out", work / "real")
        out.append(Outcome(GROUP, "two run folders by lab eval", "exit 0",
                           f"exit {rc}: {lines[-1][:120] if lines else ''}", rc == 0))
        real = (work / "real" / "demo+fake-lab", work / "real" / "demo+fake-bm25")
    out += _part("compare", lambda: compare_cases(work, short, real))
    out += _part("made_by.json", lambda: made_by_cases(work, short, None if short else work / "real"))
    out += _part("symlinks", lambda: symlink_cases(work, short))
    out += _part("kill between renames", lambda: kill_cases(work, short))
    return out
