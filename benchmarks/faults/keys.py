"""Keys files and $LAB_API_KEYS: every malformed entry refused naming the problem (and never
echoing a secret), an anchor bomb refused at load, the file `lab keys create` writes (hashes only,
mode 0600), namespace patterns meaning what they say, and a server taking keys from the file and
the environment at once (a key of either works, a wrong one does not)."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import httpx

from outcome import Outcome, refused
from servers import ENV, Bundles, lab, real_encoder_case, real_server

from serving import ROOT

SECRET = "lab_s3cretvalue-not-to-be-echoed"
GOOD_HASH = "a" * 64

FILES: list[tuple[str, str, str]] = [  # (case, the keys file's text, what the refusal must name)
    ("a secret in a keys file", f"keys:\n  - {{name: a, key: {SECRET}, scope: read, namespaces: ['*']}}\n", "sha256"),
    ("sha256 not hex", "keys:\n  - {name: a, sha256: nothex, scope: read, namespaces: ['*']}\n", "sha256"),
    ("sha256 in capitals", f"keys:\n  - {{name: a, sha256: {'A' * 64}, scope: read, namespaces: ['*']}}\n", "sha256"),
    ("scope admin", f"keys:\n  - {{name: a, sha256: {GOOD_HASH}, scope: admin, namespaces: ['*']}}\n", "scope"),
    ("pattern team-a/**", f"keys:\n  - {{name: a, sha256: {GOOD_HASH}, namespaces: ['team-a/**']}}\n", "team-a/**"),
    ("pattern ../etc", f"keys:\n  - {{name: a, sha256: {GOOD_HASH}, namespaces: ['../etc']}}\n", "../etc"),
    ("namespaces empty", f"keys:\n  - {{name: a, sha256: {GOOD_HASH}, namespaces: []}}\n", "namespaces"),
    ("a name twice", f"keys:\n  - {{name: a, sha256: {GOOD_HASH}, namespaces: ['*']}}\n"
     f"  - {{name: a, sha256: {'b' * 64}, namespaces: ['*']}}\n", "'a'"),
    ("an unknown field", f"keys:\n  - {{name: a, sha256: {GOOD_HASH}, namespaces: ['*'], expires: never}}\n", "expires"),
    ("not a list", "keys: everyone\n", "list"),
    ("YAML syntax", "keys: [\n", "yaml"),
]


def bomb() -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    return "\n".join(lines) + f"\nkeys:\n  - {{name: a, sha256: {GOOD_HASH}, namespaces: *a8}}\n"


def key_cases(tmp: Path, bundles: Bundles, short: bool) -> list[Outcome]:
    from lab.serve.auth import ApiKey, KeyRing, add_key

    out: list[Outcome] = []
    for i, (case, text, names) in enumerate(FILES if not short else FILES[:5]):
        path = tmp / f"keys{i}.yaml"
        path.write_text(text)
        got = refused("keys", f"keys file: {case}", lambda p=path: KeyRing.load(p, env={}), names)
        if SECRET in got.observed:
            got.ok, got.observed = False, got.observed + " -- the SECRET is echoed"
        out.append(got)
    path = tmp / "bomb.yaml"
    path.write_text(bomb())
    probe = subprocess.run([sys.executable, "-c", "import sys\nfrom lab.serve.auth import KeyRing\n"
                            "try:\n    KeyRing.load(sys.argv[1], env={})\nexcept Exception as e:\n"
                            "    print(type(e).__name__, e)\n", str(path)],
                           capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=120)
    said = (probe.stdout + probe.stderr).strip()
    out.append(Outcome("keys", "keys file: an anchor bomb (10^9 leaves)", "ValidationError naming the limit",
                       said[-160:], said.startswith("ValidationError") and ("10000" in said or "10,000" in said)))
    for case, value, names in (
            ("$LAB_API_KEYS not YAML", f"[{{name: a, key: {SECRET}", "$LAB_API_KEYS"),
            ("$LAB_API_KEYS with a bad scope", f"[{{name: a, key: {SECRET}, scope: root, namespaces: ['*']}}]", "scope"),
            ("$LAB_API_KEYS with a bad pattern", f"[{{name: a, key: {SECRET}, namespaces: ['a//b']}}]", "a//b")):
        got = refused("keys", case, lambda v=value: KeyRing.load(None, env={"LAB_API_KEYS": v}), names)
        if SECRET in got.observed:
            got.ok, got.observed = False, got.observed + " -- the SECRET is echoed"
        out.append(got)
    ring = KeyRing.load(None, env={"LAB_API_KEYS": f"[{{name: env, key: {SECRET}, scope: write, namespaces: ['*']}}]"})
    found = ring.find(SECRET)
    out.append(Outcome("keys", "$LAB_API_KEYS with a secret", "found by its secret, kept only as a hash",
                       f"found {found.name if found else None}; secret kept {SECRET in repr(ring)}",
                       found is not None and SECRET not in repr(ring)))
    made = tmp / "made.yaml"
    secret = add_key(made, "agent", "write", ["team-a/*"])
    mode = stat.S_IMODE(os.stat(made).st_mode)
    out.append(Outcome("keys", "the file `lab keys create` writes", "mode 0600, the hash, never the secret",
                       f"mode {oct(mode)}; secret in file {secret in made.read_text()}",
                       mode == 0o600 and secret not in made.read_text()))
    out.append(refused("keys", "a second key of the same name", lambda: add_key(made, "agent", "read", ["*"]), "agent"))
    listed = lab("keys", "list", "--keys-file", made)
    out.append(Outcome("keys", "`lab keys list`", "names and scopes, no hash", listed.stdout.strip()[:120].replace("\n", " "),
                       listed.returncode == 0 and "agent" in listed.stdout and "sha256" not in listed.stdout
                       and KeyRing.load(made, env={}).keys[0].sha256 not in listed.stdout))
    key = ApiKey("k", GOOD_HASH, "write", ("team-a/*",))
    checks = {"team-a/x": True, "team-a/x/y": True, "team-a": False, "team-ab/x": False, "team-b": False}
    got = {ns: key.can(ns) for ns in checks}
    out.append(Outcome("keys", "pattern team-a/*", str(checks), str(got), got == checks))
    if not short:
        empty = tmp / "empty.yaml"
        empty.write_text("keys: []\n")
        run = lab("serve", "--bundle", bundles.fake, "--store", tmp / "never", "--auth", "on", "--keys-file", empty,
                  "--port", "1", timeout=120)
        said = (run.stdout + run.stderr).strip().splitlines()
        out.append(Outcome("keys", "lab serve --auth on with no keys", "exit 2 naming the missing keys",
                           f"exit {run.returncode}: {(said or ['-'])[-1][:150]}",
                           run.returncode == 2 and "no API keys" in (said or [""])[-1]))
    out += served(tmp, bundles, made, secret)
    return out


def served(tmp: Path, bundles: Bundles, keys_file: Path, file_secret: str) -> list[Outcome]:
    """A server (the real query encoder) with keys from a file and from $LAB_API_KEYS."""
    from lab.serve.auth import KeyRing

    env = {**ENV, "LAB_API_KEYS": f"[{{name: from-env, key: {SECRET}, scope: read, namespaces: ['team-a/*']}}]"}
    srv = real_server(bundles, tmp / "keys-store", "--auth", "on", "--keys-file", str(keys_file), env=env).start()
    out = []
    try:
        out.append(real_encoder_case("keys", srv, file_secret))
        h = lambda k: {"Authorization": f"Bearer {k}"}  # noqa: E731
        codes = {name: httpx.get(srv.url + "/v1/namespaces", headers=h(k), timeout=30).status_code
                 for name, k in (("file key", file_secret), ("env key", SECRET), ("wrong key", "lab_wrong"),
                                 ("the file's hash as a key", KeyRing.load(keys_file, env={}).keys[0].sha256))}
        out.append(Outcome("keys", "a server with keys from the file and $LAB_API_KEYS",
                           "file key 200, env key 200, wrong 401, a hash is not a key 401", str(codes),
                           codes == {"file key": 200, "env key": 200, "wrong key": 401, "the file's hash as a key": 401}))
        r = httpx.post(srv.url + "/v1/memories", json={"namespace": "team-a/x", "content": "x"}, headers=h(SECRET),
                       timeout=30)
        out.append(Outcome("keys", "the env key's scope (read)", "403 read-only", f"{r.status_code} {r.text[:100]}",
                           r.status_code == 403 and "read-only" in r.text))
    finally:
        srv.stop()
    log = srv.log()
    out.append(Outcome("keys", "server log", "no secret, no traceback",
                       f"secret {'FOUND' if SECRET in log or file_secret in log else 'absent'}; "
                       f"Traceback {'found' if 'Traceback' in log else 'none'}",
                       SECRET not in log and file_secret not in log and "Traceback" not in log))
    return out

