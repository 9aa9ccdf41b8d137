"""Load on a real `lab serve` over loopback: search and context requests per second and latency with
16 concurrent clients at 10,000 and 100,000 memories (and search latency with one client, nothing
queued), and write throughput with group commit.

    .venv/bin/python benchmarks/serve_load.py [--sizes 10000 100000] [--seconds 20] [--clients 16] [--rate 100]

Phases per size, after a 2 s warm-up that is not counted: search with ``--clients`` closed-loop
clients (each sends its next request when its last is answered: the throughput, and with 16
clients a latency of 16 / throughput by Little's law); search with one client; search at a
steady offered rate (open loop, latency counted from when each request was due); context with
``--clients`` clients; the agent faces one call at a time: MCP tool calls (memory_search,
memory_context) over streamable HTTP (``--mcp``) and over stdio (`lab mcp`, the same store), and
the chat proxy's added latency over a direct call to an instant loopback upstream; and, at the
first size, writes.

The server runs the real model (every query is embedded by it, batched across concurrent
requests). Its stores are filled with LoCoMo turn texts (and numbered variants) whose stored
vectors are deterministic random unit vectors under the real model's id: embedding 100,000 texts
would take 10 minutes and index and search costs do not depend on what the vectors mean. Stores
are kept under .lab/bench/ and reused. The load generator (asyncio + httpx) runs on the same two
cores as the server, so the figures are a floor for a machine with a separate client.
Results go to stdout and benchmarks/results/serve_load.json.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _common import DATASETS, ROOT, percentiles, random_unit_vectors, report  # noqa: E402
from serving import ChatUpstream, Server, write_bundle  # noqa: E402

from lab.embed.base import Symmetric  # noqa: E402
from lab.config import DEFAULT_MODEL, EmbedConfig, SaveConfig  # noqa: E402
from lab.eval.locomo import load_conversations  # noqa: E402


class StandIn(Symmetric):
    """The real model's id and tokenizer with random vectors: fills a big store in seconds."""

    dim = 384

    def __init__(self) -> None:
        from lab.embed.st import SentenceTransformerEmbedder

        real = SentenceTransformerEmbedder()
        self.model_id, self.tokenizer = real.model_id, real.tokenizer

    def embed(self, texts):
        return random_unit_vectors(texts, self.dim)


def build_store(path: Path, size: int, turns: list[dict]) -> None:
    import shutil

    from lab.pipeline import Pipeline
    from lab.store.store import Store

    config = SaveConfig(embed=EmbedConfig(model=DEFAULT_MODEL, cache=False))
    if (path / "lab-store.json").is_file():
        if Store.open(path, read_only=True).recorded_config().chunk == config.chunk:
            return
        shutil.rmtree(path)  # made with other chunk settings than the gated default: the server would refuse it
    started = time.perf_counter()
    with Pipeline.open(path, config, embedder=StandIn(), create=True) as pipe:
        records = [{"namespace": "bench", "content": f"{turns[i % len(turns)]['content']} (#{i})",
                    "created_at": turns[i % len(turns)]["created_at"]} for i in range(size)]
        pipe.save_many(records, batch_size=5000, progress=True)
        pipe.build("bench")
    print(f"  built {size:,} memories in {time.perf_counter() - started:.0f} s", file=sys.stderr)


async def send(client, request: tuple, since: float, latencies: list[float], errors: dict[int, int]) -> None:
    """One request; its latency counted from ``since``, or its status among the errors."""
    method, path, body = request
    r = await client.request(method, path, json=body)
    if r.status_code >= 300:
        errors[r.status_code] = errors.get(r.status_code, 0) + 1
    else:
        latencies.append(time.perf_counter() - since)


async def paced(url: str, rate: float, seconds: float, make_request) -> dict:
    """Open loop: requests sent at ``rate`` per second, evenly spaced, whatever the answers take;
    latency counts from when a request was due, so a server falling behind shows in it."""
    import httpx

    latencies: list[float] = []
    errors: dict[int, int] = {}
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        started = time.perf_counter()
        tasks = []
        for i in range(int(rate * seconds)):
            due = started + i / rate
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            tasks.append(asyncio.create_task(send(client, make_request(i), due, latencies, errors)))
        await asyncio.gather(*tasks)
    return {"offered_per_s": rate, "answered_per_s": round(len(latencies) / seconds, 1), **percentiles(latencies),
            "errors": errors}


def embedding_floor(questions: list[str]) -> dict:
    """CPU milliseconds per query of each MiniLM backend on one thread, alone on the machine, one
    by one and in batches: what the serving figures cannot go below."""
    from lab.config import EmbedConfig
    from lab.embed.base import set_model_threads
    from lab.embed.registry import make_embedder

    out: dict = {}
    for name in ("all-MiniLM-L6-v2", "all-MiniLM-L6-v2-int8"):
        model = make_embedder(EmbedConfig(model=name, batch_size=8, cache=False))
        set_model_threads(model, 1)
        model.embed_queries(questions[:16])
        for batch in (1, 8, 16, 32):
            sample = questions[:256]
            started = time.process_time()
            for i in range(0, len(sample), batch):
                model.embed_queries(sample[i:i + batch])
            out.setdefault(name, {})[f"batch_{batch}_cpu_ms_per_query"] = round(
                (time.process_time() - started) / len(sample) * 1000, 2)
    return out


def server_cpu(pid: int) -> float:
    """CPU seconds used so far by the server process and its children (the query-embedding process)."""
    import os

    def own(p: int) -> float:
        fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    # a child is listed under the thread that started it
    children = {int(c) for task in Path(f"/proc/{pid}/task").iterdir() for c in (task / "children").read_text().split()}
    return own(pid) + sum(own(c) for c in children)


async def mcp_latency(url: str | None, stdio_args: list[str] | None, seconds: float, queries: list[str]) -> dict:
    """One MCP session (the SDK's client) calling memory_search and then memory_context, one call at
    a time for ``seconds`` each: the latency an agent sees per tool call, nothing queued before it."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    target = url if url else StdioServerParameters(command=sys.executable, args=["-m", "lab", "mcp", *stdio_args],
                                                   cwd=str(ROOT))
    out: dict = {}
    async with Client(target, read_timeout_seconds=120) as client:
        deadline = time.perf_counter() + 600
        while not json.loads((await client.read_resource("lab://status")).contents[0].text)["ready"]:
            if time.perf_counter() > deadline:
                raise RuntimeError("the MCP server's indexes did not load in 10 minutes")
            await asyncio.sleep(0.2)
        for i in range(5):  # the query model's process started, first-use costs paid: not counted
            await client.call_tool("memory_search", {"query": queries[-1 - i], "namespace": "bench"})
        for tool, extra in (("memory_search", {"k": 10}), ("memory_context", {"budget": 2000})):
            latencies, errors, i = [], 0, 0
            stop = time.perf_counter() + seconds
            while time.perf_counter() < stop:
                started = time.perf_counter()
                result = await client.call_tool(tool, {"query": queries[i % len(queries)], "namespace": "bench", **extra})
                if result.is_error:
                    errors += 1
                else:
                    latencies.append(time.perf_counter() - started)
                i += 1
            out[tool] = {**percentiles(latencies), "errors": errors}
    return out


async def proxy_overhead(proxy_url: str, upstream_url: str, seconds: float, queries: list[str]) -> dict:
    """Chat completions one at a time, straight to an instant loopback upstream and through lab's
    proxy (memory searched, assembled and injected): what the proxy adds to a caller's wait."""
    import httpx

    out: dict = {}
    for name, base, headers in (("direct", upstream_url, {}), ("proxied", proxy_url + "/v1", {"X-Lab-Namespace": "bench"})):
        latencies: list[float] = []
        errors: dict[int, int] = {}
        async with httpx.AsyncClient(base_url=base, timeout=60, headers={"Authorization": "Bearer sk-x", **headers}) as c:
            stop, i = time.perf_counter() + seconds, 0
            while time.perf_counter() < stop:
                body = {"model": "echo", "messages": [{"role": "user", "content": queries[i % len(queries)]}]}
                await send(c, ("POST", "/chat/completions", body), time.perf_counter(), latencies, errors)
                i += 1
        out[name] = {**percentiles(latencies), "errors": errors}
    out["added_p50_ms"] = round(out["proxied"]["p50_ms"] - out["direct"]["p50_ms"], 3)
    out["added_p99_ms"] = round(out["proxied"]["p99_ms"] - out["direct"]["p99_ms"], 3)
    return out


async def drive(url: str, clients: int, seconds: float, make_request) -> dict:
    """``clients`` concurrent loops sending ``make_request(i)`` for ``seconds``; latency and rate."""
    import httpx

    latencies: list[float] = []
    errors: dict[int, int] = {}
    stop = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        async def loop(worker: int) -> None:
            i = worker
            while time.perf_counter() < stop:
                await send(client, make_request(i), time.perf_counter(), latencies, errors)
                i += clients

        started = time.perf_counter()
        await asyncio.gather(*(loop(w) for w in range(clients)))
        elapsed = time.perf_counter() - started
    return {"requests_per_s": round(len(latencies) / elapsed, 1), **percentiles(latencies), "errors": errors}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rate", type=float, default=100, help="offered searches per second of the paced phase")
    parser.add_argument("--query-model", default="auto",
                        help="the server's query_model: auto (the int8 ONNX MiniLM for this MiniLM store) or store (torch)")
    parser.add_argument("--name", default="serve_load",
                        help="results file name (benchmarks/results/NAME.json): keeps a comparison run apart")
    args = parser.parse_args()
    convs = load_conversations(DATASETS / "locomo" / "locomo10-dev.json")
    turns = [t for c in convs for t in c.turns]
    questions = [qa["question"] for c in convs for qa in c.raw["qa"]]
    random.Random(7).shuffle(questions)
    bench = ROOT / ".lab" / "bench"
    floor = embedding_floor(questions)
    print("query embedding, one thread", floor, file=sys.stderr)
    bundle = write_bundle(bench / "serve-bundle", model=DEFAULT_MODEL)
    results: dict = {"clients": args.clients, "seconds_per_phase": args.seconds, "paced_rate": args.rate,
                     "query_model": args.query_model, "query_embedding": floor}
    upstream = ChatUpstream().__enter__()  # the chat proxy's upstream: answers at once
    for size in args.sizes:
        store = bench / f"serve-{size}"
        build_store(store, size, turns)
        with Server(bundle, store, "--rate", "1000000", "--burst", "1000000", "--query-model", args.query_model,
                    "--mcp", "--proxy-upstream", upstream.url, log=bench / f"serve-{size}.log") as srv:
            def ask(i: int):
                return "POST", "/v1/search", {"namespace": "bench", "query": questions[i % len(questions)], "k": 10}

            # warm-up, not counted: connections opened, the first requests' one-time costs paid
            asyncio.run(drive(srv.url, args.clients, 2, lambda i: ask(i + 5000)))
            cpu, wall = server_cpu(srv.proc.pid), time.perf_counter()
            search = asyncio.run(drive(srv.url, args.clients, args.seconds, ask))
            search["server_cpu_cores"] = round((server_cpu(srv.proc.pid) - cpu) / (time.perf_counter() - wall), 2)
            print(size, "search", search, file=sys.stderr)
            # one client: the latency of a request with nothing queued before it (embedding included)
            alone = asyncio.run(drive(srv.url, 1, args.seconds / 3, ask))
            print(size, "search, one client", alone, file=sys.stderr)
            # a steady offered load below saturation: the latency a caller sees at that rate
            steady = asyncio.run(paced(srv.url, args.rate, args.seconds, ask))
            print(size, f"search at {args.rate:g}/s offered", steady, file=sys.stderr)
            context = asyncio.run(drive(srv.url, args.clients, args.seconds, lambda i: (
                "POST", "/v1/context", {"namespace": "bench", "query": questions[i % len(questions)], "budget": 2000})))
            print(size, "context", context, file=sys.stderr)
            mcp_http = asyncio.run(mcp_latency(srv.url + "/mcp", None, args.seconds / 3, questions))
            print(size, "MCP over HTTP, one session", mcp_http, file=sys.stderr)
            proxy = asyncio.run(proxy_overhead(srv.url, upstream.url, args.seconds / 3, questions))
            print(size, "chat proxy, one client", proxy, file=sys.stderr)
            results[f"memories_{size}"] = {"search": search, "search_one_client": alone, "search_paced": steady,
                                           "context": context, "mcp_http_one_session": mcp_http,
                                           "proxy_one_client": proxy}
            if size == args.sizes[0]:
                # writes: each request one new memory, embedded by the real model; group commit
                # lets concurrent requests share one model call and one pair of Delta commits
                stamp = int(time.time())
                import httpx

                httpx.post(srv.url + "/v1/namespaces", json={"name": "writes"})  # 409 when it exists: fine
                writes = asyncio.run(drive(srv.url, args.clients, args.seconds, lambda i: (
                    "POST", "/v1/memories", {"namespace": "writes",
                                              "content": f"load test note {stamp}-{i}: {turns[i % len(turns)]['content']}"})))
                metrics = httpx.get(srv.url + "/metrics").text
                groups = {line.split(" ")[0]: float(line.split(" ")[1]) for line in metrics.splitlines()
                          if line.startswith("lab_commit_group_size_") and " " in line and "{" not in line}
                count = groups.get("lab_commit_group_size_count", 0)
                writes["memories_per_commit"] = round(groups.get("lab_commit_group_size_sum", 0) / count, 1) if count else None
                print(size, "writes", writes, file=sys.stderr)
                results[f"memories_{size}"]["writes"] = writes
        # MCP over stdio: `lab mcp` as a host launches it, on the same store (the server above has stopped)
        mcp_stdio = asyncio.run(mcp_latency(None, ["--bundle", str(bundle), "--store", str(store), "--query-model",
                                                   args.query_model], args.seconds / 3, questions))
        print(size, "MCP over stdio, one session", mcp_stdio, file=sys.stderr)
        results[f"memories_{size}"]["mcp_stdio_one_session"] = mcp_stdio
    upstream.__exit__(None, None, None)
    report(args.name, results)


if __name__ == "__main__":
    main()
