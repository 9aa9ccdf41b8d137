"""Charts and tables the notebooks show: altair specifications built from `TuneSession` numbers,
sweep results and assembled contexts, so a notebook only wires widgets to these functions.

Every chart is an altair object (marimo renders it live and in exported HTML; ``.to_dict()`` is its
Vega-Lite JSON). Inputs are polars frames or lab objects; nothing here reads files or computes
metrics of its own.
"""
from __future__ import annotations

import html
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import polars as pl

from lab import track
from lab.errors import ValidationError

if TYPE_CHECKING:
    from lab.track.connect import Where

ZONE_COLOURS = {"critical": "#d62728", "middle": "#1f77b4", "recency": "#2ca02c"}


def _alt():
    import altair as alt

    return alt


# ---------------------------------------------------------------------------- tune
def curve_chart(numbers, baseline=None):
    """recall@k against k (log axis), the current configuration beside the baseline."""
    alt = _alt()
    frames = [numbers.curve().with_columns(pl.lit("current").alias("configuration"))]
    if baseline is not None:
        frames.append(baseline.curve().with_columns(pl.lit("baseline").alias("configuration")))
    data = pl.concat(frames)
    return (alt.Chart(data).mark_line(point=True)
            .encode(x=alt.X("k:Q", scale=alt.Scale(type="log"), title="k"),
                    y=alt.Y("recall:Q", scale=alt.Scale(domain=[0, 1]), title="recall@k"),
                    color=alt.Color("configuration:N", sort=["current", "baseline"]),
                    tooltip=["configuration", "k", alt.Tooltip("recall:Q", format=".3f")])
            .properties(title="recall@k", width=320, height=220))


def category_chart(numbers, baseline=None, metric: str = "recall@10"):
    """Per-category bars of ``metric``, current beside baseline."""
    alt = _alt()
    frames = [numbers.by_category([metric]).with_columns(pl.lit("current").alias("configuration"))]
    if baseline is not None:
        frames.append(baseline.by_category([metric]).with_columns(pl.lit("baseline").alias("configuration")))
    data = pl.concat(frames)
    return (alt.Chart(data).mark_bar()
            .encode(x=alt.X("category:N", title=None), xOffset=alt.XOffset("configuration:N", sort=["current", "baseline"]),
                    y=alt.Y("value:Q", scale=alt.Scale(domain=[0, 1]), title=metric),
                    color=alt.Color("configuration:N", sort=["current", "baseline"]),
                    tooltip=["category", "configuration", "n", alt.Tooltip("value:Q", format=".3f")])
            .properties(title=f"{metric} by category", width=320, height=220))


def rounded(frame: pl.DataFrame, decimals: int = 4) -> pl.DataFrame:
    """Float columns to ``decimals`` places, for a table a person reads."""
    return frame.with_columns(pl.col(c).round(decimals) for c, t in frame.schema.items() if t.is_float())


def shortened(text: pl.Expr, width: int) -> pl.Expr:
    """``text`` cut to ``width`` characters, an ellipsis marking a cut."""
    return pl.when(text.str.len_chars() > width).then(text.str.slice(0, width - 1) + "…").otherwise(text)


def memories_table(frame: pl.DataFrame, width: int = 110) -> pl.DataFrame:
    """A ranked list of memories to read (`TuneSession.ranked`, `TuneSession.live_search`): each
    memory's text, shortened to ``width`` characters, right after its id (placed last, behind every
    signal's rank, it was off the edge of a half-page table, which showed ids only)."""
    if "text" not in frame.columns:
        raise ValidationError(f"a table of memories needs a text column; this one has {frame.columns}")
    at = frame.columns.index("memory_id") + 1
    order = [c for c in frame.columns[:at] if c != "text"] + ["text"] + [c for c in frame.columns[at:] if c != "text"]
    return rounded(frame.select(order).with_columns(shortened(pl.col("text"), width)))


def paired_markdown(paired: pl.DataFrame) -> str:
    """`TuneSession.paired` as a table: the change per metric with its 95% CI and p-value, and
    whether it is significant at 0.05, as `lab compare` prints it."""
    lines = ["| metric | preset | tuned | change | 95% CI of the change | p | |", "|---|---|---|---|---|---|---|"]
    for r in paired.iter_rows(named=True):
        mark = "significant" if r["p_value"] < 0.05 else "within noise"
        lines.append(f"| {r['metric']} | {r['mean_a']:.4f} | {r['mean_b']:.4f} | {r['delta']:+.4f} | "
                     f"[{r['delta_low']:+.4f}, {r['delta_high']:+.4f}] | {r['p_value']:.4f} | {mark} |")
    return "\n".join(lines) + f"\n\npaired over the same {paired['n'][0] if paired.height else 0} questions"


def budget_chart(curve: pl.DataFrame, baseline: pl.DataFrame | None = None, budget: int | None = None):
    """Context recall against the tokens spent (one point per budget), tuned beside the preset;
    a rule at the current budget."""
    alt = _alt()
    frames = [curve.with_columns(pl.lit("tuned").alias("configuration"))]
    if baseline is not None:
        frames.append(baseline.with_columns(pl.lit("preset").alias("configuration")))
    data = pl.concat(frames)
    lines = (alt.Chart(data).mark_line(point=True)
             .encode(x=alt.X("context_tokens:Q", title="tokens in the context (mean)"),
                     y=alt.Y("context_recall:Q", scale=alt.Scale(domain=[0, 1]), title="context recall"),
                     color=alt.Color("configuration:N", sort=["tuned", "preset"]),
                     tooltip=["configuration", "budget", alt.Tooltip("context_tokens:Q", format=".0f"),
                              alt.Tooltip("context_recall:Q", format=".3f")]))
    if budget:
        rule = alt.Chart(pl.DataFrame({"budget": [int(budget)]})).mark_rule(strokeDash=[4, 4]).encode(x="budget:Q")
        lines = lines + rule
    return lines.properties(title="context recall against tokens", width=420, height=240)


def metrics_markdown(numbers, baseline=None) -> str:
    """The metrics table as markdown: value with its 95% CI, the baseline, and the change."""
    table = numbers.table(baseline)
    head = "| metric | value | 95% CI |" + (" baseline | change |" if baseline is not None else "")
    rule = "|---|---:|---|" + ("---:|---:|" if baseline is not None else "")
    lines = [head, rule]
    for r in table.iter_rows(named=True):
        fmt = "{:.1f}" if r["metric"] == "context_tokens" else "{:.4f}"
        row = f"| {r['metric']} | **{fmt.format(r['value'])}** | [{fmt.format(r['ci95_low'])}, {fmt.format(r['ci95_high'])}] |"
        if baseline is not None:
            row += f" {fmt.format(r['baseline'])} | {r['delta']:+.4f} |" if r["metric"] != "context_tokens" else \
                f" {r['baseline']:.1f} | {r['delta']:+.1f} |"
        lines.append(row)
    return "\n".join(lines)


def checks_frame(report) -> pl.DataFrame:
    """A gate report's checks as a table (suite, check, value, threshold, PASS/FAIL, note)."""
    rows = [c.as_dict() for c in report.checks]
    return pl.DataFrame(rows, schema={"suite": pl.String, "check": pl.String, "value": pl.Float64, "threshold": pl.String,
                                      "verdict": pl.String, "note": pl.String})


# ---------------------------------------------------------------------------- sweep
def load_sweep(name_or_run: str | None = None, *, uri: Where = None,
               folder: str | Path | None = None) -> dict[str, Any] | None:
    """A sweep's results from MLflow: the parent run named ``sweep NAME`` (or run id; default the
    newest sweep), its results table, assembly table, Pareto front and summary from its artifacts.
    ``folder``: read a sweep folder instead (what `lab sweep` writes), without MLflow. None when no
    sweep is named and none is tracked yet (a fresh checkout): the notebook then says how to make one."""
    if folder is None:
        _, c, _ = track.client(uri)
        every = track.recent_runs(200, uri, kind="sweep")
        if not every and not name_or_run:
            return None
        runs = every
        if name_or_run:
            runs = [r for r in runs if r["run_id"] == name_or_run or r["name"] == f"sweep {name_or_run}"]
        if not runs:
            known = sorted({r["name"].removeprefix("sweep ") for r in every})
            raise ValidationError(f"no sweep run {name_or_run!r} in MLflow ({track.shown_uri(track.tracking_uri(uri))}); "
                                  f"known sweeps: {known or 'none (run `lab sweep FILE` first)'}")
        run = runs[0]
        folder = Path(c.download_artifacts(run["run_id"], "sweep"))
        source = f"MLflow run {run['run_id']} ({run['name']})"
    else:
        folder = Path(folder)
        if not (folder / "results.parquet").is_file():
            raise ValidationError(f"{folder} is not a sweep folder (no results.parquet)")
        source = f"sweep folder {folder}"
    read = lambda n: pl.read_parquet(folder / n) if (folder / n).is_file() else pl.DataFrame()  # noqa: E731
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    return {"source": source, "summary": summary, "results": read("results.parquet"),
            "assembly": read("assembly.parquet"), "pareto": read("pareto.parquet")}


NO_SWEEP = ("**No sweep is tracked yet** (a fresh checkout). Run one, then reload this page:\n\n"
            "```bash\n.venv/bin/lab sweep goldens/sweeps/demo.yaml   # the demo grid, about a minute\n```\n\n"
            "or `.venv/bin/lab demo`, which runs that sweep among its steps.")


def sweep_objective(sweep: dict[str, Any]) -> str:
    obj = sweep["summary"].get("objective", "recall@10")
    return obj if f"tune/{obj}" in sweep["results"].columns else "recall@10"


def sweep_weights(sweep: dict[str, Any]) -> list[str]:
    """The weight dimensions the sweep varied (candidates for the heatmap's other axis)."""
    t = sweep["results"]
    return [c for c in t.columns if c.startswith("fusion.weights.") and t[c].n_unique() > 1]


def sweep_heatmap(sweep: dict[str, Any], weight: str | None = None, part: str = "tune"):
    """The objective over RRF k by one weight (best over every other dimension)."""
    alt = _alt()
    obj = sweep_objective(sweep)
    t = sweep["results"].filter(pl.col("error").is_null())
    weight = weight or (sweep_weights(sweep) or [None])[0]
    if weight is None or "fusion.k" not in t.columns:
        return alt.Chart(pl.DataFrame({"note": ["this sweep varies no (RRF k, weight) pair"]})).mark_text().encode(text="note")
    # plain field names: Vega-Lite reads a dot in a field name as a nested field ("fusion.k" would
    # be k inside fusion), and the chart came out blank with undefined axes
    grid = (t.group_by("fusion.k", weight).agg(pl.col(f"{part}/{obj}").max().alias("score"))
            .rename({"fusion.k": "rrf_k", weight: "weight"}))
    label = weight.replace("fusion.weights.", "weight: ")
    return (alt.Chart(grid).mark_rect()
            .encode(x=alt.X("weight:O", title=label),
                    y=alt.Y("rrf_k:O", title="RRF k", sort="descending"),
                    color=alt.Color("score:Q", title=obj, scale=alt.Scale(scheme="viridis")),
                    tooltip=[alt.Tooltip("rrf_k:O", title="RRF k"), alt.Tooltip("weight:O", title=label),
                             alt.Tooltip("score:Q", title=obj, format=".4f")])
            .properties(title=f"{obj} on {part} over RRF k by {label}", width=320, height=240))


def _plain(frame: pl.DataFrame) -> pl.DataFrame:
    """Without all-null columns (Vega-Lite data cannot carry polars' Null type)."""
    return frame.select([c for c, t in frame.schema.items() if t != pl.Null])


def pareto_chart(sweep: dict[str, Any]):
    """Context recall against tokens for every (fusion, assembly) point, the Pareto front on top."""
    alt = _alt()
    a = sweep["assembly"]
    if a.height == 0 or "all/context_recall" not in a.columns:
        return alt.Chart(pl.DataFrame({"note": ["this sweep has no assembly stage"]})).mark_text().encode(text="note")
    a = _plain(a.filter(pl.col("error").is_null()))
    points = alt.Chart(a).mark_circle(size=40, opacity=0.5).encode(
        x=alt.X("all/context_tokens:Q", title="context tokens (mean)"),
        y=alt.Y("all/context_recall:Q", title="context recall", scale=alt.Scale(zero=False)),
        tooltip=[c for c in a.columns if not c.startswith(("tune/", "validation/"))][:8])
    layers = [points]
    if sweep["pareto"].height:
        layers.append(alt.Chart(_plain(sweep["pareto"])).mark_line(point=True, color="crimson").encode(
            x="all/context_tokens:Q", y="all/context_recall:Q"))
    return alt.layer(*layers).properties(title="recall against tokens (Pareto front in red)", width=320, height=240)


def top_configurations(sweep: dict[str, Any], n: int = 10) -> pl.DataFrame:
    """The best ``n`` feasible fusion configurations on tune, with validation and the gap."""
    obj = sweep_objective(sweep)
    t = sweep["results"].filter(pl.col("feasible") & pl.col("error").is_null())
    dims = [c for c in t.columns if "/" not in c and c not in ("trial", "feasible", "error")]
    top = (t.sort([f"tune/{obj}", "trial"], descending=[True, False]).head(n)
           .select("trial", *dims, f"tune/{obj}", f"validation/{obj}")
           .with_columns((pl.col(f"tune/{obj}") - pl.col(f"validation/{obj}")).alias("gap")))
    # four decimals, as every other table of lab's prints them (16 say nothing more)
    return top.with_columns([pl.col(c).round(4) for c, kind in top.schema.items() if kind.is_float()])


def gap_chart(sweep: dict[str, Any]):
    """Tune against validation score per configuration: distance below the diagonal is overfitting."""
    alt = _alt()
    obj = sweep_objective(sweep)
    t = sweep["results"].filter(pl.col("error").is_null()).drop_nulls(f"validation/{obj}")
    lo = float(min(t[f"tune/{obj}"].min(), t[f"validation/{obj}"].min())) if t.height else 0.0
    hi = float(max(t[f"tune/{obj}"].max(), t[f"validation/{obj}"].max())) if t.height else 1.0
    diag = alt.Chart(pl.DataFrame({"x": [lo, hi], "y": [lo, hi]})).mark_line(strokeDash=[4, 4], color="grey").encode(x="x:Q", y="y:Q")
    dots = alt.Chart(t).mark_circle(size=30, opacity=0.5).encode(
        x=alt.X(f"tune/{obj}:Q", title=f"{obj} on tune", scale=alt.Scale(zero=False)),
        y=alt.Y(f"validation/{obj}:Q", title=f"{obj} on validation", scale=alt.Scale(zero=False)),
        tooltip=["trial", alt.Tooltip(f"tune/{obj}:Q", format=".4f"), alt.Tooltip(f"validation/{obj}:Q", format=".4f")])
    return alt.layer(diag, dots).properties(title="tune against validation", width=320, height=240)


# ---------------------------------------------------------------------------- errors
def per_question(frame: pl.DataFrame, per_gold: Sequence[str], *, separator: str = ", ",
                 missing: str = "–") -> pl.DataFrame:
    """One row per question from rows per (question, gold memory), in the frame's order: each
    column of ``per_gold`` becomes the question's values joined by ``separator`` in row order
    (``missing`` for a null), every other column is the question's own. A question with two gold
    memories is one row, not two."""
    unknown = [c for c in ("qid", *per_gold) if c not in frame.columns]
    if unknown:
        raise ValidationError(f"column(s) {unknown} not in the table; it has {frame.columns}")
    own = [c for c in frame.columns if c not in per_gold and c != "qid"]
    joined = [pl.col(c).cast(pl.String).fill_null(missing).str.join(separator).alias(c) for c in per_gold]
    return (frame.group_by("qid", maintain_order=True).agg(*[pl.col(c).first() for c in own], *joined)
            .select(frame.columns))


def rescue_counts(rescues: pl.DataFrame) -> pl.DataFrame:
    """Per kind of rescue (lexical, semantic): how many questions, and how many gold memories."""
    schema = {"rescue": pl.String, "questions": pl.UInt32, "gold memories": pl.UInt32}
    if rescues.height == 0:
        return pl.DataFrame(schema=schema)
    return (rescues.group_by("rescue").agg(pl.col("qid").n_unique().alias("questions"),
                                           pl.len().alias("gold memories"))
            .sort("rescue").cast(schema))


def signal_rank_chart(misses: pl.DataFrame, signals: Sequence[str]):
    """For the missed gold memories: how many each signal returned at all, and in its own top 10."""
    alt = _alt()
    rows = []
    for s in signals:
        if s in misses.columns:
            col = misses[s]
            rows += [{"signal": s, "where": "in its top 10", "gold memories": int((col <= 10).sum())},
                     {"signal": s, "where": "deeper in its list", "gold memories": int(((col > 10)).sum())},
                     {"signal": s, "where": "not returned", "gold memories": int(col.null_count())}]
    data = pl.DataFrame(rows, schema={"signal": pl.String, "where": pl.String, "gold memories": pl.Int64})
    return (alt.Chart(data).mark_bar()
            .encode(y=alt.Y("signal:N", title=None), x=alt.X("gold memories:Q", stack="zero"),
                    color=alt.Color("where:N", sort=["in its top 10", "deeper in its list", "not returned"]),
                    tooltip=["signal", "where", "gold memories"])
            .properties(title=f"where each signal ranked the {misses.height} missed gold memories", width=360, height=160))


# ---------------------------------------------------------------------------- context
def zone_usage_chart(ctx):
    """Tokens used against capacity per zone."""
    alt = _alt()
    rows = []
    for zone, u in ctx.zones.items():
        rows += [{"zone": zone, "part": "used", "tokens": u.used}, {"zone": zone, "part": "free", "tokens": u.free}]
    data = pl.DataFrame(rows, schema={"zone": pl.String, "part": pl.String, "tokens": pl.Int64})
    return (alt.Chart(data).mark_bar()
            .encode(y=alt.Y("zone:N", sort=list(ZONE_COLOURS), title=None), x=alt.X("tokens:Q", stack="zero"),
                    color=alt.Color("part:N", scale=alt.Scale(domain=["used", "free"], range=["#555", "#ddd"])),
                    tooltip=["zone", "part", "tokens"])
            .properties(title=f"token use per zone ({ctx.used} of {ctx.budget})", width=360, height=120))


def context_html(ctx, gold: set[str]) -> str:
    """The assembled context in reading order, each item coloured by its zone and gold items marked."""
    parts = ['<div style="font-family: ui-monospace, monospace; font-size: 0.85em; line-height: 1.4">']
    for item in ctx.items:
        colour = ZONE_COLOURS.get(item.zone, "#888")
        mark = " ★ gold" if item.memory_id in gold else ""
        parts.append(
            f'<div style="border-left: 6px solid {colour}; padding: 2px 8px; margin: 3px 0; '
            f'background: {"#fff6d5" if mark else "transparent"}">'
            f'<b>{html.escape(item.zone)}</b> #{item.position} [{html.escape(item.memory_id)}] '
            f'{item.tokens} tok{html.escape(mark)}<br>{html.escape(item.text)}</div>')
    parts.append("</div>")
    return "".join(parts)


def skipped_frame(ctx, gold: set[str]) -> pl.DataFrame:
    """What assembly left out and why (duplicate-of:<id>, no-space, oversize), gold marked."""
    return pl.DataFrame([{"memory_id": s.memory_id, "tokens": s.tokens, "reason": s.reason, "zone tried": s.zone,
                          "gold": s.memory_id in gold} for s in ctx.skipped],
                        schema={"memory_id": pl.String, "tokens": pl.Int64, "reason": pl.String,
                                "zone tried": pl.String, "gold": pl.Boolean})
