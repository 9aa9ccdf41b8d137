"""`run_sweep`: a sweep file's configurations scored on cached candidates, the best chosen on tune.

Index-time points (context turns, time in text, chunking, HNSW ef, candidate depth) each get an
evaluation store and a candidate table keyed by a fingerprint of their configuration, so a repeated
sweep rebuilds nothing and re-embeds nothing. Query-time fusion points are scored many at a time by
`BatchScorer`. Assembly (budget, zone ratios, thresholds) is scored for the best ``top_n`` fusion
configurations through the real assembler. Ctrl-C stops the sweep and keeps what was scored.
"""
from __future__ import annotations

import json
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import polars as pl

from lab.progress import progress
from lab.config import DEFAULT_KS, AssembleConfig, SaveConfig, SearchConfig
from lab.engine import Engine
from lab.errors import LabError, LabWarning, ValidationError
from lab.eval.dataset import EvalDataset
from lab.eval.health import list_warnings
from lab.eval.dataset_ref import DatasetOptions, DatasetRef
from lab.tune.batch import EXACT_PATH_LEVERS, BatchScorer, exact_path_reasons
from lab.tune.index_points import build_index_points, group_key, index_point_units
from lab.tune.output import log_sweep, summary, write_sweep
from lab.tune.params import assemble_config, save_config, search_config, table_point
from lab.tune.selection import ALPHA, METHOD, corrected_gain, tied_with_best
from lab.tune.spec import CONTEXT_METRICS, SweepSpec
from lab.eval.split import split_questions
from lab.tune.strategies import make_strategy

if TYPE_CHECKING:
    from lab.track.connect import Where

PARTS = ("tune", "validation", "all")


@dataclass
class SweepResult:
    spec: SweepSpec
    table: pl.DataFrame  # one row per fusion configuration: params, then metrics per part
    assembly: pl.DataFrame  # best fusion configurations x assembly points, with context metrics
    best: dict[str, Any]  # the chosen row (params and metrics)
    best_config: SearchConfig
    best_save: SaveConfig
    best_assemble: AssembleConfig
    pareto: pl.DataFrame
    folder: Path
    split: pl.DataFrame
    interrupted: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Group:
    """One index-time point: its retriever and the scorer over its candidate table."""
    retriever: Any
    scorer: BatchScorer


def run_sweep(spec: SweepSpec, *, datasets: str | Path | None = None, out_root: str | Path = "sweeps",
              progress: bool = True, embedder=None, root: Path | None = None, track: bool = True,
              tracking_uri: Where = None, on_stage: Callable[[str], None] | None = None,
              embeddings: Path | None = None, engine: Engine | None = None,
              project: str | Path | None = None) -> SweepResult:
    """Run ``spec``; write its folder under ``out_root``; log it to MLflow when ``track``. Its
    evaluation stores and candidate tables go under ``root``, its vectors to the ``embeddings``
    cache, its built-in datasets come from ``datasets`` and its demo from ``project`` (each None:
    the built-in one; the edges hand their workspace's); each index-time
    point's store embeds its texts on ``engine`` (None: in this process)."""
    started = time.perf_counter()
    sweep = _Sweeper(spec, DatasetRef(spec.dataset, datasets, options=DatasetOptions(spec.observations), project=project),
                     root, embedder, progress, on_stage or (lambda _msg: None), embeddings, engine)
    if sweep.base.rerank.server:
        raise ValidationError(f"sweep {spec.name!r}: its base configuration has a rerank server stage "
                              f"(rerank.server {sweep.base.rerank.server!r}), which a sweep does not replay; sweep "
                              "without it, then measure the winner with the stage by `lab eval --config`",
                              field="rerank.server")
    rows, interrupted, fusion_seconds = sweep.fusion_stage()
    if not rows:
        raise ValidationError("the sweep scored no configuration" + (" (interrupted)" if interrupted else ""))
    table = pl.DataFrame(rows, infer_schema_length=None)
    info = sweep.info(table, fusion_seconds)
    ranked = (table.filter(pl.col("feasible") & pl.col("error").is_null())
              .sort([f"tune/{sweep.fusion_objective(table)}", "trial"], descending=[True, False]))
    assembly = pl.DataFrame()
    if not interrupted and ranked.height:
        try:
            assembly = _assembly_stage(spec, ranked.head(spec.top_n), sweep.base, sweep.dataset, sweep.group_for,
                                       sweep.parts, sweep.qids, sweep.ks, progress, sweep.say)
        except KeyboardInterrupt:
            interrupted = True
    best_row, best_asm = _choose(spec, ranked, assembly)
    point = {d.name: best_row[d.name] for d in spec.space if d.stage != "assemble" and d.name in best_row}
    best_config = replace(search_config(sweep.base, point), name=f"{spec.name}-best",
                          description=f"best of sweep {spec.name} on {sweep.dataset.name} ({spec.objective} on tune)")
    if not interrupted:
        sweep.say("honest selection: the winner against the base, corrected for every configuration compared")
        info["selection"] = sweep.selection(ranked, best_row["trial"], sweep.fusion_objective(table))
    info["seconds"] = round(time.perf_counter() - started, 2)
    folder = Path(out_root) / spec.name
    result = SweepResult(spec, table, assembly, {**best_row, **(best_asm or {})}, best_config, save_config(point),
                         assemble_config(AssembleConfig(), best_asm or {}), _pareto(assembly), folder, sweep.split,
                         interrupted, info)
    write_sweep(result, sweep.dataset)
    if track:
        result.info["mlflow_run_id"] = log_sweep(result, sweep.dataset, sweep.groups, tracking_uri)
        (folder / "summary.json").write_text(json.dumps(summary(result), indent=2, default=str) + "\n", encoding="utf-8")
    return result


class _Sweeper:
    """One sweep's data (the dataset, its tune/validation split, the base configuration) and its
    index-time groups, each a retriever with a batch scorer over its candidate table."""

    def __init__(self, spec: SweepSpec, data: DatasetRef, root: Path | None, embedder: Any,
                 progress: bool, say: Callable[[str], None], embeddings: Path | None = None,
                 engine: Engine | None = None) -> None:
        from lab.eval.report import config_from  # heavy: numba

        self.spec, self.root, self.embedder, self.progress, self.say = spec, root, embedder, progress, say
        self.embeddings, self.engine = embeddings, engine
        self.data = data
        self.dataset = self.data.load()
        base_path = Path(spec.base)
        self.base = (config_from(None, base_path) if base_path.suffix in (".yaml", ".yml", ".json")
                     else config_from(spec.base, None))
        self.split = split_questions(self.dataset.questions, spec.validation, spec.seed)
        self.qids = self.split["qid"].to_list()
        self.parts = {"tune": (self.split["part"] == "tune").to_numpy(),
                      "validation": (self.split["part"] == "validation").to_numpy(),
                      "all": np.ones(self.split.height, dtype=bool)}
        self.ks = tuple(sorted(set(spec.ks) | {int(m.split("@")[1]) for m in [spec.objective] if "@" in m}))
        self.groups: dict[str, _Group] = {}
        self.warnings: list[str] = []  # what the candidate lists say about fusing them (lab.eval.health)
        # each scored configuration's objective per question (all questions), by trial: what the
        # honest-selection statistics compare (lab.tune.selection)
        self.per_query: dict[int, np.ndarray] = {}
        self.objective_metric = self.spec.objective if self.spec.objective not in CONTEXT_METRICS else "recall@10"

    def group_for(self, point: dict[str, Any]) -> _Group:
        """The group of the point's index-time settings (built, searched and cached on first use)."""
        from lab.eval.candidate_cache import open_candidates, prepared_for  # heavy: numba

        save = save_config(point)
        config = search_config(self.base, point)
        key = group_key(save, config)
        if key not in self.groups:
            index_point = {k: v for k, v in point.items() if k.startswith("index.")}
            self.say(f"index point {len(self.groups) + 1}: {json.dumps(index_point)}")
            # the depth `lab eval` uses, so a sweep and an evaluation share one cached table
            opened = open_candidates(self.dataset, save, [config], root=self.root, depth=max(DEFAULT_KS),
                                     embeddings=self.embeddings, embedder=self.embedder, progress=self.progress,
                                     engine=self.engine)
            self.groups[key] = _Group(opened.retriever, BatchScorer(prepared_for(opened.tables[0]), self.dataset.qrels,
                                                                    self.qids, ks=self.ks))
            # lists that cannot fuse (one mostly empty, two whose ids never meet): said once per index point
            for line in list_warnings(opened.tables[0], len(self.qids), (*config.signals, *config.encoders)):
                self.warnings.append(line)
                warnings.warn(LabWarning(f"sweep {self.spec.name}: {line}"), stacklevel=2)
        return self.groups[key]

    def build_ahead(self, points: list[dict[str, Any]]) -> None:
        """On Ray, the stores and candidate tables ``points`` need and the sweep lacks, built as one
        task each (lab.tune.index_points); locally each is built when first scored."""
        if self.engine is None or self.engine.in_process:
            return
        from lab.eval.stores import embeddings_dir, eval_root  # heavy: numba

        root = eval_root(self.root).resolve()
        units = index_point_units(points, self.base, save_config, search_config, data=self.data.portable(), root=root,
                                  embeddings=embeddings_dir(root, self.embeddings).resolve(),
                                  model=getattr(self.embedder, "model_id", None), skip=set(self.groups))
        if len(units) > 1:  # one alone is built here, as locally: a task would only add its start-up
            self.say(f"building {len(units)} index points as Ray tasks ({self.engine.describe()})")
            build_index_points(units, self.engine)

    def fusion_stage(self) -> tuple[list[dict[str, Any]], bool, float]:
        """Every fusion point the strategy asks for, scored on every question: (rows, whether
        interrupted, seconds spent fusing). An interrupt keeps everything scored so far."""
        spec = self.spec
        strategy = make_strategy(spec.strategy, [d for d in spec.space if d.stage != "assemble"], spec.trials,
                                 spec.seed)
        chunk = 16 if spec.strategy == "tpe" else 2048
        exact = self.exact_path()
        if exact:  # said before the long part starts: what keeps the sweep off the fast path
            self.say(f"exact path: {'; '.join(exact)}: configurations with it are scored one at a time "
                     "through fuse, slower than the vectorised batches (the sweep reports its rate at the end)")
        rows: list[dict[str, Any]] = []
        interrupted, fusion_seconds = False, 0.0
        bar = _progress(strategy.total(), self.progress, f"sweep {spec.name}")
        total = strategy.total()
        try:
            while True:
                # on the exact path, a few configurations first: their rate says what the rest will cost
                points = strategy.ask(8 if exact and not rows else chunk)
                if not points:
                    break
                self.build_ahead(points)
                scores, seconds = self.score_points(points, rows)
                fusion_seconds += seconds
                strategy.tell(points, scores)
                bar.update(len(points))
                if exact and len(rows) == len(points) and seconds > 0:
                    rate = len(points) / seconds
                    left = (total - len(points)) if total else None
                    self.say(f"exact path measured: {rate:.1f} configurations/s"
                             + (f"; about {left / rate:.0f} s for the other {left}" if left else ""))
        except KeyboardInterrupt:
            interrupted = True
        finally:
            bar.close()
        return rows, interrupted, fusion_seconds

    def score_points(self, points: list[dict[str, Any]], rows: list[dict[str, Any]]) -> tuple[list[float | None], float]:
        """Score ``points`` (appending a row each to ``rows``); returns each point's objective on
        the tune part (None when infeasible) and the seconds spent fusing."""
        spec = self.spec
        scores: list[float | None] = [None] * len(points)
        by_group: dict[int, tuple[_Group, list[int]]] = {}
        for i, point in enumerate(points):
            group = self.group_for(point)
            by_group.setdefault(id(group), (group, []))[1].append(i)
        seconds = 0.0
        for group, members in by_group.values():
            configs, ok = [], []
            for i in members:
                try:
                    configs.append(search_config(self.base, points[i]).fusion)
                    ok.append(i)
                except (LabError, ValueError) as exc:
                    rows.append({"trial": len(rows), **table_point(points[i]), "feasible": False, "error": str(exc)})
            t0 = time.perf_counter()
            per_q = group.scorer.evaluate(configs) if configs else {}
            seconds += time.perf_counter() - t0
            for j, i in enumerate(ok):
                row = {"trial": len(rows), **table_point(points[i])}
                for part, mask in self.parts.items():
                    for m, arr in per_q.items():
                        row[f"{part}/{m}"] = float(arr[j][mask].mean()) if mask.any() else float("nan")
                row["feasible"] = all(c.ok(row[f"tune/{c.metric}"]) for c in spec.constraints
                                      if c.metric not in CONTEXT_METRICS)
                row["error"] = None
                metric = self.objective_metric if self.objective_metric in per_q else f"recall@{max(self.ks)}"
                self.per_query[row["trial"]] = np.asarray(per_q[metric][j], dtype=np.float64)
                rows.append(row)
                if row["feasible"] and spec.objective not in CONTEXT_METRICS:
                    scores[i] = row[f"tune/{spec.objective}"]
        return scores, seconds

    def exact_path(self) -> list[str]:
        """Why some of the sweep's configurations leave the batch scorer's vectorised path: the base
        configuration's settings, and swept values that turn such a setting on."""
        reasons = [f"{r} (the base {self.base.name})" for r in exact_path_reasons(self.base.fusion)]
        for dim in self.spec.space:
            name = dim.name.removeprefix("fusion.")
            if name in EXACT_PATH_LEVERS and any(v for v in dim.values):
                reasons.append(f"{dim.name} swept over {list(dim.values)}")
        return reasons

    def fusion_objective(self, table: pl.DataFrame) -> str:
        """What the fusion stage ranks by: the objective, unless it is a context metric (scored in
        the assembly stage) or a cutoff not computed."""
        objective = self.spec.objective if self.spec.objective not in CONTEXT_METRICS else "recall@10"
        return objective if f"tune/{objective}" in table.columns else f"recall@{max(self.ks)}"

    def selection(self, ranked: pl.DataFrame, best_trial: int, objective: str) -> dict[str, Any]:
        """The winner's validation change against the base configuration, corrected for every
        configuration compared, and the configurations tied with it on tune (lab.tune.selection)."""
        trials = [t for t in ranked["trial"].to_list() if t in self.per_query]
        if best_trial not in trials:
            return {}
        matrix = np.vstack([self.per_query[t] for t in trials])
        winner = trials.index(best_trial)
        metric = self.objective_metric if f"tune/{self.objective_metric}" in ranked.columns else objective
        base = self.group_for({}).scorer.evaluate([self.base.fusion])
        base_q = np.asarray(base[metric][0] if metric in base else base[objective][0], dtype=np.float64)
        out: dict[str, Any] = {"objective": metric, "base": self.base.name, "method": METHOD, "alpha": ALPHA,
                               "configurations": len(trials)}
        if self.parts["validation"].any():
            out["validation_gain"] = corrected_gain(matrix, base_q, winner, self.parts["validation"],
                                                    seed=self.spec.seed)
        tied, p = tied_with_best(matrix, winner, self.parts["tune"], seed=self.spec.seed)
        params = [c for c in ranked.columns if "/" not in c and c not in ("trial", "feasible", "error")]
        by_trial = {r["trial"]: r for r in ranked.iter_rows(named=True)}
        members = sorted(({"trial": trials[i], **{c: by_trial[trials[i]][c] for c in params},
                           f"tune/{metric}": by_trial[trials[i]][f"tune/{metric}"],
                           f"validation/{metric}": by_trial[trials[i]].get(f"validation/{metric}"),
                           "p_corrected": round(float(p[i]), 4)} for i in tied),
                         # the winner first (a configuration equal to it on tune may have a lower
                         # number), then by the objective on tune
                         key=lambda r: (r["trial"] != best_trial, -r[f"tune/{metric}"], r["trial"]))
        out["tied_with_best"] = {"count": len(members), "of": len(trials), "members": members}
        return out

    def info(self, table: pl.DataFrame, fusion_seconds: float) -> dict[str, Any]:
        n_scored = int(table.filter(pl.col("error").is_null()).height)
        return {"configs": table.height, "scored": n_scored, "fusion_seconds": round(fusion_seconds, 3),
                "exact_path": self.exact_path(),
                "configs_per_second": round(n_scored / fusion_seconds, 1) if fusion_seconds else None,
                "index_points": len(self.groups), "questions": self.split.height,
                "validation_questions": int(self.parts["validation"].sum()),
                "split_by": "conversation" if self.split["group"].n_unique() < self.split.height else "question",
                "warnings": list(self.warnings)}


def _assembly_stage(spec: SweepSpec, top: pl.DataFrame, base: SearchConfig, dataset: EvalDataset, group_for,
                    parts: dict[str, np.ndarray], qids: list[str], ks: tuple[int, ...], progress: bool,
                    say) -> pl.DataFrame:
    """The best fusion configurations x every assembly point: each fusion configuration's run is
    assembled under all points at once by `BatchAssembler` (equal to `context_metrics`)."""
    import itertools

    from lab.eval.runner import EvalOptions, fused_run  # heavy: numba
    from lab.tune.assembly import BatchAssembler  # heavy: numba

    dims = spec.dims("assemble")
    points = [dict(zip([d.name for d in dims], combo)) for combo in itertools.product(*[d.values for d in dims])] or [{}]
    say(f"assembly: {top.height} configurations x {len(points)} assembly points")
    configs, errors = [], {}
    for i, apoint in enumerate(points):
        try:
            configs.append(assemble_config(AssembleConfig(), apoint))
        except (LabError, ValueError) as exc:
            errors[i] = str(exc)
            configs.append(None)
    valid = [c for c in configs if c is not None]
    rows = []
    bar = _progress(top.height * len(points), progress, "assembly")
    try:
        for fusion_row in top.iter_rows(named=True):
            point = {d.name: fusion_row[d.name] for d in spec.space if d.stage != "assemble" and d.name in fusion_row}
            group = group_for(point)
            config = search_config(base, point)
            # the same run `lab eval` assembles: the top max(DEFAULT_KS) results
            run = fused_run(group.scorer.prep, config, EvalOptions(), dataset)
            metrics = BatchAssembler.for_run(group.retriever, dataset, run, config, qids).evaluate(valid) if valid else {}
            at = 0
            for i, apoint in enumerate(points):
                if i in errors:
                    rows.append({"trial": fusion_row["trial"], **apoint, "error": errors[i]})
                    continue
                row: dict[str, Any] = {"trial": fusion_row["trial"], **apoint, "error": None}
                for part, mask in parts.items():
                    for m in CONTEXT_METRICS:
                        vals = metrics[m][at][mask]
                        row[f"{part}/{m}"] = float(vals.mean()) if len(vals) else float("nan")
                    for m in (f"recall@{max(ks)}", spec.objective):
                        if f"{part}/{m}" in fusion_row:
                            row[f"{part}/{m}"] = fusion_row[f"{part}/{m}"]
                rows.append(row)
                at += 1
            bar.update(len(points))
    finally:
        bar.close()
    return pl.DataFrame(rows, infer_schema_length=None)


def _choose(spec: SweepSpec, ranked: pl.DataFrame, assembly: pl.DataFrame) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The best feasible row on tune (ties: the earlier trial), and its assembly point."""
    if ranked.height == 0:
        raise ValidationError(f"no configuration satisfies the constraints {[str(c) for c in spec.constraints]}")
    asm_dims = [d.name for d in spec.dims("assemble")]
    context_constraints = [c for c in spec.constraints if c.metric in CONTEXT_METRICS]
    if assembly.height and (spec.objective in CONTEXT_METRICS or context_constraints or asm_dims):
        ok = assembly.filter(pl.col("error").is_null())
        ok = ok.filter(pl.Series([all(c.ok(r[f"tune/{c.metric}"]) for c in context_constraints)
                                  for r in ok.iter_rows(named=True)], dtype=pl.Boolean)) if ok.height else ok
        if ok.height:
            key = f"tune/{spec.objective}" if f"tune/{spec.objective}" in ok.columns else "tune/context_recall"
            best = ok.sort([key, "tune/context_tokens", "trial"], descending=[True, False, False]).row(0, named=True)
            fusion = ranked.filter(pl.col("trial") == best["trial"]).row(0, named=True)
            return fusion, {k: best[k] for k in asm_dims} | {f"{p}/{m}": best[f"{p}/{m}"] for p in PARTS
                                                             for m in CONTEXT_METRICS}
        if context_constraints:
            raise ValidationError(f"no configuration satisfies the constraints {[str(c) for c in spec.constraints]}")
    return ranked.row(0, named=True), None


def _pareto(assembly: pl.DataFrame) -> pl.DataFrame:
    """Rows not beaten on both context recall (higher) and tokens (lower), on all questions."""
    if assembly.height == 0 or "all/context_recall" not in assembly.columns:
        return pl.DataFrame()
    a = assembly.filter(pl.col("error").is_null()).sort(["all/context_tokens", "all/context_recall"],
                                                        descending=[False, True])
    keep, best = [], -1.0
    for r in a.iter_rows(named=True):
        if r["all/context_recall"] > best:
            keep.append(r)
            best = r["all/context_recall"]
    return pl.DataFrame(keep, infer_schema_length=None)


def _progress(total: int | None, enabled: bool, desc: str):
    return progress(total=total, desc=desc, unit="cfg", enabled=enabled)
