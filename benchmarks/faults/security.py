"""Security with auth on: every operation without a key or with a wrong one, cross-namespace
access by id and by name, the read-only scope, path traversal, rate limits and failed logins."""
from __future__ import annotations

from pathlib import Path
from outcome import Outcome, status

from serving import Server

from lab.serve.auth import add_key


def _example_path(path: str, mid: str) -> str:
    return (path.replace("{memory_id}", mid).replace("{namespace}", "team-a/x"))


def security_cases(tmp: Path, bundle: Path) -> list[Outcome]:
    keys = tmp / "keys.yaml"
    admin = add_key(keys, "admin", "write", ["*"])
    team = add_key(keys, "team", "write", ["team-a/*"])
    reader = add_key(keys, "reader", "read", ["*"])
    out: list[Outcome] = []
    with Server(bundle, tmp / "secure-store", "--auth", "on", "--keys-file", str(keys), "--rate", "20",
                "--burst", "60") as srv:
        with srv.client(admin) as c:
            for ns in ("team-a/x", "secret"):
                c.post("/v1/namespaces", json={"name": ns})
            secret_id = c.post("/v1/memories", json={"namespace": "secret", "content": "the launch code is 0000"}).json()["id"]
            team_id = c.post("/v1/memories", json={"namespace": "team-a/x", "content": "team notes"}).json()["id"]
            doc = c.get("/openapi.json").json()
        operations = sorted((m.upper(), p) for p, ops in doc["paths"].items() for m in ops)
        with srv.client() as anon:
            for method, path in operations:
                r = anon.request(method, _example_path(path, team_id))
                want = {200} if path == "/health" else ({200, 503} if path == "/ready" else {401})
                got = status("security", f"no key: {method} {path}", r, want)
                if path == "/ready" and r.status_code == 200:
                    got.ok = got.ok and set(r.json()) == {"ready"}
                    got.observed += f" {sorted(r.json())}"
                out.append(got)
            for path in ("/openapi.json", "/docs"):
                out.append(status("security", f"no key: GET {path}", anon.get(path), {401}))
            out.append(status("security", "wrong key", anon.get("/v1/namespaces", headers={"X-API-Key": "lab_wrong"}),
                              {401}, "not valid"))
            codes = [anon.get("/v1/namespaces", headers={"X-API-Key": f"lab_guess{i}"}).status_code for i in range(80)]
            out.append(Outcome("security", "failed logins are rate-limited", "429 among 80 guesses",
                               f"{codes.count(401)} x 401, {codes.count(429)} x 429", 429 in codes))
        with srv.client(team) as c:
            out.append(status("security", "other namespace by id: GET", c.get(f"/v1/memories/{secret_id}"), {404}))
            out.append(status("security", "other namespace by id: PATCH",
                              c.patch(f"/v1/memories/{secret_id}", json={"content": "x"}), {404}))
            out.append(status("security", "other namespace by id: DELETE", c.delete(f"/v1/memories/{secret_id}"), {404}))
            out.append(status("security", "other namespace by name: search",
                              c.post("/v1/search", json={"namespace": "secret", "query": "launch"}), {403}))
            out.append(status("security", "other namespace by name: list",
                              c.get("/v1/memories", params={"namespace": "secret"}), {403}))
            out.append(status("security", "other namespace by name: stats", c.get("/v1/namespaces/secret/stats"),
                              {403, 404}))
            out.append(status("security", "other namespace by name: delete", c.delete("/v1/namespaces/secret"),
                              {403, 404}))
            out.append(status("security", "other namespace: edge to its memory",
                              c.post("/v1/edges", json={"namespace": "team-a/x", "edges": [
                                  {"src": team_id, "dst": secret_id, "relation": "related_to"}]}), {403, 404, 422}))
            out.append(status("security", "other namespace: superseded_by its memory",
                              c.patch(f"/v1/memories/{team_id}", json={"superseded_by": secret_id}), {404}))
            listed = c.get("/v1/namespaces").json()["items"]
            out.append(Outcome("security", "namespace list shows only the key's", "['team-a/x']", str(listed),
                               listed == ["team-a/x"]))
            metrics = c.get("/metrics").text
            out.append(Outcome("security", "metrics name no unreadable namespace", "no 'secret'",
                               "secret named" if 'namespace="secret"' in metrics else "not named",
                               'namespace="secret"' not in metrics))
            for name, path in (("namespace '..'", "/v1/namespaces/../stats"),
                               ("namespace 'team-a/../secret'", "/v1/namespaces/team-a%2F..%2Fsecret/stats"),
                               ("id '../../etc/passwd'", "/v1/memories/..%2F..%2Fetc%2Fpasswd")):
                out.append(status("security", f"path traversal: {name}", c.get(path), {403, 404, 422}))
            out.append(status("security", "path traversal in a body",
                              c.post("/v1/memories", json={"namespace": "team-a/../secret", "content": "x"}), {403, 422}))
        with srv.client(reader) as c:
            out.append(status("security", "read-only key: create",
                              c.post("/v1/memories", json={"namespace": "team-a/x", "content": "x"}), {403}, "read-only"))
            out.append(status("security", "read-only key: delete", c.delete(f"/v1/memories/{team_id}"), {403}))
            out.append(status("security", "read-only key: new namespace",
                              c.post("/v1/namespaces", json={"name": "mine"}), {403}))
            out.append(status("security", "read-only key: search", c.post(
                "/v1/search", json={"namespace": "team-a/x", "query": "notes"}), {200}))
            codes = [c.get("/v1/namespaces").status_code for _ in range(120)]
            out.append(Outcome("security", "a key's rate limit", "429 among 120 requests",
                               f"{codes.count(200)} x 200, {codes.count(429)} x 429", 429 in codes))
        log = srv.log()
        out.append(Outcome("security", "server log has no traceback", "no Traceback",
                           "Traceback found" if "Traceback" in log else "none", "Traceback" not in log))
    return out
