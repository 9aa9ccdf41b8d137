"""`judge`: a candidate evaluated on every suite of a gate and held against the champion, giving
the checks and the verdict. No MLflow and no export here (`record`, `export`): the champion comes
in as a value, and what comes out is a `GateReport` with no run and no export yet."""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lab.config import Candidate, SaveConfig
from lab.errors import ConflictError
from lab.eval.goldens import load_dataset
from lab.gate.champion import Champion
from lab.gate.checks import Check, GateConfig, Suite, adapter_checks, suite_checks, verdict
from lab.gate.report import GateReport, SuiteResult

HEADLINE = ("recall@5", "recall@10", "ndcg@10", "mrr")


@dataclass(frozen=True)
class JudgeOptions:
    """Where the suites' data and stores are, and how the evaluation runs."""
    datasets: str | Path | None = None  # the datasets root (None: the built-in one; the edges pass their workspace's)
    root: Path | None = None  # the suites' evaluation stores (None: the built-in evaluation root)
    embedder: Any = None
    progress: bool = False
    rebaseline: bool = False  # compare against the champion re-evaluated on changed data instead of refusing
    embeddings: Path | None = None  # the embedding cache (None: one under root)
    project: str | Path | None = None  # where the demo and golden files' named datasets are (None: the built-in one)


@dataclass(frozen=True)
class _PerQuery:
    per_query: Any  # what suite_checks reads of the champion's evaluation


def judge(gate: GateConfig, chosen: Candidate, name: str, champion: Champion | None, folder: Path,
          opts: JudgeOptions = JudgeOptions(), selection: dict[str, Any] | None = None) -> GateReport:
    """Evaluate ``chosen`` on every suite (run folders under ``folder``), check it, and give the verdict.

    A suite's data (corpus or gold) that changed since the champion was judged is refused, naming
    both fingerprints, unless ``opts.rebaseline``: then the champion is re-evaluated on the new data
    and the check says so."""
    checks: list[Check] = []
    suites: dict[str, SuiteResult] = {}
    for suite in gate.suites:
        suite_result, suite_checks_ = _judge_suite(gate, suite, chosen, champion, folder, opts)
        suites[suite.name] = suite_result
        checks += suite_checks_
    checks += adapter_checks(gate, chosen.query_model, chosen.save.embed.model if chosen.save else None)
    return GateReport(verdict(checks), name, tuple(checks), suites, champion, folder, selection=selection,
                      query_model=chosen.query_model)


def _judge_suite(gate: GateConfig, suite: Suite, chosen: Candidate, champion: Champion | None, folder: Path,
                 opts: JudgeOptions) -> tuple[SuiteResult, list[Check]]:
    from lab.eval.report import write_run  # heavy: numba
    from lab.eval.runs import record_models  # heavy: numba
    from lab.eval.runner import EvalOptions, evaluate  # heavy: numba
    from lab.eval.stores import eval_retriever  # heavy: numba

    dataset = load_dataset(suite.dataset, opts.datasets, observations=suite.observations, project=opts.project)
    retriever = eval_retriever(dataset, chosen.save, root=opts.root, embedder=opts.embedder, progress=opts.progress,
                               embeddings=opts.embeddings, query_model=chosen.query_model)
    from lab.eval.abstention import AbstentionOptions  # heavy: numba

    measured = (AbstentionOptions(max_cost=suite.abstention.get("max_cost", AbstentionOptions.max_cost))
                if suite.abstention else None)
    result = evaluate(retriever, dataset, chosen.search, EvalOptions(abstention=measured), root=opts.root)
    record_models(result, retriever)  # the suite's metrics.json names the models it was judged with
    write_run(result, dataset.qrels, folder / suite.name)
    compared = champion is not None and champion.search is not None and bool(suite.non_regression)
    drift = data_drift(champion, suite.name, dataset) if compared else None
    if drift and not opts.rebaseline:
        raise ConflictError(f"suite {suite.name}: {drift}; a delta against the champion would compare over "
                            "different data: re-judge with `lab gate --rebaseline` (the champion re-evaluated on "
                            "the new data as the baseline) or restore the data it was judged on")
    champion_result = None
    if compared:
        # the champion on its own index-time settings and query model (the same retriever when they
        # are the same)
        same = ((champion.save or SaveConfig()) == (chosen.save or SaveConfig())
                and champion.query_model == chosen.query_model)
        champ_retriever = retriever if same else eval_retriever(dataset, champion.save, root=opts.root,
                                                                embedder=opts.embedder, progress=opts.progress,
                                                                embeddings=opts.embeddings,
                                                                query_model=champion.query_model)
        champion_result = _PerQuery(evaluate(champ_retriever, dataset, champion.search, EvalOptions(),
                                             root=opts.root).per_query)
    checks = suite_checks(suite, result, dataset, champion_result, gate.alpha, gate.seed, gate.correction)
    if drift:
        checks = [replace(c, note=(c.note + "; " if c.note else "") + f"rebaselined: {drift}")
                  if c.name.startswith("non-regression") else c for c in checks]
    m, ci = result.metrics["metrics"], result.metrics["ci95"]
    return SuiteResult(dataset.name, dataset.fingerprint(), dataset.gold_fingerprint(), result.metrics["questions"],
                       str(retriever.store.root), str(retriever.version), {k: m[k] for k in HEADLINE if k in m},
                       _first_question(dataset), {k: ci[k] for k in ("recall@10", "ndcg@10") if k in ci},
                       tuple(result.metrics.get("warnings") or ())), checks


def data_drift(champ: Champion | None, suite: str, dataset: Any) -> str | None:
    """What changed in a suite's data since the champion was judged on it (None: nothing, or the
    champion recorded no fingerprints)."""
    judged = ((champ.data if champ else None) or {}).get(suite)
    if not judged:
        return None
    now = {"corpus": dataset.fingerprint(), "gold": dataset.gold_fingerprint()}
    changed = [f"{what} {judged.get(what)} -> {now[what]}" for what in ("gold", "corpus")
               if judged.get(what) and judged[what] != now[what]]
    if not changed:
        return None
    return (f"the champion (version {champ.version}) was judged on {judged.get('dataset')} data that has changed "
            f"since ({', '.join(changed)}; gold is the questions and their labels, corpus the memories and edges)")


def sweep_selection(candidate: str | None) -> dict[str, Any] | None:
    """selection.json beside a candidate file (a sweep's best.yaml), when there is one."""
    if not candidate or not Path(candidate).is_file():
        return None
    path = Path(candidate).with_name("selection.json")
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _first_question(dataset: Any) -> dict[str, str] | None:
    """The suite's first question as model input (the exported model's input example)."""
    if not dataset.questions.height:
        return None
    row = dataset.questions.sort("qid").row(0, named=True)
    return {"query": row["question"], "namespace": row["namespace"]}
