"""Leave-one-conversation-out cross-validation of the diversification and derived-fact levers on
LoCoMo dev, against `lab` as it is.

    .venv/bin/python benchmarks/levers_cv.py [--objective recall@10]

Levers measured (each a grid of settings on top of `lab`; for each held-out conversation the
setting best on the other four by the objective is scored on it, "off" included, so a lever that
never helps can be chosen away):
- episode decay (`fusion.episode_decay`): the n-th best candidate of a session scores
  (1 - decay) ** (n - 1) of its own, so the top 10 spreads over sessions (turns only);
- derived facts as sources only (`derived_facts: sources_only` with the `derived` view at weight
  w): LoCoMo's observations rank only through the turns they were distilled from, never beside
  them (the store with observations, a fact's hit credited to its source turn; the baseline is
  `lab` on that store, where a fact is a result of its own);
- the derived view with facts still results (the earlier form of the same lever).
Query-time and candidate-time levers alike run on the evaluation's cached candidates. Results go
to stdout and benchmarks/results/levers_cv.json.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATASETS, report  # noqa: E402
from quality_cv import METRICS, loco, per_question  # noqa: E402

from lab.eval.locomo import load_locomo  # noqa: E402
from lab.eval.runner import EvalOptions  # noqa: E402
from lab.eval.stores import eval_retriever, save_config  # noqa: E402
from lab.search.presets import preset  # noqa: E402


def decay(base, d: float):
    return replace(base, fusion=replace(base.fusion, episode_decay=d))


def derived(base, w: float, facts: str):
    weights = {**base.fusion.weights, "vector@derived": w, "lexical@derived": w}
    views = base.views + (("derived",) if w else ())
    return replace(base, views=views, derived_facts=facts, fusion=replace(base.fusion, weights=weights))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--objective", default="recall@10", choices=METRICS)
    args = ap.parse_args()
    lab = preset("lab")
    results: dict = {"objective": args.objective, "levers": {}}
    for with_obs in (False, True):
        dataset = load_locomo(DATASETS / "locomo" / "locomo10-dev.json", observations=with_obs)
        retriever = eval_retriever(dataset, save_config(), progress=True)
        options = EvalOptions(ks=(10,), credit_derived=with_obs)
        folds, cats, base = per_question(retriever, dataset, lab, options)
        setting = "observations" if with_obs else "turns"
        results[f"lab_{setting}"] = {m: round(float(v.mean()), 4) for m, v in base.items()}
        results[f"lab_{setting}"]["by_category"] = {c: round(float(base["recall@10"][cats == c].mean()), 3)
                                                    for c in sorted(set(cats))}
        if with_obs:
            levers = {
                "derived facts as sources only": {"off": lab, **{f"w={w}": derived(lab, w, "sources_only")
                                                                 for w in (0.0, 0.2, 0.3, 0.5, 0.7, 1.0)}},
                "derived view, facts also results": {"off": lab, **{f"w={w}": derived(lab, w, "results")
                                                                    for w in (0.2, 0.3, 0.5)}},
            }
        else:
            levers = {"episode decay": {"off": lab, **{f"decay={d}": decay(lab, d) for d in (0.02, 0.05, 0.1, 0.2, 0.3)}}}
        for lever, points in levers.items():
            grid = {name: per_question(retriever, dataset, config, options)[2] for name, config in points.items()}
            got = loco(grid, base, folds, args.objective)
            got["on_all"] = {name: {**{m: round(float(g[m].mean()), 4) for m in METRICS},
                                    "multi-hop recall@10": round(float(g["recall@10"][cats == "multi-hop"].mean()), 3)}
                             for name, g in grid.items()}
            best = max((n for n in grid if n != "off"), key=lambda n: grid[n][args.objective].mean())
            got["best_on_all"] = {"setting": best, "by_category": {
                c: round(float(grid[best]["recall@10"][cats == c].mean()), 3) for c in sorted(set(cats))}}
            results["levers"][f"{lever} ({setting})"] = got
            print(f"{lever:<34} {setting:<12} wins {got['wins']}/{len(got['folds'])}  mean held-out delta "
                  f"{got['mean_delta']}  per fold {[f['delta_' + args.objective] for f in got['folds']]}  "
                  f"chosen {[f['chosen'] for f in got['folds']]}", flush=True)
            for name, row in got["on_all"].items():
                print(f"    {name:<10} {row}", flush=True)
    report("levers_cv", results)


if __name__ == "__main__":
    main()
