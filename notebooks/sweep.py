import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="lab: sweep")


@app.cell
def _():
    import marimo as mo

    from lab.workspace import Workspace, install

    install(Workspace.resolve())  # a notebook is an edge: the environment is read here, once
    from lab.notebook import views

    return mo, views


@app.cell
def _(mo):
    # `python notebooks/sweep.py --sweep demo-small` (default: the newest sweep in MLflow);
    # `--folder runs/sweeps/NAME` reads a sweep folder instead of MLflow
    _args = mo.cli_args()
    sweep_name = mo.ui.text(value=str(_args.get("sweep") or ""), label="sweep name or MLflow run id (empty: newest)")
    folder = _args.get("folder")
    mo.vstack([mo.md("# A sweep's results, from MLflow"), sweep_name])
    return folder, sweep_name


@app.cell
def _(folder, mo, sweep_name, views):
    from lab.track.connect import Tracking as _Tracking
    from lab.workspace import current as _current

    with mo.status.spinner("reading the sweep's artifacts"):  # from the installed workspace's tracking store
        sweep = views.load_sweep(sweep_name.value or None, uri=_Tracking.of(_current()), folder=folder)
    mo.stop(sweep is None, mo.md(views.NO_SWEEP))
    _s = sweep["summary"]
    mo.md(f"**{_s['sweep']}** on {_s['dataset']} ({_s['strategy']}, {_s.get('configs')} configurations, "
          f"objective {_s['objective']}, constraints {', '.join(_s['constraints']) or 'none'}). "
          f"Best: {_s['objective']} **{_s['tune']:.4f}** on tune, **{_s['validation']:.4f}** on validation "
          f"(gap {_s['gap']:+.4f}). From {sweep['source']}.")
    return (sweep,)


@app.cell
def _(mo, sweep, views):
    _weights = views.sweep_weights(sweep)
    weight_pick = mo.ui.dropdown(_weights, value=_weights[0] if _weights else None, label="heatmap: weight axis")
    part_pick = mo.ui.dropdown(["tune", "validation", "all"], value="tune", label="questions")
    mo.hstack([weight_pick, part_pick], justify="start")
    return part_pick, weight_pick


@app.cell
def _(mo, part_pick, sweep, views, weight_pick):
    mo.hstack([views.sweep_heatmap(sweep, weight_pick.value, part_pick.value), views.pareto_chart(sweep)],
              justify="start")
    return


@app.cell
def _(mo, sweep, views):
    mo.vstack([mo.md("### Top configurations (tune), with validation and the gap"),
               mo.ui.table(views.top_configurations(sweep, 10), selection=None),
               views.gap_chart(sweep)])
    return


if __name__ == "__main__":
    import sys

    from lab.cli.common import run_notebook

    sys.exit(run_notebook(app, ('sweep', 'folder')))
