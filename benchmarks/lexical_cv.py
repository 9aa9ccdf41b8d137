"""The lexical index's settings (bm25s variant, k1, b, stemmer, stopword list) on LoCoMo dev,
cross-validated leave one conversation out against `lab` on its default index; SciFact train and
the demo goldens are scored at each setting as well (no folds there: a check that a setting chosen
on conversations does not cost elsewhere).

    .venv/bin/python benchmarks/lexical_cv.py [--objective recall@10] [--quick]

Every setting is an index-time change: its indexes are built from the evaluation store's chunks
and embeddings (nothing is embedded again), then every question is searched with `lab`. For each
held-out conversation the setting best on the other four by the objective is scored on it. A
setting would be adopted only where it wins on most folds and costs nothing on SciFact and the
demo goldens. Results go to stdout and benchmarks/results/lexical_cv.json.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATASETS, report  # noqa: E402
from quality_cv import METRICS, loco, per_question  # noqa: E402

from lab.config import IndexConfig, LexicalIndexConfig, SaveConfig  # noqa: E402
from lab.eval.goldens import load_dataset  # noqa: E402
from lab.eval.runner import EvalOptions  # noqa: E402
from lab.eval.stores import eval_retriever, save_config  # noqa: E402
from lab.search.presets import preset  # noqa: E402

DEFAULT = LexicalIndexConfig()


def settings(quick: bool) -> dict[str, dict]:
    """Setting name -> LexicalIndexConfig changes; "default" is `lab`'s index."""
    out: dict[str, dict] = {"default": {}}
    k1s, bs = ((1.2, 2.0), (0.5, 0.9)) if quick else ((0.9, 1.2, 1.5, 2.0), (0.4, 0.6, 0.75, 0.9))
    for stopwords in ("en", "en_plus"):
        for k1 in k1s:
            for b in bs:
                changes = {"k1": k1, "b": b, "stopwords": stopwords}
                name = ",".join(f"{k}={v}" for k, v in changes.items() if getattr(DEFAULT, k) != v)
                if name:
                    out[name] = changes
    for method in ("robertson", "atire", "bm25l", "bm25+"):
        out[f"method={method}"] = {"method": method}
    out.setdefault("stopwords=en", {"stopwords": "en"})
    out["stopwords=none"] = {"stopwords": "none"}
    out["stemmer=porter"] = {"stemmer": "porter"}
    out["stemmer=none"] = {"stemmer": "none"}
    return out


def store_config(changes: dict) -> SaveConfig:
    base = save_config()
    return replace(base, index=IndexConfig(lexical=replace(DEFAULT, **changes)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--objective", default="recall@10", choices=METRICS)
    ap.add_argument("--quick", action="store_true", help="a smaller grid of k1 and b")
    args = ap.parse_args()
    lab = preset("lab")
    grid_points = settings(args.quick)
    locomo = load_dataset("locomo", DATASETS)
    others = {name: load_dataset(name, DATASETS) for name in ("scifact", "demo")}
    options = EvalOptions(ks=(10,))
    grid, elsewhere, seconds = {}, {}, {}
    folds = cats = None
    for i, (name, changes) in enumerate(grid_points.items(), start=1):
        started = time.perf_counter()
        config = store_config(changes)
        folds, cats, grid[name] = per_question(eval_retriever(locomo, config), locomo, lab, options)
        elsewhere[name] = {ds: {m: round(float(v.mean()), 4) for m, v in per_question(
            eval_retriever(d, config), d, lab, options)[2].items()} for ds, d in others.items()}
        seconds[name] = round(time.perf_counter() - started, 1)
        print(f"[{i}/{len(grid_points)}] {name:<22} LoCoMo " + " ".join(
            f"{m} {grid[name][m].mean():.4f}" for m in METRICS) + "  " + "  ".join(
            f"{ds} {v['recall@10']:.4f}/{v['ndcg@10']:.4f}" for ds, v in elsewhere[name].items())
            + f"  ({seconds[name]} s)", flush=True)
    base = grid["default"]
    got = loco(grid, base, folds, args.objective)
    print(f"held out, chosen on the other conversations: wins {got['wins']}/{len(got['folds'])}, mean delta "
          f"{got['mean_delta']}; per fold {[(f['held_out'], f['chosen'], f['delta_' + args.objective]) for f in got['folds']]}")
    # a fixed setting, fold by fold: adopted only if it wins on most conversations by itself
    fixed = {}
    for name in sorted(grid, key=lambda n: -grid[n][args.objective].mean())[:6]:
        one = loco({name: grid[name]}, base, folds, args.objective)
        fixed[name] = {"wins": one["wins"], "mean_delta": one["mean_delta"],
                       "per_fold": {f["held_out"]: f["delta_" + args.objective] for f in one["folds"]}}
        print(f"fixed {name:<28} wins {one['wins']}/{len(one['folds'])}  per fold {list(fixed[name]['per_fold'].values())}")
    table = {name: {"locomo": {m: round(float(v.mean()), 4) for m, v in grid[name].items()},
                    "locomo_by_category": {c: round(float(grid[name]["recall@10"][cats == c].mean()), 3)
                                           for c in sorted(set(cats))},
                    **elsewhere[name], "seconds": seconds[name]} for name in grid}
    report("lexical_cv", {"objective": args.objective, "settings": table, "cross_validation": got,
                          "fixed_settings": fixed})


if __name__ == "__main__":
    main()
