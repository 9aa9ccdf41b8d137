"""Adapter files given to `lab eval --system FILE.yaml`, each run as the command a user types,
with secrets in its environment and a recorder in this process standing in for the remote system:
a ``${VAR}`` the file does not declare (``reads_env``) is refused before anything is sent or run;
a declared value never shows in an error; a ``kind: python`` file is checked before its module is
imported (and a standard-library callable never runs); a YAML anchor bomb is refused at load,
naming the limit. An adapter file is trusted like code: what it declares, it may send."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from outcome import Outcome
from servers import ENV, LAB
from upstream import Upstream

from serving import ROOT

SECRETS = {"SOME_SECRET": "s3cr3t-value-123", "AWS_SECRET_ACCESS_KEY": "aws-secret-xyz-789",
           "SECRET_URL": "http://alice:pa55word-77@127.0.0.1:1/mem?token=tok-55-secret"}
TAIL = """save: {{method: POST, path: /save, batch: 256, body: {{memories: {{$each: {{id: "{{id}}", content: "{{content}}"}}}}}}, ids: "memories[*].id"}}
search: {{method: POST, path: /search, body: {{q: "{{query}}", k: "{{k}}"}}, hits: "results[*]", id: id}}
"""
MCP_TAIL = ("save: {tool: memory_save, arguments: {content: '{content}'}, id: id}\n"
            "search: {tool: memory_search, arguments: {query: '{query}'}, hits: 'results[*]', id: memory_id}\n")
SIDE_EFFECT_MODULE = '''import pathlib
pathlib.Path(__file__).with_name("imported.marker").write_text("imported")
def not_a_system(*args, **kwargs):
    pathlib.Path(__file__).with_name("called.marker").write_text("called")
'''


def bomb(depth: int, rec: str) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, depth)]
    return (f"kind: http\nname: bomb\nbase_url: {rec}\nsettings:\n" + "\n".join("  " + ln for ln in lines) +
            "\nsave: {method: POST, path: /save, batch: 256, body: {memories: {$each: {id: '{id}', content: '{content}'}}}, "
            "ids: 'memories[*].id'}\n"
            f"search: {{method: POST, path: /search, body: {{q: '{{query}}', blob: *a{depth - 1}}}, hits: 'results[*]', id: id}}\n")


def adapter_cases(tmp: Path, short: bool) -> list[Outcome]:
    folder = tmp / "adapters"
    folder.mkdir()
    (folder / "sidefx.py").write_text(SIDE_EFFECT_MODULE)
    out: list[Outcome] = []
    with Upstream() as rec:
        base = rec.base
        files: list[tuple[str, str, dict[str, Any]]] = [
            # (name, file text, what to check)
            ("an undeclared ${VAR} in base_url", f"kind: http\nname: undeclared\nbase_url: {base}/leak/${{SOME_SECRET}}\n"
             + TAIL.format(), {"refused": ["SOME_SECRET", "reads_env"], "sent": 0}),
            ("a declared URL variable, unreachable", "kind: http\nname: declared-url\nreads_env: [SECRET_URL]\n"
             "base_url: ${SECRET_URL}\n" + TAIL.format(), {"fails": True}),
            ("kind python: a standard-library module (this:Nothing)", "kind: python\nclass: 'this:Nothing'\n",
             {"refused": ["this"], "not_in_output": "Beautiful is better than ugly"}),
            ("an anchor bomb (10^9 leaves) in settings", bomb(9, base), {"refused": ["10,000|10000"], "sent": 0,
                                                                          "mem_kb": 4_000_000}),
        ]
        if not short:
            files += [
                ("an undeclared auth variable", f"kind: http\nname: auth-undeclared\nbase_url: {base}\n"
                 "auth: {header: X-Token, env: AWS_SECRET_ACCESS_KEY}\n" + TAIL.format(),
                 {"refused": ["AWS_SECRET_ACCESS_KEY", "reads_env"], "sent": 0}),
                ("an undeclared ${VAR} in an MCP header", f"kind: mcp\nname: mcp-headers\nurl: {base}/mcp\n"
                 "headers: {X-Token: '${AWS_SECRET_ACCESS_KEY}'}\ntimeout_s: 5\n" + MCP_TAIL,
                 {"refused": ["AWS_SECRET_ACCESS_KEY", "reads_env"], "sent": 0}),
                ("an undeclared ${VAR} in an MCP command", "kind: mcp\nname: mcp-cmd\ncommand: [sh, -c, 'echo "
                 f"$0 > {folder}/command.marker', '${{SOME_SECRET}}']\ntimeout_s: 5\n" + MCP_TAIL,
                 {"refused": ["SOME_SECRET", "reads_env"], "marker": "command.marker"}),
                ("a declared auth secret, unreachable host", "kind: http\nname: auth-declared\nreads_env: "
                 "[AWS_SECRET_ACCESS_KEY]\nbase_url: http://127.0.0.1:1/x\n"
                 "auth: {header: X-Token, env: AWS_SECRET_ACCESS_KEY}\n" + TAIL.format(), {"fails": True}),
                ("a declared auth secret goes only where the file says", "kind: http\nname: auth-where\nreads_env: "
                 f"[AWS_SECRET_ACCESS_KEY]\nbase_url: {base}\nauth: {{header: X-Token, env: AWS_SECRET_ACCESS_KEY}}\n"
                 + TAIL.format(), {"only_header": "x-token"}),
                ("kind python: os:system", "kind: python\nclass: os:system\noptions: {command: 'touch "
                 f"{folder}/os.marker'}}\n", {"refused": ["os"], "marker": "os.marker"}),
                ("kind python: subprocess:Popen", "kind: python\nclass: subprocess:Popen\noptions: {args: [touch, "
                 f"{folder}/popen.marker]}}\n", {"refused": ["subprocess"], "marker": "popen.marker"}),
                ("kind python: an unknown field, checked before the import",
                 "kind: python\nclass: sidefx:not_a_system\ncolour: red\n",
                 {"refused": ["colour"], "marker": "imported.marker"}),
                ("kind python: a function, not a MemorySystem", "kind: python\nclass: sidefx:not_a_system\n",
                 {"refused": ["MemorySystem"], "marker": "called.marker"}),
                ("an anchor bomb (10^6 leaves) in a search body", bomb(6, base),
                 {"refused": ["10,000|10000"], "sent": 0, "mem_kb": 4_000_000}),
            ]
        for name, text, want in files:
            path = folder / f"{len(out)}.yaml"
            path.write_text(text)
            out.append(run_case(name, path, want, rec, folder))
    return out


def run_case(name: str, path: Path, want: dict[str, Any], rec: Upstream, folder: Path) -> Outcome:
    n0 = len(rec.received)
    cmd = [*LAB, "eval", "--dataset", "demo", "--system", str(path), "--no-track", "--quiet", "--out",
           str(folder / "runs")]
    if want.get("mem_kb"):
        cmd = ["bash", "-c", f"ulimit -v {want['mem_kb']}; exec " + " ".join(cmd)]
    env = {**ENV, **SECRETS, "PYTHONPATH": os.pathsep.join([str(folder), ENV.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    t0 = time.perf_counter()
    try:
        got = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=240)
        code, said = got.returncode, got.stdout + got.stderr
    except subprocess.TimeoutExpired:
        code, said = "timeout", ""
    seconds = time.perf_counter() - t0
    sent = rec.since(n0)
    last = next((ln for ln in reversed(said.strip().splitlines()) if ln.strip()), "(nothing)")
    shown = [k for k, v in SECRETS.items() if any(part in said for part in _parts(v))]
    problems = []
    if shown:
        problems.append(f"secret(s) {shown} in the output")
    if "Traceback" in said or "MemoryError" in said:
        problems.append("a traceback")
    if "refused" in want:
        if code != 2:
            problems.append(f"exit {code}, not 2")
        for names in want["refused"]:
            if not any(n in said for n in names.split("|")):
                problems.append(f"{names!r} not named")
    if "sent" in want and len(sent) != want["sent"]:
        problems.append(f"{len(sent)} requests sent")
    if want.get("marker") and (folder / want["marker"]).exists():
        problems.append(f"{want['marker']} written: it ran")
    if want.get("not_in_output") and want["not_in_output"] in said:
        problems.append("the module ran (its output printed)")
    if want.get("fails") and code in (0, "timeout"):
        problems.append(f"exit {code}")
    if want.get("only_header"):
        secret = SECRETS["AWS_SECRET_ACCESS_KEY"]
        where = sorted({k for g in sent for k, v in g["headers"].items() if secret in v}
                       | ({"path/query"} if any(secret in g["path"] + g["query"] for g in sent) else set())
                       | ({"body"} if any(secret in json.dumps(g["body"]) for g in sent) else set()))
        if code != 0 or where != [want["only_header"]]:
            problems.append(f"exit {code}; the secret reached {where}")
    expected = ("refused (exit 2) naming " + " and ".join(want["refused"]) if "refused" in want
                else "fails" if want.get("fails") else "runs") + "; no secret shown"
    return Outcome("adapters", name, expected, f"exit {code} in {seconds:.1f} s, {len(sent)} requests: {last[:150]}"
                   + (f" -- {'; '.join(problems)}" if problems else ""), not problems)


def _parts(value: str) -> list[str]:
    """The parts of a secret that must not show: the whole, and a URL's password and query value."""
    if "://" in value:
        return [value, "pa55word-77", "tok-55-secret"]
    return [value]

