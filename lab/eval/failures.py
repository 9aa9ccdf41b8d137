"""Why each question failed, not one score: every question with gold put in one failure bucket by
where its best gold memory ended up, and what lost it.

The buckets, from worst to best (``BUCKETS``):

- ``not in candidates``: no candidate list holds any gold memory (a recall problem of the lists:
  their depth, the model, the analyser);
- ``fused below 100``: a list holds it, but fusion ranks it below 100;
- ``rank 11-100``, ``rank 6-10``: fused that low;
- ``top 5``: found.

For a question outside the top 5, ``lost_by`` says which part lost its best gold memory where the
candidate table can tell: ``fusion`` when some list ranked a gold memory at least as high as the
bucket's best rank (the list had it; fusion pushed it down), naming that list as ``best_list``;
``lists`` when no list ranked one that high (the lists, not the fusion, are short of it).
"""
from __future__ import annotations

from typing import Any

import polars as pl

BUCKETS = ("not in candidates", "fused below 100", "rank 11-100", "rank 6-10", "top 5")
DEPTH = 100  # the fused ranks bucketed; a run this deep is what `lab eval`'s default ks give
_BEST_RANK = {"fused below 100": DEPTH, "rank 11-100": 10, "rank 6-10": 5}  # a list at or above this had it


def failure_buckets(run: pl.DataFrame, cands: pl.DataFrame, qrels: pl.DataFrame,
                    questions: pl.DataFrame) -> pl.DataFrame:
    """Per question with gold: its bucket, its best gold memory's fused rank (null below ``DEPTH``),
    the list that ranked a gold memory highest and that rank, how many lists hold gold, and
    ``lost_by`` (``fusion``, ``lists`` or null in the top 5). ``run``: qid, memory_id, rank;
    ``cands``: the candidate table (signals starting with ``_`` are features, not lists)."""
    gold = qrels.filter(pl.col("relevance") > 0).select("qid", "memory_id").unique()
    fused = (gold.join(run.select("qid", "memory_id", "rank"), on=["qid", "memory_id"], how="inner")
             .filter(pl.col("rank") <= DEPTH).group_by("qid").agg(pl.col("rank").min().alias("fused_rank")))
    lists = cands.filter(~pl.col("signal").str.starts_with("_")).select("qid", "memory_id", "signal", "rank")
    listed = (gold.join(lists, on=["qid", "memory_id"], how="inner")
              .sort("qid", "rank", "signal")
              .group_by("qid", maintain_order=True)
              .agg(pl.col("signal").first().alias("best_list"), pl.col("rank").first().alias("best_list_rank"),
                   pl.col("signal").n_unique().alias("lists_with_gold")))
    meta = questions.select("qid", *[c for c in ("namespace", "category") if c in questions.columns]).unique("qid")
    table = (gold.select("qid").unique().join(meta, on="qid", how="left")
             .join(fused, on="qid", how="left").join(listed, on="qid", how="left")
             .with_columns(pl.col("lists_with_gold").fill_null(0).cast(pl.Int64)))
    bucket = (pl.when(pl.col("fused_rank") <= 5).then(pl.lit("top 5"))
              .when(pl.col("fused_rank") <= 10).then(pl.lit("rank 6-10"))
              .when(pl.col("fused_rank").is_not_null()).then(pl.lit("rank 11-100"))
              .when(pl.col("best_list").is_not_null()).then(pl.lit("fused below 100"))
              .otherwise(pl.lit("not in candidates")))
    table = table.with_columns(bucket.alias("bucket"))
    bound = pl.col("bucket").replace_strict(_BEST_RANK, default=None, return_dtype=pl.Int64)
    lost = (pl.when(pl.col("bucket") == "top 5").then(pl.lit(None, dtype=pl.String))
            .when(pl.col("bucket") == "not in candidates").then(pl.lit("lists"))
            .when(pl.col("best_list_rank") <= bound).then(pl.lit("fusion"))
            .otherwise(pl.lit("lists")))
    return table.with_columns(lost.alias("lost_by")).sort("qid")


def bucket_summary(table: pl.DataFrame) -> dict[str, Any]:
    """Counts and shares per bucket, over every question and per category, with how many of each
    bucket fusion lost (the rest the lists) and the lists that held the gold fusion lost."""
    def counts(part: pl.DataFrame) -> dict[str, Any]:
        n = part.height
        out: dict[str, Any] = {"questions": n}
        for name in BUCKETS:
            rows = part.filter(pl.col("bucket") == name)
            entry: dict[str, Any] = {"count": rows.height, "share": round(rows.height / n, 4) if n else 0.0}
            if name != "top 5" and rows.height:
                by_fusion = rows.filter(pl.col("lost_by") == "fusion")
                entry["lost_by_fusion"] = by_fusion.height
                if by_fusion.height:
                    entry["fusion_lost_from"] = dict(sorted(
                        by_fusion.group_by("best_list").len().iter_rows(), key=lambda kv: (-kv[1], kv[0])))
            out[name] = entry
        return out

    summary = {"buckets": list(BUCKETS), "all": counts(table), "by_category": {}}
    if "category" in table.columns:
        for cat in sorted(table["category"].drop_nulls().unique().to_list()):
            summary["by_category"][str(cat)] = counts(table.filter(pl.col("category") == cat))
    return summary


def bucket_markdown(summary: dict[str, Any]) -> list[str]:
    """The report's failure-bucket table: one row per category (and all), one column per bucket."""
    lines = ["## Where the gold ended up", "",
             "Each question by its best gold memory: no candidate list held it, fusion ranked it below 100, "
             "at 11-100, at 6-10, or in the top 5. In brackets: how many of them fusion lost (a list had a "
             "gold memory that high), the rest the lists did.", "",
             "| category | questions | " + " | ".join(BUCKETS) + " |",
             "|---|---:|" + "---:|" * len(BUCKETS)]
    rows = [("all", summary["all"]), *summary["by_category"].items()]
    for name, part in rows:
        cells = []
        for bucket in BUCKETS:
            entry = part[bucket]
            cell = f"{entry['count']} ({entry['share']:.0%})"
            if entry.get("lost_by_fusion"):
                cell += f" [{entry['lost_by_fusion']}]"
            cells.append(cell)
        lines.append(f"| {name} | {part['questions']} | " + " | ".join(cells) + " |")
    return lines


def bucket_plot(summary: dict[str, Any], path: Any, title: str) -> None:
    """A stacked bar per category (and all): the share of questions in each bucket."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    rows = [("all", summary["all"]), *summary["by_category"].items()]
    colours = ("#b2182b", "#ef8a62", "#fddbc7", "#d1e5f0", "#2166ac")
    fig, ax = plt.subplots(figsize=(6, 0.5 * len(rows) + 1.6), dpi=110)
    left = [0.0] * len(rows)
    for bucket, colour in zip(BUCKETS, colours):
        shares = [part[bucket]["share"] for _, part in rows]
        ax.barh([name for name, _ in rows], shares, left=left, color=colour, label=bucket)
        left = [a + b for a, b in zip(left, shares)]
    ax.set_xlim(0, 1)
    ax.invert_yaxis()
    ax.set_xlabel("share of questions")
    ax.set_title(title)
    ax.legend(ncol=3, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.25), frameon=False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
