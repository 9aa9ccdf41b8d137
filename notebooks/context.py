import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="lab: context")


@app.cell
def _():
    import marimo as mo
    from lab.workspace import Workspace, install

    install(Workspace.resolve())  # a notebook is an edge: the environment is read here, once

    from lab.notebook import views
    from lab.tune.session import TuneSession

    return TuneSession, mo, views


@app.cell
def _(TuneSession, mo):
    # `python notebooks/context.py --dataset locomo --question QID`
    from lab.workspace import current as _current

    _args = mo.cli_args()
    with mo.status.spinner("opening the dataset and its cached candidates"):  # in the workspace the setup cell installed
        session = TuneSession.from_args(_args, _current())
    first = session.question_id(_args.get("question"))
    return first, session


@app.cell
def _(first, mo, session):
    _labels = {f"{q} | {t[:70]}": q for q, t in session.dataset.questions.select("qid", "question").iter_rows()}
    question = mo.ui.dropdown(_labels, value=next(k for k, v in _labels.items() if v == first), label="question",
                              searchable=True)
    budget = mo.ui.slider(100, 8000, 100, value=session.base_assemble.budget, label="token budget", show_value=True)
    critical = mo.ui.slider(0.0, 1.0, 0.05, value=session.base_assemble.critical_ratio, label="critical zone",
                            show_value=True)
    recency = mo.ui.slider(0.0, 1.0, 0.05, value=session.base_assemble.recency_ratio, label="recency zone",
                           show_value=True)
    mo.vstack([mo.md("# The assembled context of one question"), question,
               mo.hstack([budget, critical, recency], justify="start")])
    return budget, critical, question, recency


@app.cell
def _(budget, critical, mo, question, recency, session, views):
    search, assemble = session.configure({"assemble.budget": budget.value, "assemble.critical_ratio": critical.value,
                                          "assemble.recency_ratio": recency.value})
    numbers = session.numbers(search, assemble)
    qid = question.value
    ctx = session.context(qid, numbers)
    gold = session.gold_of(qid)
    _placed = sum(i.memory_id in gold for i in ctx.items)
    _text = session.dataset.questions.filter(session.dataset.questions["qid"] == qid)["question"][0]
    mo.vstack([
        mo.md(f"**{qid}**: {_text}  \n{len(ctx.items)} items, {ctx.used} of {ctx.budget} tokens; "
              f"gold placed {_placed} of {len(gold)}. Zones: "
              + ", ".join(f"<span style='color:{c}'>■ {z}</span>" for z, c in views.ZONE_COLOURS.items())),
        views.zone_usage_chart(ctx),
        mo.Html(views.context_html(ctx, gold)),
        mo.md("### Skipped, and why"),
        mo.ui.table(views.skipped_frame(ctx, gold), selection=None, page_size=10),
    ])
    return


if __name__ == "__main__":
    import sys

    from lab.cli.common import run_notebook

    sys.exit(run_notebook(app, ('dataset', 'preset', 'config', 'question')))
