"""Leave-one-conversation-out cross-validation of the retrieval levers on LoCoMo dev.

    .venv/bin/python benchmarks/quality_cv.py [--objective recall@10]

For each lever (a small grid of its settings on top of `lab` without its levers), every conversation
in turn is held out: the lever's setting is chosen on the other four conversations by the
objective, then scored on the held-out one against that baseline there. A lever is adopted only where it
wins on most folds. Nothing is chosen per question, and the held-out conversation never informs
the choice made for it.

Levers measured:
- plain view: the memory without its index-time context as its own vector and BM25 lists
  (index time: ChunkConfig.views), weight w for both lists;
- neighbour boost: FusionConfig.neighbour_boost;
- both together (the plain-view weight and the boost chosen jointly);
- derived view (LoCoMo observations as derived facts credited to their source turns; the
  with-observations setting, against `lab` on the same store);
- plain view 1 + boost 0.3 at lab's k 5 (fixed settings, fold by fold);
- the adopted form: main and plain lists at 0.5 each (a memory's text weight split between its
  contextual and its plain text) + boost 0.3 at k 5.
The baseline of every fold is `lab` without the levers (no views, no neighbour boost), as it
was before they were adopted.
Results go to stdout and benchmarks/results/quality_cv.json.
"""
from __future__ import annotations

import argparse
import itertools
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATASETS, report  # noqa: E402

from lab.eval.locomo import load_locomo  # noqa: E402
from lab.eval.runner import EvalOptions, evaluate  # noqa: E402
from lab.eval.stores import eval_retriever, save_config  # noqa: E402
from lab.search.presets import preset  # noqa: E402

METRICS = ("recall@10", "ndcg@10")


def variant(base, *, plain: float = 0.0, boost: float = 0.0, derived: float = 0.0, k: float | None = None,
            main: float | None = None):
    """``base`` without views or neighbour boost (a view list's weight goes back to its main list),
    plus the levers given (``main``: the weight of the main vector and lexical lists)."""
    weights = {name: w + sum(v for n, v in base.fusion.weights.items() if n.startswith(f"{name}@"))
               for name, w in base.fusion.weights.items() if "@" not in name}
    if main is not None:
        weights.update({"vector": main, "lexical": main})
    views = []
    if plain:
        views.append("plain")
        weights.update({"vector@plain": plain, "lexical@plain": plain})
    if derived:
        views.append("derived")
        weights.update({"vector@derived": derived, "lexical@derived": derived})
    fusion = replace(base.fusion, weights=weights, neighbour_boost=boost, k=base.fusion.k if k is None else k)
    return replace(base, name="cv", views=tuple(views), fusion=fusion)


def per_question(retriever, dataset, config, options):
    res = evaluate(retriever, dataset, config, options)
    pq = res.per_query.sort("qid")
    return pq["namespace"].to_numpy(), pq["category"].to_numpy(), {m: pq[m].to_numpy() for m in METRICS}


def loco(grid: dict, base: dict, folds: np.ndarray, objective: str) -> dict:
    """Per fold: the grid point best on the other folds, its held-out delta against the base."""
    out = {"folds": [], "wins": 0}
    for fold in sorted(set(folds)):
        train, test = folds != fold, folds == fold
        best = max(grid, key=lambda key: (grid[key][objective][train].mean(), -grid_order(key)))
        row = {"held_out": fold, "chosen": best}
        for m in METRICS:
            row[f"delta_{m}"] = round(float(grid[best][m][test].mean() - base[m][test].mean()), 4)
        out["wins"] += row[f"delta_{objective}"] > 0
        out["folds"].append(row)
    out["mean_delta"] = {m: round(float(np.mean([f[f"delta_{m}"] for f in out["folds"]])), 4) for m in METRICS}
    return out


def grid_order(key: str) -> int:
    return len(key)  # on a tie, the simpler setting (shorter name) wins


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--objective", default="recall@10", choices=METRICS)
    args = ap.parse_args()
    lab = variant(preset("lab"))  # lab before the levers: no views, no neighbour boost (the baseline)
    results = {"objective": args.objective, "levers": {}}
    for with_obs in (False, True):
        dataset = load_locomo(DATASETS / "locomo" / "locomo10-dev.json", observations=with_obs)
        retriever = eval_retriever(dataset, save_config(views=("plain",)), progress=True)
        options = EvalOptions(ks=(10,), credit_derived=with_obs)
        folds, cats, base = per_question(retriever, dataset, lab, options)
        setting = "observations" if with_obs else "turns"
        results[f"lab_{setting}"] = {m: round(float(v.mean()), 4) for m, v in base.items()}
        levers = {
            "plain view": {f"plain={w}": dict(plain=w) for w in (0.3, 0.5, 1.0)},
            "neighbour boost": {f"boost={b}": dict(boost=b) for b in (0.1, 0.2, 0.3, 0.5)},
            "plain view + boost": {f"plain={w},boost={b},k={k}": dict(plain=w, boost=b, k=k)
                                   for w, b, k in itertools.product((0.3, 0.5, 1.0), (0.1, 0.2, 0.3), (5.0, 10.0))},
        }
        if with_obs:
            levers = {"derived view": {f"derived={d}": dict(derived=d) for d in (0.3, 0.5, 1.0)},
                      "derived + plain + boost": {f"derived={d},plain={w},boost={b},k=10": dict(derived=d, plain=w,
                                                                                                   boost=b, k=10.0)
                                                  for d, w, b in itertools.product((0.3, 0.5), (0.5,), (0.0, 0.3))}}
        # the candidate for adoption at lab's own k, judged fold by fold like a one-point grid
        levers["plain 1 + boost 0.3, k 5"] = {"candidate": dict(plain=1.0, boost=0.3, k=5.0)}
        # the adopted form: each memory's text weight split evenly between its contextual and its
        # plain list, so a memory without context (ranked the same in both) weighs as before
        # against the other signals
        levers["split .5/.5 + boost 0.3, k 5"] = {"candidate": dict(main=0.5, plain=0.5, boost=0.3, k=5.0)}
        for lever, points in levers.items():
            grid = {name: per_question(retriever, dataset, variant(lab, **kw), options)[2] for name, kw in points.items()}
            got = loco(grid, base, folds, args.objective)
            best_all = max(grid, key=lambda key: grid[key][args.objective].mean())
            got["best_on_all"] = {"setting": best_all, **{m: round(float(grid[best_all][m].mean()), 4) for m in METRICS},
                                  "by_category": {c: round(float(grid[best_all]["recall@10"][cats == c].mean()), 3)
                                                  for c in sorted(set(cats))}}
            results["levers"][f"{lever} ({setting})"] = got
            print(f"{lever:<26} {setting:<12} wins {got['wins']}/{len(got['folds'])}  mean held-out delta "
                  f"{got['mean_delta']}  per fold {[f['delta_' + args.objective] for f in got['folds']]}", flush=True)
    report("quality_cv", results)


if __name__ == "__main__":
    main()
