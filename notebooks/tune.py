import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="lab: tune")


@app.cell
def _():
    import marimo as mo

    from lab.workspace import Workspace, install

    install(Workspace.resolve())  # a notebook is an edge: the environment is read here, once
    from lab.search.presets import PRESETS
    from lab.notebook import views
    from lab.tune.session import TUNED, TuneSession

    return PRESETS, TUNED, TuneSession, mo, views


@app.cell
def _(PRESETS, TuneSession, mo):
    # `python notebooks/tune.py --dataset locomo` or `marimo run notebooks/tune.py -- --dataset locomo`
    _args = mo.cli_args()
    _datasets = ["demo", "locomo", "scifact"]
    dataset_pick = mo.ui.dropdown(_datasets, value=TuneSession.choice("--dataset", _args.get("dataset") or "demo",
                                                                       _datasets), label="dataset")
    preset_pick = mo.ui.dropdown(sorted(PRESETS), value=TuneSession.choice("--preset", _args.get("preset") or "lab",
                                                                           sorted(PRESETS)), label="preset")
    out = str(_args.get("out") or "runs/notebook")  # where logged runs and gate reports go
    mo.vstack([mo.md("# Tune retrieval and assembly\n"
                     "Every change re-fuses the cached candidates and re-assembles every question; "
                     "nothing is re-embedded. The preset's own numbers are the baseline."),
               mo.hstack([dataset_pick, preset_pick], justify="start")])
    return dataset_pick, out, preset_pick


@app.cell
def _(TuneSession, dataset_pick, mo, preset_pick):
    from lab.workspace import current as _current

    with mo.status.spinner(f"opening {dataset_pick.value} with {preset_pick.value} (store and candidates are cached after the first time)"):
        session = TuneSession.open(dataset_pick.value, preset_pick.value, progress=False, workspace=_current())
    start = session.knobs()
    return session, start


@app.cell
def _(mo):
    reset_button = mo.ui.run_button(label="reset to the preset")
    return (reset_button,)


@app.cell
def _(mo, reset_button, session, start):
    reset_button  # clicked: every control below is made again at the preset's values
    method = mo.ui.dropdown(session.methods(), value=start["fusion.method"], label="fusion method")
    rrf_k = mo.ui.slider(0, 100, 1, value=int(start["fusion.k"]), label="RRF k", show_value=True, include_input=True)
    boost = mo.ui.slider(0.0, 1.0, 0.05, value=start["fusion.neighbour_boost"], label="neighbour boost", show_value=True)
    weights = mo.ui.dictionary({s: mo.ui.slider(0.0, 2.0, 0.05, value=start[f"fusion.weights.{s}"], show_value=True,
                                                label=f"{s} weight") for s in session.signals})
    critical = mo.ui.slider(0.0, 1.0, 0.05, value=start["assemble.critical_ratio"], label="critical zone", show_value=True)
    recency = mo.ui.slider(0.0, 1.0, 0.05, value=start["assemble.recency_ratio"], label="recency zone", show_value=True)
    budget = mo.ui.slider(100, 8000, 100, value=int(start["assemble.budget"]), label="token budget", show_value=True)
    mo.hstack([mo.vstack([mo.md("**Fusion**"), method, rrf_k, boost, mo.md("**Signal weights**"),
                          *[weights[s] for s in session.signals]]),
               mo.vstack([mo.md("**Assembly** (the middle zone takes the rest)"), critical, recency, budget,
                          reset_button])],
              justify="start", gap=3)
    return boost, budget, critical, method, recency, rrf_k, weights


@app.cell
def current_knobs(TUNED, boost, budget, critical, method, mo, recency, rrf_k, session, weights):
    knobs = {"fusion.method": method.value, "fusion.k": rrf_k.value, "fusion.neighbour_boost": boost.value,
             **{f"fusion.weights.{s}": w for s, w in weights.value.items()},
             "assemble.critical_ratio": critical.value, "assemble.recency_ratio": recency.value,
             "assemble.budget": budget.value}
    search, assemble = session.configure(knobs)
    numbers = session.numbers(search, assemble)
    # the errors notebook can analyse what is tuned here (its "last saved knobs" choice reads this file)
    _saved = session.write_candidate(search, assemble, TUNED)
    mo.md(f"<small>These knobs are saved to {_saved} for the errors notebook.</small>")
    return assemble, numbers, search


@app.cell
def _(mo, numbers, session, views):
    mo.vstack([
        mo.md(f"### {session.dataset.name}: {len(session.qids)} questions, "
              f"recall@10 <span id='recall-at-10'>{numbers.means['recall@10']:.4f}</span>"),
        mo.md(views.metrics_markdown(numbers, session.baseline)),
        mo.md(f"<small>recomputed in {numbers.seconds * 1000:.0f} ms</small>"),
    ])
    return


@app.cell
def _(mo, numbers, session, views):
    mo.hstack([views.curve_chart(numbers, session.baseline), views.category_chart(numbers, session.baseline)],
              justify="start")
    return


@app.cell
def _(mo, numbers, session, views):
    paired = session.paired(numbers)
    changed = session.changes(numbers)
    change_table = mo.ui.table(views.rounded(changed), selection="single",
                               label="questions the change moved (select one for its ranked lists)")
    _fixed, _broken = (changed["change"] == "fixed").sum(), (changed["change"] == "broken").sum()
    mo.vstack([mo.md(f"### What changed against the preset: {_fixed} question(s) fixed, {_broken} broken "
                     "(recall@10)"),
               mo.md(views.paired_markdown(paired)), change_table])
    return (change_table,)


@app.cell
def ranked_lists_of_one_question(change_table, mo, numbers, session, views):
    mo.stop(change_table.value is None or change_table.value.height == 0,
            mo.md("_Select a question above to see its ranked lists, before and after._"))
    _qid = change_table.value["qid"][0]
    _question = change_table.value["question"][0].rstrip()
    # a question ends in its own mark ("...two days ago?"): a period only where it has none
    _stop = "" if _question.endswith((".", "?", "!")) else "."
    mo.vstack([mo.md(f"**{_qid}**: {_question}{_stop} Each memory's rank in every signal's "
                     "own list (empty: that signal did not return it)."),
               mo.hstack([mo.vstack([mo.md("preset"), mo.ui.table(views.memories_table(
                              session.ranked(_qid, session.baseline)), selection=None)]),
                          mo.vstack([mo.md("tuned"), mo.ui.table(views.memories_table(
                              session.ranked(_qid, numbers)), selection=None)])], widths="equal")])
    return


@app.cell
def _(mo, numbers, session, views):
    mo.vstack([mo.md("### Context recall against tokens (these fusion and zone settings, each budget)"),
               views.budget_chart(session.budget_curve(numbers), session.budget_curve(session.baseline),
                                  numbers.assemble.budget)])
    return


@app.cell
def _(mo, session):
    query_box = mo.ui.text(placeholder="ask the store anything", label="query", full_width=True)
    _spaces = sorted(session.dataset.questions["namespace"].unique().to_list())
    space_pick = mo.ui.dropdown(_spaces, value=_spaces[0], label="namespace")
    mo.vstack([mo.md("### Try a query with the tuned configuration"), mo.hstack([query_box, space_pick])])
    return query_box, space_pick


@app.cell
def live_query(mo, query_box, search, session, space_pick, views):
    mo.stop(not query_box.value.strip(), mo.md("_Type a query above._"))
    mo.ui.table(views.memories_table(session.live_search(query_box.value, space_pick.value, search)), selection=None)
    return


@app.cell
def _(mo):
    log_button = mo.ui.run_button(label="log this configuration to MLflow")

    gate_button = mo.ui.run_button(label="run the gate on it")
    save_button = mo.ui.run_button(label="save these knobs as a preset file")
    mo.hstack([log_button, gate_button, save_button], justify="start")
    return gate_button, log_button, save_button


@app.cell
def _(assemble, mo, out, save_button, search, session):
    mo.stop(not save_button.value, mo.md("_Not saved yet._"))
    _path = session.write_candidate(search, assemble, f"{out}/tuned-{session.dataset.name}.yaml")
    mo.md(f"Saved <span id='saved-preset'>`{_path}`</span>: `lab eval --config {_path}`, "
          f"`lab gate --candidate {_path}`, or the errors notebook with `--config {_path}`.")
    return



@app.cell
def _(assemble, log_button, mo, out, search, session):
    mo.stop(not log_button.value, mo.md("_Not logged yet._"))
    from lab.track.connect import Tracking as _Tracking
    from lab.workspace import current as _current

    with mo.status.spinner("evaluating through lab eval and logging"):  # to the installed workspace's tracking store
        run_id, folder = session.log(search, assemble, out=out, uri=_Tracking.of(_current()))
    mo.md(f"Logged MLflow run <span id='logged-run'>{run_id}</span> (run folder `{folder}`).")
    return


@app.cell
def _(assemble, gate_button, mo, out, search, session, views):
    mo.stop(not gate_button.value, mo.md("_Gate not run yet._"))
    from lab.flow.stages import gate_candidate, judging_in
    from lab.track.connect import Tracking as _Tracking
    from lab.workspace import current

    _workspace = current()  # the one the setup cell installed
    _gate_file = _workspace.project / "goldens" / ("gate-demo.yaml" if session.dataset.name == "demo" else "gate.yaml")
    _candidate = session.write_candidate(search, assemble, f"{out}/tune-candidate.yaml")
    with mo.status.spinner(f"gate {_gate_file} on {_candidate}"):
        report = gate_candidate(_gate_file, _candidate, judging_in(_workspace), out_root=f"{out}/gate",
                                uri=_Tracking.of(_workspace))
    mo.vstack([mo.md(f"## Gate: <span id='gate-verdict'>{report.verdict}</span> ({_gate_file.name}, "
                     f"MLflow run `{report.run_id}`)"), mo.ui.table(views.checks_frame(report), selection=None)])
    return


if __name__ == "__main__":
    import sys

    from lab.cli.common import run_notebook

    sys.exit(run_notebook(app, ('dataset', 'preset', 'config', 'out')))
