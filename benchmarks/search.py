"""Search latency at 10k/100k memories, BM25 queries per second, and fusion time for 1,000 queries.

    .venv/bin/python benchmarks/search.py [--sizes 10000 100000] [--queries 200] [--layouts loose episodes]

Stores are filled with LoCoMo turn texts (and numbered variants) and deterministic random unit
vectors of the real model's dimension (384): index and fusion costs are those of real vectors,
without spending minutes embedding 100,000 texts. Two layouts: "loose" memories (no episodes, so
no index-time context and nothing in the plain view's own index) and "episodes" (20 turns per
episode, as a conversation store: every turn but an episode's first is indexed twice, with its
context and plain, and search ranks both views' indexes). Query embedding with the real model is timed
separately. Fusion of 1,000 queries is timed on a prepared (integer-encoded) candidate table, as
a sweep uses it, with the one-off preparation and the from-table path reported beside it.
Results go to stdout and benchmarks/results/search.json.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATASETS, Timer, percentiles, random_unit_vectors, report  # noqa: E402

from lab.embed.base import Symmetric  # noqa: E402
from lab.config import SaveConfig  # noqa: E402
from lab.embed.fake import WordTokenizer  # noqa: E402
from lab.eval.locomo import load_conversations  # noqa: E402
from lab.pipeline import Pipeline  # noqa: E402
from lab.retriever import Retriever  # noqa: E402
from lab.search.candidates import Query  # noqa: E402
from lab.search.fusion import fuse, prepare  # noqa: E402
from lab.search.presets import PRESETS  # noqa: E402


class RandomEmbedder(Symmetric):
    """Deterministic random unit vectors per text (benchmark only)."""

    model_id = "bench-random-384"
    dim = 384

    def __init__(self) -> None:
        self.tokenizer = WordTokenizer()

    def embed(self, texts):
        return random_unit_vectors(texts, self.dim)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--layouts", nargs="+", default=["loose", "episodes"], choices=["loose", "episodes"])
    args = parser.parse_args()
    convs = load_conversations(DATASETS / "locomo" / "locomo10-dev.json")
    turns = [t for c in convs for t in c.turns]
    questions = [qa["question"] for c in convs for qa in c.raw["qa"]][: args.queries]
    results: dict = {}

    from lab.embed.st import SentenceTransformerEmbedder

    st = SentenceTransformerEmbedder()
    st.embed(["warm up"])
    samples = []
    for q in questions[:100]:
        with Timer() as t:
            st.embed([q])
        samples.append(t.seconds)
    results["query_embedding_real_model"] = percentiles(samples)

    for size, layout in [(n, lay) for n in args.sizes for lay in args.layouts]:
        with tempfile.TemporaryDirectory() as tmp:
            emb = RandomEmbedder()
            pipe = Pipeline.open(Path(tmp) / "s", SaveConfig(), embedder=emb, create=True)
            records = [
                {"namespace": "bench", "content": f"{turns[i % len(turns)]['content']} (#{i})",
                 "created_at": turns[i % len(turns)]["created_at"], "access_count": i % 7,
                 "metadata": {"episode": f"e{i // 20}"} if layout == "episodes" else {}}
                for i in range(size)
            ]
            with Timer() as t_build:
                pipe.save_many(records, batch_size=5000, progress=False)
                pipe.close()  # the writer saves the index snapshot
            # searches run on the read side, as a server's would: the snapshot loaded, read-only
            pipe = Retriever.open(Path(tmp) / "s", embedder=emb)
            qvecs = emb.embed(questions)
            cfg = PRESETS["lab"]
            pipe.search(questions[0], "bench", preset="lab")  # warm caches (views, label maps)
            lat = []
            for q, v in zip(questions, qvecs):
                with Timer() as t:
                    c = pipe.candidates([Query("q", q, "bench")], cfg, query_vectors=v[None, :])
                    fuse(c, cfg.fusion)
                lat.append(t.seconds)
            idx = pipe.index("bench")
            with Timer() as t_bm25:
                for q in questions:
                    idx.search_lexical(q, 50)
            with Timer() as t_vec:
                for v in qvecs:
                    idx.search_vector(v, 50)
            key = f"search_{size}" + ("_episodes" if layout == "episodes" else "")
            results[key] = {
                "build_s": round(t_build.seconds, 1),
                "plain_view_chunks": idx.views["plain"].n_live if "plain" in idx.views else 0,
                "lab_preset_excluding_query_embedding": percentiles(lat),
                "bm25_queries_per_s": round(len(questions) / t_bm25.seconds, 1),
                "vector_queries_per_s": round(len(questions) / t_vec.seconds, 1),
            }
            print(size, layout, results[key], file=sys.stderr)
            if size == args.sizes[0] and layout == args.layouts[0]:
                # fusion of 1,000 queries: candidate lists of the lab preset, replicated to 1,000 qids
                base = pipe.candidates([Query(f"q{i}", q, "bench") for i, q in enumerate(questions)], cfg,
                                       query_vectors=qvecs)
                import polars as pl

                reps = -(-1000 // len(questions))
                big = pl.concat([base.with_columns((pl.col("qid") + f"-{r}").alias("qid")) for r in range(reps)])
                qids = big["qid"].unique().sort()[:1000]
                big = big.filter(pl.col("qid").is_in(qids.implode()))
                prep_times, times, table_times = [], [], []
                for _ in range(3):
                    s = time.perf_counter()
                    prepared = prepare(big)
                    prep_times.append(time.perf_counter() - s)
                    s = time.perf_counter()
                    fuse(big, cfg.fusion)
                    table_times.append(time.perf_counter() - s)
                # a sweep fuses one prepared candidate table under many configurations: time those
                for i in range(20):
                    sweep = replace(cfg.fusion, k=float(1 + i % 10))
                    s = time.perf_counter()
                    fuse(prepared, sweep)
                    times.append(time.perf_counter() - s)
                results["fuse_1000_queries"] = {
                    "rows": big.height, "fuse_prepared": percentiles(times),
                    "prepare_once": percentiles(prep_times), "fuse_from_table": percentiles(table_times),
                }
                print(results["fuse_1000_queries"], file=sys.stderr)
            pipe.close()
    report("search", results)


if __name__ == "__main__":
    main()
