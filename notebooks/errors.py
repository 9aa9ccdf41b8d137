import marimo

__generated_with = "0.25.2"
app = marimo.App(width="full", app_title="lab: errors")


@app.cell
def _():
    import marimo as mo
    from lab.workspace import Workspace, install

    install(Workspace.resolve())  # a notebook is an edge: the environment is read here, once
    import polars as pl

    from lab.tune import views
    from lab.tune.session import TuneSession

    return TuneSession, mo, pl, views


@app.cell
def _(TuneSession, mo):
    # `python notebooks/errors.py --dataset locomo --preset lab` (or `--config runs/sweeps/NAME/best.yaml`)
    _args = mo.cli_args()
    with mo.status.spinner("opening the dataset and its cached candidates"):
        session = TuneSession.from_args(_args)
    return (session,)


@app.cell
def _(mo):
    from lab.tune.session import TUNED

    _choices = ["the starting configuration"] + (["what the tune notebook has now"] if TUNED.is_file() else [])
    analysed = mo.ui.dropdown(_choices, value=_choices[-1], label="analyse")
    mo.hstack([analysed, mo.md(f"<small>the tune notebook writes its current knobs to `{TUNED}`</small>")],
              justify="start")
    return TUNED, analysed


@app.cell
def _(TUNED, analysed, session):
    from lab.config import load_candidate

    if analysed.value == "the starting configuration":
        numbers = session.baseline
    else:
        _tuned = load_candidate(TUNED)
        numbers = session.numbers(_tuned.search, _tuned.assemble or session.base_assemble)
    return (numbers,)


@app.cell
def _(mo, numbers, session):
    category = mo.ui.dropdown(["all"] + sorted(set(session.categories.tolist())), value="all", label="category")
    cutoff = mo.ui.slider(1, 50, 1, value=10, label="missed = gold outside the top", show_value=True)
    mo.vstack([mo.md(f"# What `{numbers.search.name}` misses on {session.dataset.name}"),
               mo.hstack([category, cutoff], justify="start")])
    return category, cutoff


@app.cell
def _(category, cutoff, numbers, session):
    misses = session.misses(numbers, k=cutoff.value, category=None if category.value == "all" else category.value)
    rescues = session.rescues(numbers, k=cutoff.value)
    return misses, rescues


@app.cell
def _(misses, mo, pl, session, views):
    _cols = ["qid", "category", "question", "memory_id", "fused_rank", *session.signals]
    mo.vstack([
        mo.md(f"**{misses.height}** gold memories outside the top, in **{misses['qid'].n_unique()}** questions. "
              "Each signal's column is the rank its own list gave the gold memory (empty: not returned)."),
        views.signal_rank_chart(misses, session.signals),
        mo.ui.table(misses.select([c for c in _cols if c in misses.columns]).with_columns(pl.col("question").str.slice(0, 90)),
                    selection=None, page_size=10),
    ])
    return


@app.cell
def _(misses, mo):
    _rows = misses.head(25).iter_rows(named=True)
    _blocks = []
    for _r in _rows:
        _instead = "".join(f"<li>[{i}] {t}</li>" for i, t in zip(_r["retrieved_ids"] or [], _r["retrieved_texts"] or []))
        _blocks.append(f"<details><summary><b>{_r['qid']}</b> ({_r['category']}): {_r['question']}</summary>"
                       f"<p><b>gold</b> [{_r['memory_id']}] (fused rank {_r['fused_rank'] or '> 100'}): {_r['gold_text']}</p>"
                       f"<p><b>retrieved instead</b></p><ol>{_instead}</ol></details>")
    mo.vstack([mo.md("### Gold beside what was retrieved (first 25)"), mo.Html("".join(_blocks) or "<i>no misses</i>")])
    return


@app.cell
def _(mo, pl, rescues):
    _counts = rescues.group_by("rescue").len().sort("rescue") if rescues.height else rescues
    mo.vstack([mo.md("### Rescues: gold in the top that only one of BM25 and the vector list returned"),
               mo.ui.table(_counts, selection=None),
               mo.ui.table(rescues.select("rescue", "qid", "category", "question", "memory_id", "fused_rank", "gold_text")
                           .with_columns(pl.col("question").str.slice(0, 80), pl.col("gold_text").str.slice(0, 120))
                           if rescues.height else rescues, selection=None, page_size=10)])
    return


if __name__ == "__main__":
    import sys

    from lab.cli.common import run_notebook

    sys.exit(run_notebook(app, ('dataset', 'preset', 'config')))
