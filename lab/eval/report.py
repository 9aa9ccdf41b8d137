"""Run folders (config, metrics, per-question results, TREC files, a markdown report with plots),
comparison of two runs, and pyserini-style regression checks."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import polars as pl

from lab.config import COMPARISON_FAMILY, Candidate, SearchConfig, to_yaml
from lab.config import load_candidate
from lab.errors import NotFoundError, ValidationError
from lab.eval.errata import errata_lines
from lab.eval.failures import bucket_markdown, bucket_plot
from lab.eval.longmemeval_metrics import report_lines
from lab.eval.metrics import compare_runs
from lab.eval.abstention import plot as abstention_plot
from lab.eval.run_folder import read_json_file, read_made_by
from lab.eval.runner import EvalResult
from lab.search.presets import checked, resolve

HEADLINE = COMPARISON_FAMILY  # what a report and a comparison lead with


TREC_SCORE_STEP = 1e-6  # the written scores' resolution (six decimals)


def write_trec_run(run: pl.DataFrame, path: Path, tag: str) -> None:
    """TREC run format: ``qid Q0 docid rank score tag`` (ranx and trec_eval read it). trec_eval
    orders a query's documents by score and breaks ties by document id, not by the rank column, so
    the written scores fall strictly with the rank: a score tied with (or above) the one before it
    is written one step (``TREC_SCORE_STEP``) below that one. Every reader then sees lab's ranking."""
    with path.open("w", encoding="utf-8") as fh:
        last_qid, last = None, 0.0
        for qid, mid, rank, score in run.sort("qid", "rank").select("qid", "memory_id", "rank", "score").iter_rows():
            written = round(float(score), 6)
            if qid == last_qid and written >= last:
                written = round(last - TREC_SCORE_STEP, 6)
            fh.write(f"{qid} Q0 {mid} {rank} {written:.6f} {tag}\n")
            last_qid, last = qid, written


def write_trec_qrels(qrels: pl.DataFrame, path: Path) -> None:
    """TREC qrels format: ``qid 0 docid relevance``."""
    with path.open("w", encoding="utf-8") as fh:
        for qid, mid, rel in qrels.sort("qid", "memory_id").select("qid", "memory_id", "relevance").iter_rows():
            fh.write(f"{qid} 0 {mid} {rel}\n")


def write_run(result: EvalResult, qrels: pl.DataFrame, out: Path) -> Path:
    """Write a run folder; returns it. Plots are PNGs next to the markdown report."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(to_yaml(result.config), encoding="utf-8")
    meta = {**result.metrics, "info": result.info, "written_at": datetime.now(timezone.utc).isoformat()}
    (out / "metrics.json").write_text(json.dumps(meta, indent=2, default=str) + "\n", encoding="utf-8")
    result.per_query.write_parquet(out / "per_question.parquet")
    result.run.write_parquet(out / "run.parquet")
    write_trec_run(result.run, out / "run.trec", result.config.name)
    write_trec_qrels(qrels, out / "qrels.trec")
    _plots(result, out)
    if result.failures is not None:
        result.failures.write_parquet(out / "failures.parquet")
        bucket_plot(result.metrics["failure_buckets"], out / "failure_buckets.png",
                    f"{result.dataset} / {result.config.name}: where the gold ended up")
    if result.errata is not None:
        result.errata.write_parquet(out / "errata.parquet")
    if result.abstention is not None:
        result.abstention.write_parquet(out / "abstention.parquet")
        abstention_plot(result.abstention, result.metrics["abstention"], out / "abstention.png",
                        f"{result.dataset} / {result.config.name}: abstention")
    (out / "report.md").write_text(report_markdown(result), encoding="utf-8")
    return out


def _plots(result: EvalResult, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    means = result.metrics["metrics"]
    ks = sorted(int(c.split("@")[1]) for c in means if c.startswith("recall@"))
    fig, ax = plt.subplots(figsize=(5, 3.2), dpi=110)
    ax.plot(ks, [means[f"recall@{k}"] for k in ks], marker="o", label="recall@k")
    ax.plot(ks, [means[f"hit@{k}"] for k in ks if f"hit@{k}" in means], marker="s", label="hit@k")
    ax.set_xscale("log")
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_ylim(0, 1)
    ax.set_xlabel("k")
    ax.set_title(f"{result.dataset} / {result.config.name}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "recall_at_k.png")
    plt.close(fig)
    cats = result.metrics["by_category"]
    if cats:
        metric = "recall@10" if "recall@10" in cats[0] else f"recall@{ks[-1]}"
        fig, ax = plt.subplots(figsize=(5, 3.2), dpi=110)
        names = [str(c["category"]) for c in cats]
        ax.bar(names, [c[metric] for c in cats])
        ax.set_ylim(0, 1)
        ax.set_ylabel(metric)
        ax.set_title(f"{result.dataset} / {result.config.name}: by category")
        ax.tick_params(axis="x", rotation=30)
        fig.tight_layout()
        fig.savefig(out / "categories.png")
        plt.close(fig)


def _fmt(v: Any) -> str:
    return f"{v:.4f}" if isinstance(v, float) else str(v)


def report_markdown(result: EvalResult) -> str:
    m = result.metrics
    means, ci = m["metrics"], m["ci95"]
    lines = [f"# {result.dataset} / {result.config.name}", "",
             f"{m['questions']} questions. Options: `{json.dumps(m['options'])}`.", "",
             "| metric | mean | 95% CI |", "|---|---|---|"]
    for name in sorted(means, key=lambda c: (c.split("@")[0], int(c.split("@")[1]) if "@" in c else 0)):
        lo, hi = ci.get(name, [None, None])
        lines.append(f"| {name} | {means[name]:.4f} | {lo:.4f} – {hi:.4f} |")
    said = [*(m.get("warnings") or []), *(m.get("small_n") or [])]
    if said:  # what a reader must know before trusting the table: a hybrid that never fused, too few questions
        lines += ["", "## Warnings", "", *[f"- {line}" for line in said]]
    if m.get("errata"):  # the corrected labels' figures beside the official ones
        lines += errata_lines(m["errata"], result.errata)
    if m.get("by_category"):
        cols = [c for c in ("recall@5", "recall@10", "ndcg@10", "mrr") if c in m["by_category"][0]]
        lines += ["", "## By category", "", "| category | n | " + " | ".join(cols) + " |",
                  "|---|---|" + "---|" * len(cols)]
        for c in m["by_category"]:
            lines.append(f"| {c['category']} | {c['n']} | " + " | ".join(_fmt(c[k]) for k in cols) + " |")
    h = m.get("signal_health") or {}
    if h.get("signals"):
        lines += ["", "## Signal health", "", "| signal | returned anything | gold in its top 10 |", "|---|---|---|"]
        for s, v in h["signals"].items():
            lines.append(f"| {s} | {v['returned_any']:.3f} | {v['gold_in_top10']:.3f} |")
        extra = {k: v for k, v in h.items() if k != "signals"}
        lines += ["", ", ".join(f"{k} {v}" for k, v in extra.items())]
    if m.get("failure_buckets"):
        lines += ["", *bucket_markdown(m["failure_buckets"]), "", "![failure buckets](failure_buckets.png)"]
    for block in ("context", "ragas"):
        if m.get(block):
            lines += ["", f"## {block}", ""] + [f"- {k}: {_fmt(v)}" for k, v in m[block].items()]
    if m.get("abstention"):
        lines += abstention_lines(m["abstention"])
    if m.get("longmemeval"):  # the benchmark's official figures, beside lab's
        lines += report_lines(m["longmemeval"])
    lines += ["", "![recall@k](recall_at_k.png)", "", "![categories](categories.png)", ""]
    return "\n".join(lines)


def abstention_lines(a: dict[str, Any]) -> list[str]:
    """The report's abstention section: the threshold fitted on tune, the figures per part."""
    metric = a["metric"]
    cols = ("answerable", "unanswerable", "precision", "recall", "auroc", metric, "cost")
    lines = ["", "## Abstention", "",
             f"Threshold {a['threshold']:.4f} on {a['evidence']}, fitted on tune (recall cost <= {a['max_cost']}); "
             f"negatives: {a['negatives']}; split {a['split']}.", "",
             "| part | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for part in ("tune", "validation"):
        lines.append(f"| {part} | " + " | ".join("-" if a[part][c] is None else _fmt(a[part][c]) for c in cols) + " |")
    for part in ("tune", "validation"):  # a dash says why it has no value
        lines += [f"- {part} {name}: {why}" for name, why in (a[part].get("undefined") or {}).items()]
    if a.get("configured"):
        v = a["configured"]["validation"]
        lines += ["", f"The configuration's own threshold {a['configured']['threshold']} on validation: "
                      f"precision {_fmt(v['precision'])}, recall {_fmt(v['recall'])}, cost {_fmt(v['cost'])}."]
    return lines + ["", "![abstention](abstention.png)"]


MAX_METRICS_BYTES = 64 << 20  # a run's metrics.json is kilobytes; LongMemEval's with every question, a few MB


def load_run(path: str | Path) -> tuple[dict[str, Any], pl.DataFrame]:
    """A run folder's metrics and per-question table, each checked: a missing, damaged or foreign
    file is refused in one line naming the folder and the file, never read past its bound."""
    p = Path(path)
    if not p.is_dir():
        raise NotFoundError(f"{p}: not a run folder ({'a file' if p.exists() else 'no such folder'})")
    missing = [f for f in ("metrics.json", "per_question.parquet") if not (p / f).exists()]
    if missing:
        raise NotFoundError(f"{p}: not a run folder (no {' / '.join(missing)})")
    read_made_by(p)  # a damaged maker record: not a folder lab wrote whole
    meta = read_json_file(p / "metrics.json", "the run's metrics", MAX_METRICS_BYTES)
    if not isinstance(meta, dict) or not isinstance(meta.get("dataset"), str):
        raise ValidationError(f"{p / 'metrics.json'}: the run's metrics are not an object naming its dataset")
    return meta, _per_question(p / "per_question.parquet")


def _per_question(path: Path) -> pl.DataFrame:
    if not path.is_file():  # a device (/dev/urandom) or a fifo: never read
        raise ValidationError(f"{path}: the per-question table is not a regular file")
    try:
        table = pl.read_parquet(path)
    except Exception as exc:  # polars' and Arrow's errors for a damaged file differ by version
        said = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        raise ValidationError(f"{path}: the per-question table is not a readable Parquet file ({said})") from None
    if "qid" not in table.columns:
        raise ValidationError(f"{path}: the per-question table has no qid column (it has {table.columns[:6]})")
    return table


def compare(run_a: str | Path, run_b: str | Path, metrics: list[str] | None = None) -> pl.DataFrame:
    """Metric deltas B - A on the questions both runs share, with bootstrap CIs and p-values."""
    meta_a, a = load_run(run_a)
    meta_b, b = load_run(run_b)
    if meta_a["dataset"] != meta_b["dataset"]:
        raise ValidationError(f"runs are on different datasets: {meta_a['dataset']} vs {meta_b['dataset']}")
    shared = [c for c in a.columns if c in b.columns and c not in ("qid", "namespace", "category")
              and a[c].dtype.is_float()]
    wanted = metrics or [c for c in HEADLINE if c in shared] or shared
    bad = sorted(set(wanted) - set(shared))
    if bad:
        raise ValidationError(f"metric(s) {bad} not in both runs; available: {shared}")
    return compare_runs(a, b, wanted)


def candidate_from(preset: str | None, config_file: str | Path | None) -> Candidate:
    """A preset by name, or a candidate file (a SearchConfig, optionally with save and assemble sections)."""
    if config_file:
        candidate = load_candidate(config_file)
        checked(candidate.search, str(config_file))
        return candidate
    return Candidate(resolve(preset))


def config_from(preset: str | None, config_file: str | Path | None) -> SearchConfig:
    """The search configuration of `candidate_from`."""
    return candidate_from(preset, config_file).search

