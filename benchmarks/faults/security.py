"""Security with auth on (REST): every operation without a key or with a wrong one, cross-namespace
access by id and by name (answered like absence), the read-only scope, path traversal sent raw
(not normalised by a client), rate limits and failed logins. Each refusal is checked for its
reason (code, field, message), not only its status."""
from __future__ import annotations

from pathlib import Path

from outcome import Outcome, same_answer, status
from servers import Bundles, raw_http, real_encoder_case, real_server

from lab.serve.auth import add_key

SECRET = "the launch code is 0000"


def _example_path(path: str, mid: str) -> str:
    return path.replace("{memory_id}", mid).replace("{namespace}", "team-a/x")


def security_cases(tmp: Path, bundles: Bundles) -> list[Outcome]:
    keys = tmp / "keys.yaml"
    admin = add_key(keys, "admin", "write", ["*"])
    team = add_key(keys, "team", "write", ["team-a/*"])
    reader = add_key(keys, "reader", "read", ["*"])
    out: list[Outcome] = []
    with real_server(bundles, tmp / "secure-store", "--auth", "on", "--keys-file", str(keys), "--rate", "20",
                     "--burst", "60") as srv:
        out.append(real_encoder_case("security", srv, admin))
        with srv.client(admin) as c:
            for ns in ("team-a/x", "secret"):
                c.post("/v1/namespaces", json={"name": ns})
            secret_id = c.post("/v1/memories", json={"namespace": "secret", "content": SECRET}).json()["id"]
            team_id = c.post("/v1/memories", json={"namespace": "team-a/x", "content": "team notes"}).json()["id"]
            doc = c.get("/openapi.json").json()
        absent_id = "secret:ffffffffffffffff"
        operations = sorted((m.upper(), p) for p, ops in doc["paths"].items() for m in ops)
        with srv.client() as anon:
            for method, path in operations:
                r = anon.request(method, _example_path(path, team_id))
                if path == "/health":
                    got = status("security", f"no key: {method} {path}", r, {200})
                elif path == "/ready":
                    got = status("security", f"no key: {method} {path}", r, {200, 503})
                    got.ok = got.ok and set(r.json()) == {"ready"}
                    got.observed += f" {sorted(r.json())}"
                else:
                    got = status("security", f"no key: {method} {path}", r, {401}, code="unauthenticated")
                out.append(got)
            for path in ("/openapi.json", "/docs"):
                out.append(status("security", f"no key: GET {path}", anon.get(path), {401}, code="unauthenticated"))
            out.append(status("security", "wrong key", anon.get("/v1/namespaces", headers={"X-API-Key": "lab_wrong"}),
                              {401}, "not valid", code="unauthenticated"))
            codes = [anon.get("/v1/namespaces", headers={"X-API-Key": f"lab_guess{i}"}).status_code for i in range(80)]
            out.append(Outcome("security", "failed logins are rate-limited", "429 among 80 guesses",
                               f"{codes.count(401)} x 401, {codes.count(429)} x 429", 429 in codes))
        with srv.client(team) as c:
            for method, call in (("GET", lambda m: c.get(f"/v1/memories/{m}")),
                                 ("PATCH", lambda m: c.patch(f"/v1/memories/{m}", json={"content": "x"})),
                                 ("DELETE", lambda m: c.delete(f"/v1/memories/{m}")),
                                 ("hard DELETE", lambda m: c.delete(f"/v1/memories/{m}", params={"hard": "true"}))):
                out.append(same_answer("security", f"other namespace by id: {method} (as an absent id)",
                                       call(secret_id), call(absent_id), secret_id, absent_id, {404}))
            edge = lambda m: c.post("/v1/edges", json={"edges": [{"src": team_id, "dst": m, "relation": "related_to"}]})
            out.append(same_answer("security", "other namespace: an edge to its memory (as an absent id)",
                                   edge(secret_id), edge(absent_id), secret_id, absent_id, {404}))
            sup = lambda m: c.patch(f"/v1/memories/{team_id}", json={"superseded_by": m})
            out.append(same_answer("security", "other namespace: superseded_by its memory (as an absent id)",
                                   sup(secret_id), sup(absent_id), secret_id, absent_id, {404}))
            for name, call in (("search", lambda ns: c.post("/v1/search", json={"namespace": ns, "query": "launch"})),
                               ("context", lambda ns: c.post("/v1/context", json={"namespace": ns, "query": "launch"})),
                               ("list", lambda ns: c.get("/v1/memories", params={"namespace": ns})),
                               ("edges", lambda ns: c.get("/v1/edges", params={"namespace": ns})),
                               ("stats", lambda ns: c.get(f"/v1/namespaces/{ns}/stats")),
                               ("delete", lambda ns: c.delete(f"/v1/namespaces/{ns}"))):
                a, b = call("secret"), call("nowhere-else")
                got = same_answer("security", f"other namespace by name: {name} (as an absent one)", a, b, "secret",
                                  "nowhere-else", {403, 404})
                got.ok = got.ok and "launch" not in a.text
                out.append(got)
            out.append(status("security", "other namespace: save into it", c.post(
                "/v1/memories", json={"namespace": "secret", "content": "planted"}), {403}, "secret", code="forbidden"))
            listed = c.get("/v1/namespaces").json()["items"]
            out.append(Outcome("security", "namespace list shows only the key's", "['team-a/x']", str(listed),
                               listed == ["team-a/x"]))
            metrics = c.get("/metrics").text
            out.append(Outcome("security", "metrics name no unreadable namespace", "no 'secret'",
                               "secret named" if 'namespace="secret"' in metrics else "not named",
                               'namespace="secret"' not in metrics))
            bearer = {"Authorization": f"Bearer {team}"}
            for name, path, fld in (("namespace '..'", "/v1/namespaces/../stats", "namespace"),
                                    ("namespace 'team-a/x/../../secret'", "/v1/namespaces/team-a/x/../../secret/stats",
                                     "namespace"),
                                    ("namespace 'team-a%2F..%2Fsecret'", "/v1/namespaces/team-a%2F..%2Fsecret/stats",
                                     "namespace"),
                                    ("id '../../etc/passwd'", "/v1/memories/../../etc/passwd", "id"),
                                    ("id '%2e%2e/secret:x'", "/v1/memories/%2e%2e/" + secret_id, "id")):
                r = raw_http(srv.url, "GET", path, bearer)
                got = status("security", f"path traversal, sent raw: {name}", r, {422}, field=fld, absent=("launch",))
                got.expected += f" (the request line carried {path!r})"
                out.append(got)
            out.append(status("security", "path traversal in a body",
                              c.post("/v1/memories", json={"namespace": "team-a/../secret", "content": "x"}), {422},
                              field="namespace"))
        with srv.client(reader) as c:
            out.append(status("security", "read-only key: create",
                              c.post("/v1/memories", json={"namespace": "team-a/x", "content": "x"}), {403}, "read-only",
                              code="forbidden"))
            out.append(status("security", "read-only key: delete", c.delete(f"/v1/memories/{team_id}"), {403},
                              "read-only", code="forbidden"))
            out.append(status("security", "read-only key: update", c.patch(f"/v1/memories/{team_id}", json={"content": "y"}),
                              {403}, "read-only", code="forbidden"))
            out.append(status("security", "read-only key: new namespace",
                              c.post("/v1/namespaces", json={"name": "mine"}), {403}, "read-only", code="forbidden"))
            out.append(status("security", "read-only key: search", c.post(
                "/v1/search", json={"namespace": "team-a/x", "query": "notes"}), {200}))
            codes = [c.get("/v1/namespaces").status_code for _ in range(120)]
            out.append(Outcome("security", "a key's rate limit", "429 among 120 requests",
                               f"{codes.count(200)} x 200, {codes.count(429)} x 429", 429 in codes))
        with srv.client(admin) as c:
            kept = c.get(f"/v1/memories/{secret_id}").json()
        out.append(Outcome("security", "the other namespace's memory is untouched", f"{SECRET!r}, valid",
                           f"{kept.get('content')!r}, valid {kept.get('valid')}", kept.get("content") == SECRET
                           and kept.get("valid") is True))
        log = srv.log()
        leaked = [name for name, k in (("admin", admin), ("team", team), ("reader", reader)) if k in log]
        out.append(Outcome("security", "server log: no traceback, no key", "no Traceback, no secret",
                           f"Traceback {'found' if 'Traceback' in log else 'none'}; keys in log: {leaked or 'none'}",
                           "Traceback" not in log and not leaked))
    return out
