"""A sweep's folder (results table, best preset, Pareto front, plots, summary) and its MLflow runs."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from lab import track
from lab.config import Candidate, to_dict
from lab.eval.dataset import EvalDataset

if TYPE_CHECKING:
    from lab.track.connect import Where


def write_sweep(result: Any, dataset: EvalDataset) -> Path:
    """results.parquet/.csv, assembly.parquet, pareto.parquet, best.yaml, split.parquet, summary.json,
    selection.json, plots."""
    out = result.folder
    out.mkdir(parents=True, exist_ok=True)
    result.table.write_parquet(out / "results.parquet")
    result.table.write_csv(out / "results.csv")
    if result.assembly.height:
        result.assembly.write_parquet(out / "assembly.parquet")
    if result.pareto.height:
        result.pareto.write_parquet(out / "pareto.parquet")
    result.split.write_parquet(out / "split.parquet")
    (out / "best.yaml").write_text(best_preset_yaml(result), encoding="utf-8")
    (out / "spec.json").write_text(json.dumps(result.spec.source, indent=2, default=str) + "\n", encoding="utf-8")
    (out / "summary.json").write_text(json.dumps(summary(result), indent=2, default=str) + "\n", encoding="utf-8")
    if result.info.get("selection"):  # beside best.yaml, where `lab gate --candidate .../best.yaml` finds it
        (out / "selection.json").write_text(json.dumps(result.info["selection"], indent=2, default=str) + "\n",
                                            encoding="utf-8")
    plots(result, out)
    return out


def plots(result: Any, out: Path) -> list[Path]:
    """heatmap.png (objective over RRF k by a weight), pareto.png, tune_vs_validation.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    spec, table = result.spec, result.table.filter(pl.col("error").is_null())
    obj = spec.objective if f"tune/{spec.objective}" in table.columns else f"recall@{max(spec.ks)}"
    weights = [d.name for d in spec.space if d.name.startswith("fusion.weights.") and len(d.values) > 1]
    if "fusion.k" in table.columns and weights and table.height:
        w = weights[0]
        grid = (table.group_by("fusion.k", w).agg(pl.col(f"tune/{obj}").max())
                .pivot(on=w, index="fusion.k", values=f"tune/{obj}").sort("fusion.k"))
        cols = sorted(c for c in grid.columns if c != "fusion.k")
        cols = sorted(cols, key=float)
        values = grid.select(cols).to_numpy()
        fig, ax = plt.subplots(figsize=(1.2 + 0.6 * len(cols), 1.2 + 0.35 * grid.height))
        im = ax.imshow(values, aspect="auto", cmap="viridis", origin="lower")
        ax.set_xticks(range(len(cols)), [f"{float(c):g}" for c in cols])
        ax.set_yticks(range(grid.height), [f"{k:g}" for k in grid["fusion.k"].to_list()])
        ax.set_xlabel(w.replace("fusion.weights.", "weight: "))
        ax.set_ylabel("RRF k")
        ax.set_title(f"{obj} on tune (best over the other parameters)")
        fig.colorbar(im, ax=ax)
        fig.tight_layout()
        fig.savefig(out / "heatmap.png", dpi=110)
        plt.close(fig)
        written.append(out / "heatmap.png")
    if result.assembly.height and "all/context_tokens" in result.assembly.columns:
        a = result.assembly.filter(pl.col("error").is_null())
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.scatter(a["all/context_tokens"], a["all/context_recall"], s=14, alpha=0.5, label="configurations")
        if result.pareto.height:
            p = result.pareto.sort("all/context_tokens")
            ax.plot(p["all/context_tokens"], p["all/context_recall"], "o-", color="crimson", label="Pareto front")
        ax.set_xlabel("context tokens (mean)")
        ax.set_ylabel("context recall (gold in the assembled context)")
        ax.set_title(f"sweep {spec.name}: recall against tokens")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "pareto.png", dpi=110)
        plt.close(fig)
        written.append(out / "pareto.png")
    if table.height and f"validation/{obj}" in table.columns and result.info.get("validation_questions"):
        fig, ax = plt.subplots(figsize=(5, 5))
        ax.scatter(table[f"tune/{obj}"], table[f"validation/{obj}"], s=6, alpha=0.4)
        lo = min(table[f"tune/{obj}"].min(), table[f"validation/{obj}"].min())
        hi = max(table[f"tune/{obj}"].max(), table[f"validation/{obj}"].max())
        ax.plot([lo, hi], [lo, hi], "--", color="grey", linewidth=1)
        best = result.best
        ax.scatter([best[f"tune/{obj}"]], [best[f"validation/{obj}"]], color="crimson", s=40, label="chosen on tune")
        ax.set_xlabel(f"{obj} on tune")
        ax.set_ylabel(f"{obj} on validation")
        ax.set_title("overfitting guard: tune against validation")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "tune_vs_validation.png", dpi=110)
        plt.close(fig)
        written.append(out / "tune_vs_validation.png")
    return written


def log_sweep(result: Any, dataset: EvalDataset, groups: dict[str, Any], uri: Where = None) -> str:
    """One parent run (spec, best, the full results table as an artifact) and the best N as child runs."""
    spec = result.spec
    obj = spec.objective
    store_versions = sorted({str(g.retriever.version) for g in groups.values()})
    tags = {"dataset": dataset.name, "dataset_fingerprint": dataset.fingerprint(), "store_version": ",".join(store_versions),
            "preset": spec.base, "sweep": spec.name, "strategy": spec.strategy,
            "interrupted": str(result.interrupted).lower()}
    params = {"sweep.strategy": spec.strategy, "sweep.trials": spec.trials, "sweep.seed": spec.seed,
              "sweep.objective": obj, "sweep.constraints": json.dumps([str(c) for c in spec.constraints]),
              "sweep.validation": spec.validation, "sweep.space": json.dumps({d.name: list(d.values) or [d.low, d.high]
                                                                            for d in spec.space})}
    params.update({f"best.{k}": v for k, v in track.flatten(to_dict(result.best_config)).items()})
    with track.run(f"sweep {spec.name}", "sweep", params=params, tags=tags, uri=uri) as (_, c, parent):
        metrics = {k.replace("/", "."): v for k, v in result.best.items() if "/" in k and isinstance(v, float)}
        metrics.update({"configs": result.info["configs"], "seconds": result.info["seconds"]})
        if result.info.get("configs_per_second"):
            metrics["configs_per_second"] = result.info["configs_per_second"]
        if metrics.get(f"tune.{obj}") is not None and metrics.get(f"validation.{obj}") is not None:
            metrics[f"gap.{obj}"] = metrics[f"tune.{obj}"] - metrics[f"validation.{obj}"]
        track.log_metrics(c, parent, metrics)
        c.log_artifacts(parent, str(result.folder), "sweep")
        ranked = (result.table.filter(pl.col("feasible") & pl.col("error").is_null())
                  .sort([f"tune/{obj}" if f"tune/{obj}" in result.table.columns else "trial", "trial"],
                        descending=[True, False]).head(spec.top_n))
        for place, row in enumerate(ranked.iter_rows(named=True), start=1):
            point = {k: v for k, v in row.items() if "/" not in k and k not in ("feasible", "error")}
            with track.run(f"sweep {spec.name} #{place}", "sweep-trial", params={k: str(v) for k, v in point.items()},
                           tags={**tags, "place": place}, uri=uri, parent=parent) as (_, cc, child):
                track.log_metrics(cc, child, {k.replace("/", "."): v for k, v in row.items()
                                              if "/" in k and isinstance(v, float)})
    return parent


def summary(result: Any) -> dict[str, Any]:
    """What summary.json holds: the spec in brief, the best row, tune and validation scores and the gap."""
    spec = result.spec
    obj = spec.objective
    best = result.best
    tune, val = best.get(f"tune/{obj}"), best.get(f"validation/{obj}")
    return {
        "sweep": spec.name, "dataset": spec.dataset, "strategy": spec.strategy, "objective": obj,
        "constraints": [str(c) for c in spec.constraints], "interrupted": result.interrupted,
        "best": {k: v for k, v in best.items() if k != "error"},
        "tune": tune, "validation": val,
        "gap": (tune - val) if tune is not None and val is not None and val == val else None,
        "best_config": to_dict(result.best_config), "best_save": to_dict(result.best_save),
        "best_assemble": to_dict(result.best_assemble), **result.info,
    }


def best_preset_yaml(result: Any) -> str:
    """The best configuration as a candidate file: its SearchConfig (so it is also a preset file for
    `lab eval --config`), with the index-time (``save:``) and ``assemble:`` settings it was chosen
    with, which `lab eval` and `lab gate` apply."""
    head = (f"# best of sweep {result.spec.name} on {result.spec.dataset}: {result.spec.objective} "
            f"{result.best.get('tune/' + result.spec.objective, float('nan')):.4f} on tune, "
            f"{result.best.get('validation/' + result.spec.objective, float('nan')):.4f} on validation\n")
    return Candidate(result.best_config, result.best_save, result.best_assemble).to_yaml(head)
