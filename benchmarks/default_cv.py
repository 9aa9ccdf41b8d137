"""Nested selection of lab's default (issue 46 #1): the levers chosen inside folds, the chosen
configuration scored on the held-out fold, across every dataset at once.

    .venv/bin/python benchmarks/default_cv.py [--datasets locomo scifact demo longmemeval-s-dev locomo-shuffled]
                                              [--encoders e5]

The procedure, which is what lab tells its users to do with a sweep:
- **Datasets.** LoCoMo dev, SciFact train, the demo goldens, the LongMemEval-S development half
  (turn granularity, user turns; its stores embedded by minilm-int8, the model
  `benchmarks/longmemeval_s.py` measures it with, for time) and an adjacency-free control:
  LoCoMo dev with each conversation's turns in a seeded random order (``locomo-shuffled``). There
  a turn keeps its id, text, speaker and true date, but takes the episode and turn number of the
  slot it lands in, so its neighbours (the turns the neighbour boost and the context turns reach)
  are unrelated turns while its date stays true.
- **Folds.** LoCoMo dev and its control: leave one conversation out (5 folds). SciFact train, the
  demo goldens and LongMemEval (one haystack per question): 5 seeded folds of their questions
  (each fold a tune/validation split, 80/20). Outer fold i holds out fold i of every dataset at once.
- **Candidates.** Every configuration of a grid over lab's levers: the index-time context turns
  (2 or 0, two stores), RRF k, and each query-time lever off or at lab's setting: the plain view
  (a memory's text weight split between its contextual and its plain lists), the neighbour
  boost, the coverage bonus, intent gating, a boost for the last 24 hours, the recency, frequency,
  graph, entity, temporal, hop (second vector hop) and bridge (second BM25 hop by the first hits'
  rare names) lists, and
  with ``--encoders e5`` e5's vector list beside MiniLM's (a store carrying both).
- **Selection inside the fold.** On the other four folds, the configuration with the best mean
  over datasets of (recall@10 + nDCG@10) / 2 is chosen (ties: fewer levers on, then the smaller
  k); it is scored on the held-out fold. The held-out scores of the five chosen configurations
  make the outer-fold estimate of each dataset.
- **A lever's gain.** On each held-out question: the chosen configuration's score minus the same
  configuration with that lever off (0 where the fold did not choose it), paired over every
  question of a dataset (bootstrap 95% CI, randomization p).
- **Adjacency evidence.** Per dataset: how much more similar adjacent memories (consecutive turns
  of an episode, as lab orders them) are than random pairs of the same namespace, the cosine of
  their plain-text vectors, averaged over namespaces.
- **The neighbour boost waits for evidence.** Its lever acts only in a namespace whose adjacency
  lift (lab's own measure, `lab.search.adjacency`, on the plain-text vectors) is at least
  ``--neighbour-min-lift`` (0.05; -1: everywhere, the boost as it was before).
- **The rule.** A lever enters the default when it is chosen in most outer folds (3 of 5), its
  gain is not significantly negative on any dataset (the CI's upper end >= 0 for recall@10 and
  nDCG@10) and it earns its place: significantly positive on at least one dataset (the CI's
  lower end > 0 on either metric). The default is the entering levers at their most chosen
  setting, k and the context turns at theirs; it must not be significantly worse than plain RRF
  k = 2 on any dataset (paired, every question).
Not in the grid: episode decay and BrainBridge's rerank (off the batch scorer's path; the decay lost
every fold of `levers_cv.py`), learned fusion (`lab learn`, cross-validated on its own) and the
superseded handling (what a superseded memory is, not a ranking preference).

Scoring runs on the evaluation's cached candidates with the sweep's batch scorer (held equal to
`fuse` by `sweep_vs_fuse.py`); the default found is then run through `evaluate` end to end and must
agree with the batch scorer per question (exit 1 otherwise). Results: stdout and
benchmarks/results/default_cv.json (``--encoders e5``: default_cv_e5.json).
"""
from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATASETS, report  # noqa: E402

from lab.config import AnalysisConfig, SaveConfig, SearchConfig  # noqa: E402
from lab.eval.candidate_cache import candidate_table, prepared_for  # noqa: E402
from lab.eval.dataset_ref import DatasetRef  # noqa: E402
from lab.eval.goldens import load_dataset  # noqa: E402
from lab.eval.metrics import bootstrap_ci, paired_randomization_test  # noqa: E402
from lab.eval.runner import EvalOptions, evaluate  # noqa: E402
from lab.eval.stores import eval_retriever, save_config  # noqa: E402
from lab.tune.batch import BatchScorer  # noqa: E402

FOLDS = 5
SEED = 0
K_VALUES = (1.0, 2.0, 5.0, 10.0, 60.0)
# lever -> its settings when on (off is 0): lab's own setting and, for the levers lab leans on, a
# stronger one; a list lever's setting is the weight of its list
LIST_LEVERS = {"recency": (0.05,), "frequency": (0.1,), "graph": (0.3,), "entity": (0.3,), "temporal": (0.5, 1.0),
               "hop": (0.1,), "bridge": (0.3,)}
FUSION_LEVERS = {"plain_view": (0.5,), "neighbour_boost": (0.3, 0.5), "coverage_bonus": (0.1,),
                 # LMA's weights scaled by the query's intent; StackMemory's x1.2 for the last 24 hours
                 # (the lever's setting is the multiplier's excess over 1)
                 "intent_gating": (1.0,), "recent_boost": (0.2,)}
CONTEXT_TURNS = (2, 0)
TOLERANCE = 1e-9
# the neighbour boost's lever acts only in namespaces whose adjacency lift (lab.search.adjacency) is
# at least this: between what a random order of turns shows (LoCoMo shuffled: 0.016 on average,
# 0.005 at least per conversation) and what conversations show (LoCoMo and the demo: 0.11 at
# least); -1 (``--neighbour-min-lift -1``) judges the boost as it was, everywhere
NEIGHBOUR_MIN_LIFT = 0.05
GATE = {"min_lift": NEIGHBOUR_MIN_LIFT}  # set from the command line, once per process


def levers(encoders: bool) -> dict[str, tuple[float, ...]]:
    return {**FUSION_LEVERS, **LIST_LEVERS, **({"e5": (0.5,)} if encoders else {})}


def fusion_for(point: dict, base: SearchConfig):
    """The fusion settings of one grid point (plain RRF over vector and BM25 at k, plus its levers)."""
    plain = point["plain_view"]
    text = 1.0 - plain  # a memory's text weight, split between its contextual and its plain lists
    weights = {name: 0.0 for name in base.fusion.weights}
    weights.update({"vector": text, "lexical": text, "vector@plain": plain, "lexical@plain": plain})
    weights.update({name: point[name] for name in LIST_LEVERS})
    if "e5" in point:
        weights["vector@e5"] = point["e5"]
    return replace(base.fusion, k=point["k"], weights=weights, neighbour_boost=point["neighbour_boost"],
                   neighbour_min_lift=GATE["min_lift"],
                   coverage_bonus=point["coverage_bonus"], episode_decay=0.0, rerank_depth=0, learned=None,
                   intent_gating=bool(point["intent_gating"]), recent_boost=1.0 + point["recent_boost"],
                   recent_hours=24.0)


def superset(encoders: bool) -> SearchConfig:
    """The candidate configuration every grid point is scored on: every list any point weighs."""
    return SearchConfig(name="default-cv", signals=("vector", "lexical", *LIST_LEVERS), views=("plain",),
                        encoders=("vector@e5",) if encoders else (),
                        analysis=AnalysisConfig(temporal="boost", entities=True))


def search_config(point: dict, encoders: bool) -> SearchConfig:
    """The grid point as a configuration of its own: only the lists it weighs are ranked."""
    base = superset(encoders)
    fusion = fusion_for(point, base)
    signals = ("vector", "lexical", *(s for s in LIST_LEVERS if point[s]))
    return replace(base, name="default", signals=signals, views=("plain",) if point["plain_view"] else (),
                   encoders=("vector@e5",) if point.get("e5") else (), fusion=fusion,
                   analysis=replace(base.analysis, temporal="boost" if point["temporal"] else "off",
                                    entities=bool(point["entity"])))


def grid(encoders: bool) -> list[dict]:
    names = list(levers(encoders))
    on = levers(encoders)
    points = []
    for k, ctx, *values in itertools.product(K_VALUES, CONTEXT_TURNS, *((0.0, *on[n]) for n in names)):
        points.append({"k": k, "context_turns": ctx, **dict(zip(names, values))})
    return points


def simplicity(point: dict, names: list[str]) -> tuple:
    """Ties go to fewer levers on, then weaker settings, then the smaller k, then the default
    context turns."""
    return (sum(bool(point[n]) for n in names), sum(point[n] for n in names), point["k"], point["context_turns"] != 2)


LME = "longmemeval-s-dev"
LME_MODEL = "minilm-int8"


def shuffled_locomo(dataset, seed: int = SEED):
    """The adjacency-free control: each conversation's turns in a seeded random order. A turn keeps
    its id, text, speaker, session and date (``created_at``), and takes the episode and turn number
    of the slot it lands in; lab orders an episode's turns by time, so a slot-episode holds turns of
    many sessions and its neighbours are unrelated turns."""
    rng = np.random.default_rng(seed)
    by_ns: dict[str, list[dict]] = {}
    for m in dataset.memories:
        by_ns.setdefault(m["namespace"], []).append(m)
    memories = []
    for ns in sorted(by_ns):
        turns = by_ns[ns]
        for slot, source in zip(turns, rng.permutation(len(turns))):
            moved = dict(turns[source])
            moved["metadata"] = {**turns[source]["metadata"], "episode": slot["metadata"]["episode"],
                                 "turn": slot["metadata"]["turn"]}
            memories.append(moved)
    return replace(dataset, name="locomo-shuffled", memories=memories)


def load(name: str):
    """A dataset of the benchmark by name (the control and LongMemEval's half are built here)."""
    if name == "locomo-shuffled":
        return shuffled_locomo(load_dataset("locomo", DATASETS))
    if name == LME:
        return DatasetRef(LME, DATASETS).load()
    return load_dataset(name, DATASETS)


def adjacency_evidence(dataset, retriever) -> dict:
    """How much more alike adjacent memories are than random pairs of their namespace: the mean
    cosine of consecutive turns of an episode (by time, as lab orders them) against as many seeded
    random pairs, each memory by its first chunk's vector in ``retriever``'s store, averaged over
    namespaces."""
    rng = np.random.default_rng(SEED)
    by_ns: dict[str, list[dict]] = {}
    for m in dataset.memories:
        if (m.get("metadata") or {}).get("episode"):
            by_ns.setdefault(m["namespace"], []).append(m)
    lifts, adjacent, random_ = [], [], []
    for ns, members in sorted(by_ns.items()):
        index = retriever.snapshot(ns).index
        labels = np.flatnonzero(index.live)
        owners = np.asarray(index.memory_of, dtype=object)[labels].astype(str)
        first = {}
        for label, owner in zip(labels.tolist(), owners.tolist()):
            first.setdefault(owner, label)
        members = [m for m in members if m["id"] in first]
        members.sort(key=lambda m: (m["metadata"]["episode"], str(m["created_at"]), m["id"]))
        pairs = [(a["id"], b["id"]) for a, b in zip(members, members[1:])
                 if a["metadata"]["episode"] == b["metadata"]["episode"]]
        if len(members) < 3 or not pairs:
            continue
        ids = [m["id"] for m in members]
        vectors = np.asarray(index.chunk_vectors(np.asarray([first[i] for i in ids])), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        at = {i: n for n, i in enumerate(ids)}
        a = np.asarray([at[x] for x, _ in pairs])
        b = np.asarray([at[y] for _, y in pairs])
        ra, rb = rng.integers(0, len(ids), len(pairs)), rng.integers(0, len(ids), len(pairs))
        keep = ra != rb
        adj = float(np.mean(np.sum(vectors[a] * vectors[b], axis=1)))
        rnd = float(np.mean(np.sum(vectors[ra[keep]] * vectors[rb[keep]], axis=1)))
        adjacent.append(adj)
        random_.append(rnd)
        lifts.append(adj - rnd)
    if not lifts:
        return {"namespaces": 0}
    return {"namespaces": len(lifts), "adjacent_cosine": round(float(np.mean(adjacent)), 4),
            "random_pair_cosine": round(float(np.mean(random_)), 4), "lift": round(float(np.mean(lifts)), 4),
            "lift_min_namespace": round(float(np.min(lifts)), 4)}


def has_episodes(dataset) -> bool:
    return any((m.get("metadata") or {}).get("episode") for m in dataset.memories)


def folds_of(dataset, questions: list[str]) -> np.ndarray:
    """LoCoMo: the question's conversation; otherwise a seeded assignment to FOLDS folds."""
    if dataset.name in ("locomo", "locomo-shuffled"):
        ns = dict(dataset.questions.select("qid", "namespace").iter_rows())
        names = sorted(set(ns.values()))
        return np.asarray([names.index(ns[q]) for q in questions])
    order = np.random.default_rng(SEED).permutation(len(questions))
    fold = np.empty(len(questions), dtype=np.int64)
    fold[order] = np.arange(len(questions)) % FOLDS
    return fold


def store_config(ctx: int, encoders: bool, model: str | None = None) -> SaveConfig:
    save = save_config(context_turns=ctx, views=("plain",) if ctx else ())
    if model:
        save = replace(save, embed=replace(save.embed, model=model))
    return replace(save, index=replace(save.index, models=("e5",))) if encoders else save


def score_dataset(name: str, points: list[dict], encoders: bool) -> dict:
    """Per grid point and question: recall@10 and nDCG@10 on the batch scorer."""
    dataset = load(name)
    episodes = has_episodes(dataset)
    questions = sorted(set(dataset.questions["qid"].to_list()))
    out = {"dataset": dataset, "questions": questions, "folds": folds_of(dataset, questions),
           "recall@10": np.zeros((len(points), len(questions))), "ndcg@10": np.zeros((len(points), len(questions))),
           "retrievers": {}}
    cats = dict(dataset.questions.select("qid", "category").iter_rows()) if "category" in dataset.questions.columns else {}
    out["categories"] = np.asarray([cats.get(q) or "all" for q in questions])
    for ctx in CONTEXT_TURNS:
        # without episodes the context turns change nothing: the default store serves both
        store_ctx = ctx if episodes else CONTEXT_TURNS[0]
        if store_ctx not in out["retrievers"]:
            out["retrievers"][store_ctx] = eval_retriever(
                dataset, store_config(store_ctx, encoders, LME_MODEL if name == LME else None), progress=True)
        retriever = out["retrievers"][store_ctx]
        at = [i for i, p in enumerate(points) if p["context_turns"] == ctx]
        started = time.perf_counter()
        cands, _ = candidate_table(retriever, dataset, superset(encoders), depth=10)
        scorer = BatchScorer(prepared_for(cands), dataset.qrels, questions, ks=(10,))
        got = scorer.evaluate([fusion_for(points[i], superset(encoders)) for i in at])
        for m in ("recall@10", "ndcg@10"):
            out[m][at] = got[m]
        print(f"  {name}: context turns {ctx}: {len(at)} configurations in {time.perf_counter() - started:.1f} s",
              flush=True)
    out["objective"] = (out["recall@10"] + out["ndcg@10"]) / 2
    # the plain-text store (no context turns): context would make neighbours alike by construction
    out["adjacency"] = adjacency_evidence(dataset, out["retrievers"][CONTEXT_TURNS[-1] if episodes else CONTEXT_TURNS[0]])
    print(f"  {name}: adjacency evidence {out['adjacency']}", flush=True)
    return out


def paired(a: np.ndarray, b: np.ndarray) -> dict:
    mean, low, high = bootstrap_ci(a - b, seed=SEED)
    return {"delta": round(mean, 4), "ci95": [round(low, 4), round(high, 4)],
            "p": round(paired_randomization_test(a, b, seed=SEED), 4)}


def key_of(point: dict) -> tuple:
    """A grid point's key in the index of points (its settings, by name)."""
    return tuple(sorted(point.items()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=["locomo", "scifact", "demo", LME, "locomo-shuffled"])
    ap.add_argument("--neighbour-min-lift", type=float, default=NEIGHBOUR_MIN_LIFT,
                    help="the adjacency lift the neighbour boost lever waits for (-1: none, the boost everywhere)")
    ap.add_argument("--encoders", choices=("e5",), help="add e5's vector list as a lever (stores carrying e5)")
    ap.add_argument("--results", default=None, help="the results file's name (default default_cv, with --encoders "
                                                    "default_cv_e5): a run over other datasets is kept apart from the "
                                                    "one the `lab` preset was chosen by")
    args = ap.parse_args()
    GATE["min_lift"] = args.neighbour_min_lift
    encoders = args.encoders == "e5"
    names = list(levers(encoders))
    points = grid(encoders)
    index = {key_of(p): i for i, p in enumerate(points)}
    print(f"{len(points)} configurations x {len(args.datasets)} datasets", flush=True)
    data = {name: score_dataset(name, points, encoders) for name in args.datasets}

    chosen, fold_rows = [], []
    for fold in range(FOLDS):
        train = np.mean([d["objective"][:, d["folds"] != fold].mean(axis=1) for d in data.values()], axis=0)
        best = max(range(len(points)), key=lambda i: (train[i], tuple(-x for x in simplicity(points[i], names))))
        chosen.append(best)
        row = {"fold": fold, "chosen": {k: v for k, v in points[best].items() if v or k in ("k", "context_turns")},
               "inner_objective": round(float(train[best]), 4)}
        for name, d in data.items():
            held = d["folds"] == fold
            row[name] = {m: round(float(d[m][best, held].mean()), 4) for m in ("recall@10", "ndcg@10")}
            if name in ("locomo", "locomo-shuffled"):
                row[name]["held_out"] = sorted(set(d["dataset"].questions["namespace"].to_list()))[fold]
                for cat in ("multi-hop", "temporal"):
                    row[name][f"{cat} recall@10"] = round(float(d["recall@10"][best, held & (d["categories"] == cat)].mean()), 4)
        fold_rows.append(row)
        print(f"fold {fold}: {row}", flush=True)

    def outer(d: dict, pick) -> dict[str, np.ndarray]:
        """Per question: the metric of the configuration ``pick(fold)`` its own fold chose."""
        return {m: np.asarray([d[m][pick(d["folds"][j]), j] for j in range(len(d["questions"]))])
                for m in ("recall@10", "ndcg@10")}

    # plain RRF k = 2 over vector and BM25 on the default store (the `rrf-k2` preset), and the `lab`
    # preset's levers before this run (a point of the grid; its neighbour boost under this run's gate)
    nothing = {n: 0.0 for n in names}
    baseline = index[key_of({**nothing, "k": 2.0, "context_turns": 2})]
    lab_point = index[key_of({**nothing, "k": 2.0, "context_turns": 2, "plain_view": 0.5, "neighbour_boost": 0.3,
                              "coverage_bonus": 0.1, "temporal": 1.0})]
    results: dict = {"procedure": __doc__.split("\n\n")[2], "configurations": len(points),
                     "neighbour_min_lift": GATE["min_lift"], "levers": {},
                     "folds": fold_rows, "datasets": {}}
    # per dataset and question: the held-out score of the configuration its fold chose
    estimate = {name: outer(d, lambda f: chosen[f]) for name, d in data.items()}
    for name, d in data.items():
        est = estimate[name]
        base = {m: d[m][baseline] for m in ("recall@10", "ndcg@10")}
        per_fold = [float(est["recall@10"][d["folds"] == f].mean()) for f in range(FOLDS)]
        results["datasets"][name] = {
            "questions": len(d["questions"]),
            "adjacency_evidence": d["adjacency"],
            "outer_fold": {m: round(float(v.mean()), 4) for m, v in est.items()},
            "outer_fold_recall@10_spread": {"min": round(min(per_fold), 4), "max": round(max(per_fold), 4),
                                            "sd": round(float(np.std(per_fold)), 4)},
            "by_category": {c: round(float(est["recall@10"][d["categories"] == c].mean()), 4)
                            for c in sorted(set(d["categories"]))},
            "outer_fold_vs_rrf_k2": {m: paired(est[m], base[m]) for m in est},
        }
    for lever in names:
        picks = Counter(points[c][lever] for c in chosen)
        entry = {"chosen_in_folds": sum(bool(points[c][lever]) for c in chosen), "gain": {}}
        for name, d in data.items():
            without = outer(d, lambda f: index[key_of({**points[chosen[f]], lever: 0.0})])
            entry["gain"][name] = {m: paired(estimate[name][m], without[m]) for m in without}
        entry["not_negative_anywhere"] = all(g[m]["ci95"][1] >= 0 for g in entry["gain"].values() for m in g)
        entry["positive_somewhere"] = any(g[m]["ci95"][0] > 0 for g in entry["gain"].values() for m in g)
        entry["enters"] = (entry["chosen_in_folds"] > FOLDS // 2 and entry["not_negative_anywhere"]
                           and entry["positive_somewhere"])
        entry["setting"] = max((v for v in picks if v), key=lambda v: picks[v], default=0.0)
        results["levers"][lever] = entry
        print(f"{lever:<16} chosen in {entry['chosen_in_folds']}/{FOLDS}  enters: {entry['enters']}  gain "
              f"{({n: (g['recall@10']['delta'], g['ndcg@10']['delta']) for n, g in entry['gain'].items()})}", flush=True)
    ks = Counter(points[c]["k"] for c in chosen)
    ctxs = Counter(points[c]["context_turns"] for c in chosen)
    default = {"k": max(ks, key=lambda k: (ks[k], -k)), "context_turns": max(ctxs, key=lambda c: (ctxs[c], c)),
               **{n: (results["levers"][n]["setting"] if results["levers"][n]["enters"] else 0.0) for n in names}}
    results["k_chosen"] = {str(k): n for k, n in ks.items()}
    results["context_turns_chosen"] = {str(c): n for c, n in ctxs.items()}
    results["default"] = default
    d_at = index[key_of(default)]
    failed = []
    for name, d in data.items():
        row = {m: round(float(d[m][d_at].mean()), 4) for m in ("recall@10", "ndcg@10")}
        row["vs_rrf_k2"] = {m: paired(d[m][d_at], d[m][baseline]) for m in ("recall@10", "ndcg@10")}
        row["lab_preset_before"] = {m: round(float(d[m][lab_point].mean()), 4) for m in ("recall@10", "ndcg@10")}
        row["vs_lab_preset_before"] = {m: paired(d[m][d_at], d[m][lab_point]) for m in ("recall@10", "ndcg@10")}
        row["significantly_worse_than_rrf_k2"] = any(v["ci95"][1] < 0 and v["p"] < 0.05 for v in row["vs_rrf_k2"].values())
        # the default end to end through `evaluate`, held to the batch scorer per question
        retriever = d["retrievers"][default["context_turns"] if has_episodes(d["dataset"]) else CONTEXT_TURNS[0]]
        pq = evaluate(retriever, d["dataset"], search_config(default, encoders), EvalOptions(ks=(10,))).per_query
        pq = pl.DataFrame({"qid": d["questions"]}).join(pq, on="qid", how="left").fill_null(0.0)
        gap = max(float(np.abs(pq[m].to_numpy() - d[m][d_at]).max()) for m in ("recall@10", "ndcg@10"))
        row["evaluate_vs_batch_max_difference"] = gap
        if gap > TOLERANCE:
            failed.append(f"{name}: evaluate and the batch scorer differ by {gap:.3g}")
        results["datasets"][name]["default"] = row
        print(f"default on {name}: {row}", flush=True)
    report(args.results or ("default_cv_e5" if encoders else "default_cv"), results)
    for f in failed:
        print(f"FAIL: {f}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
