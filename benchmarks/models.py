"""Each embedding model, measured the same way: quality, speed and size.

    .venv/bin/python benchmarks/models.py [--datasets locomo demo scifact] [--models minilm minilm-int8 e5]

Per encoding (a store model, and a query model where it differs: "minilm <- minilm-int8" is the
torch MiniLM store queried by its int8 ONNX export, the change a server makes with
query_model=auto, judged on the same stored vectors):
- quality: the `lab` preset (as it is: its weights were tuned on MiniLM) and the `vector` preset
  (dense retrieval alone) on LoCoMo dev (recall@10, nDCG@10 with 95% CIs, recall@10 by category),
  the demo goldens and SciFact train (nDCG@10); nothing is tuned here, so no cross-validation is
  owed; a change to the `lab` preset's model is adopted only after a tuned, cross-validated run;
- speed: passages/s with two threads (short LoCoMo turns, and SciFact abstracts at the model's
  token limit), and one query's encoding on one thread (p50/p99 ms);
- size: the model's files, and the LoCoMo dev store on disk;
- agreement: cosine of the int8 export's vectors with torch's, on the same texts;
- combinations: the MiniLM store with e5's dense and sparse lists fused beside its own (index.models;
  weight 1.0 each, untuned), and on LoCoMo dev the change in each conversation against MiniLM
  alone: adopting one into the `lab` preset needs a gain in every conversation.

Stores are built once per (dataset, model) under the workspace's eval folder and reused (the first
run of SciFact embeds 5,183 abstracts per model). Results go to stdout and
benchmarks/results/models.json.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATASETS, percentiles, report  # noqa: E402

import polars as pl  # noqa: E402

from lab.config import ENCODERS, SaveConfig  # noqa: E402
from lab.embed.base import set_model_threads  # noqa: E402
from lab.embed.registry import lookup, make_embedder  # noqa: E402
from lab.eval.goldens import load_dataset  # noqa: E402
from lab.eval.runner import EvalOptions, evaluate  # noqa: E402
from lab.eval.stores import eval_retriever, eval_store  # noqa: E402
from lab.search.presets import PRESETS  # noqa: E402

PRESET_NAMES = ("lab", "vector")


COMBINATIONS = (("e5",), ("e5-sparse",), ("e5", "e5-sparse"))  # extra encoders beside the store's model


def encodings(models: list[str], combos: bool) -> list[tuple[str, str, tuple[str, ...]]]:
    """(store model, query model, extra encoders): each model on its own, MiniLM's store queried
    by int8, and MiniLM with e5's dense and sparse lists fused beside its own."""
    out = [(m, m, ()) for m in models]
    if "minilm" in models and "minilm-int8" in models:
        out.append(("minilm", "minilm-int8", ()))
    if combos:
        out += [("minilm", "minilm", c) for c in COMBINATIONS]
    return out


def label(store: str, query: str, encoders: tuple[str, ...] = ()) -> str:
    name = store if store == query else f"{store} <- {query}"
    return name + "".join(f" + {e}" for e in encoders)


def per_conversation(result) -> dict[str, float]:
    table = result.per_query.group_by("namespace").agg(pl.col("recall@10").mean()).sort("namespace")
    return {ns: round(v, 4) for ns, v in table.iter_rows()}


PER_QUERY: dict[tuple[str, str], pl.DataFrame] = {}  # (dataset, encoding) -> the lab preset's per-question metrics


def paired(dataset_name: str, name: str) -> dict:
    """The lab preset's change against MiniLM alone on the same questions, with its two-sided
    p-value (paired sign flips)."""
    from lab.eval.metrics import paired_randomization_test

    a, b = PER_QUERY[(dataset_name, name)].sort("qid"), PER_QUERY[(dataset_name, "minilm")].sort("qid")
    out = {}
    for metric in ("recall@10", "ndcg@10"):
        x, y = a[metric].to_numpy(), b[metric].to_numpy()
        out[metric] = {"delta": round(float((x - y).mean()), 4), "p": round(paired_randomization_test(x, y), 4)}
    return out


ENCODER_WEIGHTS = (0.1, 0.25, 0.5, 1.0)  # the extra encoders' weight (one for all of them), tuned below


def cross_validated(dataset, retriever, lists: tuple[str, ...]) -> dict:
    """The `lab` preset with the encoders' lists at a weight chosen on nine LoCoMo conversations
    and measured on the tenth, each in turn (ties: the smaller weight): the held-out figures and,
    per conversation, the change against MiniLM alone; adoption needs a gain in every one."""
    from lab.eval.metrics import paired_randomization_test

    base = PRESETS["lab"]
    per = {}
    for w in ENCODER_WEIGHTS:
        config = replace(base, encoders=lists,
                         fusion=replace(base.fusion, weights={**base.fusion.weights, **{n: w for n in lists}}))
        per[w] = evaluate(retriever, dataset, config, EvalOptions()).per_query.sort("qid")
    alone = PER_QUERY[("locomo", "minilm")].sort("qid")
    held, chosen, deltas = [], {}, {}
    for conv in sorted(alone["namespace"].unique().to_list()):
        on_train = {w: float(df.filter(pl.col("namespace") != conv)["recall@10"].mean()) for w, df in per.items()}
        best = max(ENCODER_WEIGHTS, key=lambda w: (round(on_train[w], 12), -w))
        chosen[conv] = best
        mine = per[best].filter(pl.col("namespace") == conv)
        held.append(mine)
        deltas[conv] = round(float(mine["recall@10"].mean())
                             - float(alone.filter(pl.col("namespace") == conv)["recall@10"].mean()), 4)
    out = pl.concat(held).sort("qid")
    return {"weights_tried": list(ENCODER_WEIGHTS), "chosen_weight": chosen,
            "held_out_recall@10": round(float(out["recall@10"].mean()), 4),
            "held_out_ndcg@10": round(float(out["ndcg@10"].mean()), 4),
            "recall@10_change_by_conversation": deltas, "gains_every_conversation": all(d > 0 for d in deltas.values()),
            "recall@10_vs_minilm_p": round(paired_randomization_test(out["recall@10"].to_numpy(),
                                                                     alone["recall@10"].to_numpy()), 4)}


def quality(dataset_name: str, store: str, query: str, encoders: tuple[str, ...] = ()) -> dict:
    dataset = load_dataset(dataset_name, DATASETS, split="train")
    save = replace(SaveConfig(), embed=replace(SaveConfig().embed, model=store),
                   index=replace(SaveConfig().index, models=encoders))
    lists = tuple(ENCODERS[e] for e in encoders)
    started = time.perf_counter()
    retriever = eval_retriever(dataset, save, progress=True, query_model=None if query == store else query)
    out: dict = {"store_ready_s": round(time.perf_counter() - started, 1)}
    for preset in PRESET_NAMES:
        # with extra encoders, "vector" is the encoders' lists beside the store model's vector list
        config = replace(PRESETS[preset], encoders=lists)
        result = evaluate(retriever, dataset, config, EvalOptions())
        m, ci = result.metrics["metrics"], result.metrics["ci95"]
        row = {k: round(m[k], 4) for k in ("recall@10", "ndcg@10", "mrr") if k in m}
        row["ci95"] = {k: [round(v, 4) for v in ci[k]] for k in ("recall@10", "ndcg@10") if k in ci}
        cats = result.metrics.get("by_category") or []
        if dataset_name == "locomo" and cats:
            row["recall@10_by_category"] = {str(c["category"]): round(c["recall@10"], 4) for c in cats
                                            if "recall@10" in c}
            row["recall@10_by_conversation"] = per_conversation(result)
        if preset == "lab":
            PER_QUERY[(dataset_name, label(store, query, encoders))] = result.per_query
        out[preset] = row
    if dataset_name == "locomo" and encoders and ("locomo", "minilm") in PER_QUERY:
        out["lab_loco"] = cross_validated(dataset, retriever, lists)
    if query == store and not encoders:
        path = eval_store(dataset, save)
        out["store_mb"] = round(sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6, 1)
    retriever.close()
    return out


def speed(name: str, short: list[str], long: list[str], queries: list[str]) -> dict:
    from lab.config import EmbedConfig

    model = make_embedder(EmbedConfig(model=name, batch_size=32, cache=False))
    spec = lookup(name)
    set_model_threads(model, 2)
    model.embed(short[:8])
    out: dict = {"model_mb": round((spec.size_bytes() or 0) / 1e6, 1) if spec else None}
    for what, texts in (("short", short), ("long", long)):
        started = time.perf_counter()
        model.embed(texts)
        out[f"passages_per_s_{what}"] = round(len(texts) / (time.perf_counter() - started), 1)
    set_model_threads(model, 1)
    model.embed_queries(queries[:4])
    samples = []
    for q in queries:
        started = time.perf_counter()
        model.embed_queries([q])
        samples.append(time.perf_counter() - started)
    out["query_ms_one_thread"] = percentiles(samples)
    return out


def agreement(texts: list[str]) -> dict:
    from lab.config import EmbedConfig

    a = make_embedder(EmbedConfig(model="minilm", cache=False)).embed(texts)
    b = make_embedder(EmbedConfig(model="minilm-int8", cache=False)).embed(texts)
    cos = (a * b).sum(axis=1)
    return {"texts": len(texts), "min": round(float(cos.min()), 5), "mean": round(float(cos.mean()), 5)}


def previous_results() -> dict:
    import json

    path = Path(__file__).resolve().parent / "results" / "models.json"
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    data.pop("machine", None)
    data.pop("benchmark", None)
    return data


def conversation_wins(rows: dict) -> dict[str, dict]:
    """For each encoding beside the default (minilm, `lab` preset): its recall@10 change in each
    LoCoMo dev conversation, and whether it gains in every one (what adoption into the preset needs)."""
    base = rows.get("minilm", {}).get("lab", {}).get("recall@10_by_conversation")
    out = {}
    for name, row in rows.items():
        mine = row.get("lab", {}).get("recall@10_by_conversation")
        if name == "minilm" or not base or not mine:
            continue
        deltas = {ns: round(mine[ns] - base[ns], 4) for ns in base if ns in mine}
        out[name] = {"deltas": deltas, "every": all(d > 0 for d in deltas.values())}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", nargs="+", default=["locomo", "demo", "scifact"])
    parser.add_argument("--models", nargs="+", default=["minilm", "minilm-int8", "e5"])
    parser.add_argument("--no-speed", action="store_true", help="quality only")
    parser.add_argument("--no-combinations", action="store_true", help="no rows of MiniLM with e5's lists beside it")
    args = parser.parse_args()
    for m in args.models:
        if lookup(m) is None:
            raise SystemExit(f"unknown model {m!r}; known: minilm, minilm-int8, e5")
    # each run adds to (or replaces its own rows of) the results file: SciFact with e5 alone takes
    # the better part of an hour, so the datasets and models may be measured in separate runs
    results: dict = previous_results()
    results.setdefault("quality", {})
    results.setdefault("speed", {})
    locomo = load_dataset("locomo", DATASETS)
    turns = [str(m["content"]) for m in locomo.memories]
    questions = locomo.questions["question"].to_list()
    if not args.no_speed:
        scifact = load_dataset("scifact", DATASETS, split="train")
        abstracts = [str(m["content"]) for m in scifact.memories[:64]]
        short = turns[:512]
        for m in args.models:
            results["speed"][m] = speed(m, short, abstracts, questions[:200])
            print(m, results["speed"][m], flush=True)
        if "minilm" in args.models and "minilm-int8" in args.models:
            results["int8_cosine_to_torch"] = agreement(short + abstracts)
    for ds in args.datasets:
        combos = not args.no_combinations and "minilm" in args.models and "e5" in args.models
        for store, query, encoders in encodings(args.models, combos):
            row = quality(ds, store, query, encoders)
            name = label(store, query, encoders)
            if name != "minilm" and (ds, "minilm") in PER_QUERY:
                row["lab_vs_minilm"] = paired(ds, name)
            results["quality"].setdefault(ds, {})[name] = row
            print(ds, label(store, query, encoders), {p: {k: row[p][k] for k in ("recall@10", "ndcg@10")}
                                                      for p in PRESET_NAMES}, flush=True)
    results["wins_every_conversation"] = conversation_wins(results["quality"].get("locomo", {}))
    results["note"] = ("lab preset as it is (tuned on MiniLM); vector = dense retrieval alone; "
                       "speed: 2 threads for passages, 1 for a query")
    report("models", results)
    print_table(results)


def print_table(results: dict) -> None:
    for ds, rows in results["quality"].items():
        print(f"\n{ds}")
        print(f"  {'encoding':<26} {'lab r@10':>9} {'lab nDCG':>9} {'vec r@10':>9} {'vec nDCG':>9}")
        for name, row in rows.items():
            print(f"  {name:<26} {row['lab']['recall@10']:9.4f} {row['lab']['ndcg@10']:9.4f} "
                  f"{row['vector']['recall@10']:9.4f} {row['vector']['ndcg@10']:9.4f}")
    for name, row in results.get("speed", {}).items():
        q = row["query_ms_one_thread"]
        print(f"  {name:<14} short {row['passages_per_s_short']:>7}/s  long {row['passages_per_s_long']:>6}/s  "
              f"query p50 {q['p50_ms']} ms  model {row['model_mb']} MB")


if __name__ == "__main__":
    main()
