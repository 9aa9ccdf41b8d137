"""The MCP face, driven by the official SDK's own client: `lab mcp` over stdio (as a host launches
it) and `lab serve --mcp` over streamable HTTP with keys, both real processes."""
from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import httpx
import pytest

from lab.config import DEFAULT_MODEL

pytest.importorskip("mcp")
from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOOLS = {"memory_save", "memory_save_many", "memory_search", "memory_context", "memory_get", "memory_update", "memory_forget",
         "memory_list", "memory_link", "memory_check", "memory_namespaces"}


def stdio(bundle: Path, store: Path, *flags: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, cwd=str(ROOT),
                                 args=["-m", "lab", "mcp", "--bundle", str(bundle), "--store", str(store), *flags])


async def call(client: Client, tool: str, **arguments) -> dict:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, f"{tool}: {result.content[0].text}"
    return result.structured_content


async def error_of(client: Client, tool: str, **arguments) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool} should have failed: {result.structured_content}"
    return result.content[0].text


def test_stdio_every_tool_through_the_sdk_client(tmp_path):
    from serving import write_bundle

    bundle = write_bundle(tmp_path / "bundle")

    async def session() -> None:
        async with Client(stdio(bundle, tmp_path / "store", "--namespace", "agent")) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert set(tools) == TOOLS
            for t in tools.values():  # each has a schema and a description an agent can act on
                assert t.input_schema["type"] == "object" and len(t.description) > 40
            k = tools["memory_search"].input_schema["properties"]["k"]  # optional: the served top_k by default
            assert [t["minimum"] for t in k["anyOf"] if t.get("type") == "integer"] == [1]
            assert tools["memory_context"].input_schema["properties"]["format"]["enum"] == ["text", "markdown"]
            for t in tools.values():  # every argument says what it is for
                assert all(p.get("description") for p in t.input_schema["properties"].values()), t.name
            assert "ctx" not in tools["memory_save"].input_schema["properties"]

            saved = await call(c, "memory_save", content="Alice lives in Paris since 2021", tags=["home"])
            assert saved["status"] == "created" and saved["namespace"] == "agent"
            again = await call(c, "memory_save", content="Alice lives in Paris since 2021")
            assert again == {**again, "status": "duplicate", "id": saved["id"]}
            other = await call(c, "memory_save", content="Bob adopted a grey cat named Pixel", type="episodic")

            # a save is searchable by the very next call
            found = await call(c, "memory_search", query="where does Alice live", k=5, explain=True)
            assert found["results"][0]["memory_id"] == saved["id"]
            shares = found["results"][0]["signals"]
            assert shares and abs(sum(s["share"] for s in shares.values()) - 1) < 1e-3
            typed = await call(c, "memory_search", query="cat", filters={"types": ["episodic"]})
            assert [r["memory_id"] for r in typed["results"]] == [other["id"]]

            ctx = await call(c, "memory_context", query="Alice's home", budget=200)
            assert f"[{saved['id']}]" in ctx["text"] and ctx["used"] <= 200
            assert ctx["citations"][0]["memory_id"] in {saved["id"], other["id"]}

            got = await call(c, "memory_get", id=saved["id"])
            assert got["content"] == "Alice lives in Paris since 2021" and got["tags"] == ["home"]

            check = await call(c, "memory_check", content="Alice lives in Berlin since 2021")
            assert check["duplicate_of"] is None
            assert check["possible_contradictions"][0]["memory_id"] == saved["id"]
            assert check["possible_contradictions"][0]["differs_in"] == {"names": ["berlin", "paris"]}
            assert "update" in check["advice"]
            same = await call(c, "memory_check", content="Alice lives in Paris since 2021")
            assert same["duplicate_of"] == saved["id"]

            moved = await call(c, "memory_save", content="Alice moved to Berlin in 2024")
            linked = await call(c, "memory_link", src=moved["id"], dst=saved["id"], relation="supersedes")
            assert linked == {"added": 1}
            updated = await call(c, "memory_update", id=saved["id"], importance=0.9)
            assert updated["importance"] == 0.9

            listed = await call(c, "memory_list", limit=2)
            assert len(listed["items"]) == 2 and listed["next_cursor"]
            rest = await call(c, "memory_list", limit=2, cursor=listed["next_cursor"])
            ids = {i["id"] for i in listed["items"] + rest["items"]}
            assert ids == {saved["id"], other["id"], moved["id"]}

            forgot = await call(c, "memory_forget", id=other["id"])
            assert forgot["deleted"] == 1 and not forgot["hard"]
            after = await call(c, "memory_search", query="grey cat Pixel")
            assert other["id"] not in [r["memory_id"] for r in after["results"]]

            stats = await c.read_resource("lab://namespaces/agent/stats")
            assert json.loads(stats.contents[0].text)["memories"] == 3
            status = json.loads((await c.read_resource("lab://status")).contents[0].text)
            assert status["ready"] is True and status["served"]["candidate"] == "lab"
            names = await c.read_resource("lab://namespaces")
            assert json.loads(names.contents[0].text) == ["agent"]

            # bad arguments: a tool error naming the problem, and the server goes on
            assert "greater than or equal to 1" in await error_of(c, "memory_search", query="x", k=0)
            assert "no memory with id 'nope'" in await error_of(c, "memory_get", id="nope")
            assert "relation" in await error_of(c, "memory_link", src=saved["id"], dst=moved["id"], relation="likes")
            assert "at least one field" in await error_of(c, "memory_update", id=saved["id"])
            assert "cursor" in await error_of(c, "memory_list", cursor="garbage")
            assert (await call(c, "memory_get", id=saved["id"]))["id"] == saved["id"]

    asyncio.run(session())


def test_stdio_allow_list_and_read_only(tmp_path):
    from serving import write_bundle

    bundle = write_bundle(tmp_path / "bundle")

    async def session() -> None:
        async with Client(stdio(bundle, tmp_path / "store", "--allow", "team-a/*")) as c:
            assert "give the namespace" in await error_of(c, "memory_save", content="no namespace given")
            saved = await call(c, "memory_save", content="the build uses uv", namespace="team-a/notes")
            assert saved["status"] == "created"
            assert "no access to namespace 'team-b'" in await error_of(c, "memory_save", content="x", namespace="team-b")
            assert "no access" in await error_of(c, "memory_search", query="build", namespace="team-b")
            # an id of another namespace's space is refused by its form, before anything is looked up
            squat = "team-b:" + saved["id"].split(":", 1)[1]
            assert "is not an id of namespace 'team-a/notes'" in await error_of(
                c, "memory_save", content="probe", namespace="team-a/notes", id=squat)
            mine = await call(c, "memory_save", content="chosen", namespace="team-a/notes", id="team-a/notes:c1")
            assert mine["id"] == "team-a/notes:c1"
        async with Client(stdio(bundle, tmp_path / "store", "--read-only", "--namespace", "team-a/notes")) as c:
            found = await call(c, "memory_search", query="which build tool")
            assert found["results"][0]["memory_id"] == saved["id"]
            assert "read-only" in await error_of(c, "memory_save", content="not allowed")

    asyncio.run(session())


def test_stdio_refuses_a_no_go_bundle_and_keeps_stdout_for_the_protocol(tmp_path):
    import subprocess

    from serving import write_bundle

    bundle = write_bundle(tmp_path / "bundle", verdict="NO-GO")
    proc = subprocess.run([sys.executable, "-m", "lab", "mcp", "--bundle", str(bundle), "--store", str(tmp_path / "s")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT, stdin=subprocess.DEVNULL)
    assert proc.returncode != 0 and "NO-GO" in proc.stderr
    assert proc.stdout == ""  # nothing but the protocol ever goes to stdout
    assert not (tmp_path / "s").exists()


@pytest.mark.slow
def test_http_mcp_inside_lab_serve_with_keys_and_the_real_model(tmp_path):
    from serving import Server, write_bundle

    from lab.serve.auth import add_key

    keys = tmp_path / "keys.yaml"
    writer = add_key(keys, "writer", "write", ["team-a"])
    reader = add_key(keys, "reader", "read", ["team-a"])
    bundle = write_bundle(tmp_path / "bundle", model=DEFAULT_MODEL)
    with Server(bundle, tmp_path / "store", "--mcp", "--auth", "on", "--keys-file", str(keys)) as srv:
        with srv.client(writer) as rest:
            assert rest.post("/v1/namespaces", json={"name": "team-b"}).status_code == 403
            by_rest = rest.post("/v1/namespaces", json={"name": "team-a"})
            assert by_rest.status_code == 201
            rest_id = rest.post("/v1/memories", json={"namespace": "team-a",
                                                      "content": "The staging database is on port 5433"}).json()["id"]
        # no key, or a wrong one: refused before the MCP transport sees the request
        bare = httpx.post(srv.url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert bare.status_code == 401 and bare.json()["error"]["code"] == "unauthenticated"
        assert httpx.post(srv.url + "/mcp", json={}, headers={"Authorization": "Bearer lab_wrong"}).status_code == 401

        async def session(key: str):
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            return Client(streamable_http_client(srv.url + "/mcp",
                                                 http_client=httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"},
                                                                                timeout=60)))

        async def run() -> str:
            async with await session(writer) as c:
                assert {t.name for t in (await c.list_tools()).tools} == TOOLS
                # the key names one namespace: it is the default
                saved = await call(c, "memory_save", content="Deploys happen on Tuesdays after the standup")
                assert saved["namespace"] == "team-a" and saved["status"] == "created"
                found = await call(c, "memory_search", query="when do we deploy", k=3)
                assert found["results"][0]["memory_id"] == saved["id"]  # the next call finds it
                port = await call(c, "memory_search", query="which port does the staging database use", k=3)
                assert port["results"][0]["memory_id"] == rest_id  # one store, one service: REST's save too
                assert "no access to namespace 'team-b'" in await error_of(c, "memory_search", query="x",
                                                                           namespace="team-b")
            async with await session(reader) as c:
                assert (await call(c, "memory_get", id=saved["id"]))["content"].startswith("Deploys")
                assert "read-only" in await error_of(c, "memory_save", content="not mine to write")
                assert "read-only" in await error_of(c, "memory_forget", id=saved["id"])
            return saved["id"]

        saved_id = asyncio.run(run())
        with srv.client(reader) as rest:  # what MCP saved, REST reads
            assert rest.get(f"/v1/memories/{saved_id}").json()["namespace"] == "team-a"
