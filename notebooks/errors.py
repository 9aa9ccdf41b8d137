import marimo

__generated_with = "0.25.2"
app = marimo.App(width="full", app_title="lab: errors")


@app.cell
def _():
    import marimo as mo
    from lab.workspace import Workspace, install

    install(Workspace.resolve())  # a notebook is an edge: the environment is read here, once
    import polars as pl

    from lab.notebook import views
    from lab.tune.session import TuneSession

    return TuneSession, mo, pl, views


@app.cell
def _(TuneSession, mo):
    # `python notebooks/errors.py --dataset locomo --preset lab` (or `--config runs/sweeps/NAME/best.yaml`)
    from lab.workspace import current as _current

    _args = mo.cli_args()
    with mo.status.spinner("opening the dataset and its cached candidates"):  # in the workspace the setup cell installed
        session = TuneSession.from_args(_args, _current())
    started = f"the configuration file {_args.get('config')}" if _args.get("config") else \
        f"the preset {_args.get('preset') or 'lab'}"
    return session, started


@app.cell
def configuration_source(mo, started):
    from lab.tune.session import TUNED

    # the preset unless the reader picks otherwise: the tune notebook's file changes with every slider
    source = mo.ui.radio({started: "start", f"the tune notebook's last saved knobs ({TUNED})": "tuned"},
                         value=started, label="analyse")
    source
    return TUNED, source


@app.cell
def _(TUNED, mo, session, source, started):
    from lab.config import load_candidate

    mo.stop(source.value == "tuned" and not TUNED.is_file(),
            mo.md(f"**The tune notebook has saved no knobs yet**: it writes `{TUNED}` (from the folder it runs "
                  "in) as its sliders move. Open it (`marimo edit notebooks/tune.py`), or analyse the preset."))
    if source.value == "start":
        numbers, analysed = session.baseline, started
    else:
        _tuned = load_candidate(TUNED)
        numbers = session.numbers(_tuned.search, _tuned.assemble or session.base_assemble)
        analysed = f"the tune notebook's last saved knobs ({TUNED})"
    return analysed, numbers


@app.cell
def _(analysed, mo, numbers, session):
    category = mo.ui.dropdown(["all"] + sorted(set(session.categories.tolist())), value="all", label="category")
    cutoff = mo.ui.slider(1, 50, 1, value=10, label="missed = gold outside the top", show_value=True)
    mo.vstack([mo.md(f"# What `{numbers.search.name}` misses on {session.dataset.name}\n"
                     f"Analysing <span id='analysed'>{analysed}</span>."),
               mo.hstack([category, cutoff], justify="start")])
    return category, cutoff


@app.cell
def _(category, cutoff, numbers, session):
    misses = session.misses(numbers, k=cutoff.value, category=None if category.value == "all" else category.value)
    rescues = session.rescues(numbers, k=cutoff.value)
    return misses, rescues


@app.cell
def _(misses, mo, pl, session, views):
    _per_gold = ["memory_id", "fused_rank", *[s for s in session.signals if s in misses.columns]]
    _table = views.per_question(misses.select("qid", "category", "question", *_per_gold), _per_gold)
    mo.vstack([
        mo.md(f"**{misses.height}** gold memories outside the top, in **{misses['qid'].n_unique()}** questions. "
              "One row per question: `memory_id` lists its missed gold memories, and the fused rank and each "
              "signal's column give their ranks in the same order (–: past the top 100, or not returned)."),
        views.signal_rank_chart(misses, session.signals),
        mo.ui.table(_table.with_columns(pl.col("question").str.slice(0, 90)), selection=None, page_size=10),
    ])
    return


@app.cell
def _(misses, mo):
    _blocks = []
    for _q in misses.partition_by("qid", maintain_order=True)[:25]:  # one block per question, each gold in it
        _r = _q.row(0, named=True)
        _gold = "".join(f"<p><b>gold</b> [{g['memory_id']}] (fused rank {g['fused_rank'] or '> 100'}): {g['gold_text']}</p>"
                        for g in _q.iter_rows(named=True))
        _instead = "".join(f"<li>[{i}] {t}</li>" for i, t in zip(_r["retrieved_ids"] or [], _r["retrieved_texts"] or []))
        _blocks.append(f"<details><summary><b>{_r['qid']}</b> ({_r['category']}): {_r['question']}</summary>"
                       f"{_gold}<p><b>retrieved instead</b></p><ol>{_instead}</ol></details>")
    mo.vstack([mo.md("### Gold beside what was retrieved (first 25 questions)"),
               mo.Html("".join(_blocks) or "<i>no misses</i>")])
    return


@app.cell
def _(mo, pl, rescues, views):
    _per_gold = ["rescue", "memory_id", "fused_rank", "gold_text"]
    _table = (views.per_question(rescues.select("qid", "category", "question", *_per_gold)
                                 .with_columns(pl.col("gold_text").str.slice(0, 120)), _per_gold, separator=" | ")
              .with_columns(pl.col("question").str.slice(0, 80)) if rescues.height else rescues)
    mo.vstack([mo.md("### Rescues: gold in the top that only one of BM25 and the vector list returned"),
               mo.ui.table(views.rescue_counts(rescues), selection=None),
               mo.ui.table(_table, selection=None, page_size=10)])
    return


if __name__ == "__main__":
    import sys

    from lab.cli.common import run_notebook

    sys.exit(run_notebook(app, ('dataset', 'preset', 'config')))
