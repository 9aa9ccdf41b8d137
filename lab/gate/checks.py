"""The GO/NO-GO gate: per suite, minimum metrics on the CI lower bound, non-regression against the
champion (paired test), signal health, and the save-then-search cycle. Every check reports its value,
threshold and verdict; the candidate is GO only when every check passes.

``goldens/gate.yaml``::

    model: lab-memory            # registered model whose @champion the candidate is held against
    alpha: 0.05                  # significance of a drop against the champion
    correction: none             # over a suite's non_regression metrics: none, holm, bh or maxT
    suites:
      demo:
        dataset: demo
        min: {recall@10: 0.80}   # judged on the lower bound of the 95% CI
        non_regression: [recall@10, ndcg@10]
        signal_health: {vector: 0.95, lexical: 0.80}   # share of questions with candidates
        save_then_search: {recall@10: 0.5}             # questions whose memory was just saved
        abstention: {max_cost: 0.01, auroc: 0.9, precision: 0.9, cost: 0.02}   # held-out questions
    adapter_beats_base: [recall@10]  # a candidate's query adapter or fine-tuned model must have beaten its base on
                                     # the held-out folds `lab adapt` judged it on (95% CI low > 0)
"""
from __future__ import annotations

import json
import warnings

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from lab.config import Candidate
from lab.config import read_yaml
from lab.embed.adapter import is_adapter_model, read_adapter
from lab.embed.local import FINETUNE_META, local_model_folder, looks_local
from lab.errors import LabWarning, ValidationError
from lab.eval.comparison import compare_many
from lab.eval.multiple import check_correction
from lab.eval.paired import small_n

_SUITE_KEYS = {"dataset", "min", "non_regression", "signal_health", "save_then_search", "observations", "abstention"}
# abstention (lab.eval.abstention): the recall@10 the fitted threshold may cost on tune, minimums of
# its held-out precision, recall and AUROC, and the most recall@10 it may cost there
_ABSTENTION_KEYS = {"max_cost", "precision", "recall", "auroc", "cost"}
# what `lab adapt` judges an adapter on, over its held-out folds (lab.tune.adapt.cross_validate_adapter)
ADAPTER_METRICS = ("recall@10", "ndcg@10")
_GATE_KEYS = ("adapter_beats_base", "alpha", "correction", "model", "seed", "suites")
# a non-regression check left uncorrected refuses more candidates, not fewer: the cautious default
DEFAULT_CORRECTION = "none"


@dataclass(frozen=True)
class Suite:
    name: str
    dataset: str
    minimums: dict[str, float] = field(default_factory=dict)
    non_regression: tuple[str, ...] = ()
    signal_health: dict[str, float] = field(default_factory=dict)
    save_then_search: dict[str, float] = field(default_factory=dict)
    observations: bool = False
    abstention: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class GateConfig:
    model: str
    suites: tuple[Suite, ...]
    alpha: float = 0.05
    seed: int = 0
    path: str = ""
    adapter_beats_base: tuple[str, ...] = ()  # metrics a query adapter's held-out gain must be significant on
    correction: str = DEFAULT_CORRECTION  # over each suite's non_regression metrics (lab.eval.multiple)


@dataclass(frozen=True)
class Check:
    suite: str
    name: str
    value: float | None
    threshold: str
    passed: bool
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"suite": self.suite, "check": self.name, "value": self.value, "threshold": self.threshold,
                "verdict": "PASS" if self.passed else "FAIL", "note": self.note}


def _thresholds(raw: Any, where: str) -> dict[str, float]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValidationError(f"{where}: expected a mapping of name -> number, got {raw!r}")
    out = {}
    for k, v in raw.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
            raise ValidationError(f"{where}.{k}: expected a number, got {v!r}")
        out[str(k)] = float(v)
    return out


def load_gate(path: str | Path) -> GateConfig:
    p = Path(path)
    data = read_yaml(p, "gate config")
    if not isinstance(data, dict) or not isinstance(data.get("suites"), dict) or not data["suites"]:
        raise ValidationError(f"{p}: expected a mapping with a non-empty 'suites' mapping")
    unknown = sorted(set(data) - set(_GATE_KEYS))
    if unknown:
        raise ValidationError(f"{p}: unknown key(s) {unknown}; allowed: {', '.join(_GATE_KEYS)}")
    beats = data.get("adapter_beats_base") or []
    if not isinstance(beats, list) or any(m not in ADAPTER_METRICS for m in beats):
        raise ValidationError(f"{p}: adapter_beats_base: expected a list of {', '.join(ADAPTER_METRICS)} (what `lab "
                              f"adapt` judges an adapter on), got {beats!r}", field="adapter_beats_base")
    suites = []
    for name, raw in data["suites"].items():
        where = f"{p}: suites.{name}"
        if not isinstance(raw, dict) or "dataset" not in raw:
            raise ValidationError(f"{where}: expected a mapping with a 'dataset'")
        bad = sorted(set(raw) - _SUITE_KEYS)
        if bad:
            raise ValidationError(f"{where}: unknown key(s) {bad}; allowed: {sorted(_SUITE_KEYS)}")
        nr = raw.get("non_regression") or []
        if not isinstance(nr, list):
            raise ValidationError(f"{where}.non_regression: expected a list of metrics, got {nr!r}")
        abstention = _thresholds(raw.get("abstention"), f"{where}.abstention")
        bad = sorted(set(abstention) - _ABSTENTION_KEYS)
        if bad:
            raise ValidationError(f"{where}.abstention: unknown key(s) {bad}; allowed: {sorted(_ABSTENTION_KEYS)}")
        suites.append(Suite(str(name), str(raw["dataset"]), _thresholds(raw.get("min"), f"{where}.min"),
                            tuple(str(m) for m in nr), _thresholds(raw.get("signal_health"), f"{where}.signal_health"),
                            _thresholds(raw.get("save_then_search"), f"{where}.save_then_search"),
                            bool(raw.get("observations", False)), abstention))
    alpha = float(data.get("alpha", 0.05))
    if not 0 < alpha < 1:
        raise ValidationError(f"{p}: alpha must be in (0, 1), got {alpha}")
    correction = check_correction(str(data.get("correction", DEFAULT_CORRECTION)), f"{p}: correction")
    return GateConfig(str(data.get("model", "lab-memory")), tuple(suites), alpha, int(data.get("seed", 0)), str(p),
                      tuple(beats), correction)


def suite_checks(suite: Suite, result: Any, dataset: Any, champion: Any | None, alpha: float, seed: int,
                 correction: str = DEFAULT_CORRECTION) -> list[Check]:
    """The checks of one suite, from the candidate's evaluation (and the champion's, when there is
    one); the non-regression p-values corrected by ``correction`` over the suite's metrics."""
    checks: list[Check] = []
    metrics, ci = result.metrics["metrics"], result.metrics["ci95"]
    for name, minimum in sorted(suite.minimums.items()):
        if name not in ci:
            raise ValidationError(f"gate suite {suite.name}: unknown metric {name!r}; known: {sorted(ci)}")
        low = float(ci[name][0])
        loose = small_n({name: (low, float(ci[name][1]))}, result.metrics["questions"])
        if loose:  # judged all the same: the gate's file chose the suite and its minimum
            warnings.warn(LabWarning(f"gate suite {suite.name}: {loose}"), stacklevel=2)
        checks.append(Check(suite.name, f"min {name} (95% CI low)", low, f">= {minimum:g}", low >= minimum,
                            f"mean {metrics[name]:.4f}" + (f"; {loose}" if loose else "")))
    if suite.non_regression:
        if champion is None:
            checks.append(Check(suite.name, "non-regression vs champion", None, f"no significant drop (p < {alpha:g})",
                                True, "no champion registered yet: nothing to regress against"))
        else:
            checks += _non_regression(suite, result, champion, alpha, seed, correction)
    health = result.metrics.get("signal_health", {}).get("signals", {})
    enabled = set(result.config.signals)
    for signal, share in sorted(suite.signal_health.items()):
        if signal not in enabled:
            continue  # the candidate does not use it: nothing to be healthy
        got = float(health.get(signal, {}).get("returned_any", 0.0))
        checks.append(Check(suite.name, f"signal {signal} returns candidates", got, f">= {share:g} of questions",
                            got >= share))
    if suite.save_then_search:
        saved = sorted(dataset.saves)
        if not saved:
            raise ValidationError(f"gate suite {suite.name}: save_then_search needs a dataset with saves "
                                  f"(goldens with 'save'), {dataset.name} has none")
        pq = result.per_query.filter(pl.col("qid").is_in(saved))
        for name, minimum in sorted(suite.save_then_search.items()):
            if name not in pq.columns:
                raise ValidationError(f"gate suite {suite.name}: unknown metric {name!r} for save_then_search")
            got = float(pq[name].mean())
            checks.append(Check(suite.name, f"save-then-search {name}", got, f">= {minimum:g}", got >= minimum,
                                f"{pq.height} questions asked right after their memory was saved"))
    return checks + abstention_checks(suite, result.metrics.get("abstention"))


def _non_regression(suite: Suite, result: Any, champion: Any, alpha: float, seed: int, correction: str) -> list[Check]:
    """One check per non-regression metric: the candidate's paired change against the champion,
    failed by a drop whose p-value, corrected over the suite's metrics, is below ``alpha``."""
    family = list(suite.non_regression)
    paired = compare_many({"champion": champion.per_query, "candidate": result.per_query}, family, "champion",
                          correction=correction, seed=seed)
    out = []
    for metric in family:
        ch, p = paired.changes["candidate"][metric], paired.changes["candidate"][metric]["p_corrected"]
        before, after = paired.means["champion"][metric][0], paired.means["candidate"][metric][0]
        said = f"p {ch['p']:.4f} ({ch['test']})" + ("" if correction == "none" else
                                                    f", corrected ({correction}, {len(family)} metrics) {p:.4f}")
        out.append(Check(suite.name, f"non-regression {metric}", round(ch["delta"], 6),
                         f"no significant drop (p < {alpha:g})", not (ch["delta"] < 0 and p < alpha),
                         f"champion {before:.4f} -> candidate {after:.4f}, {said}"))
    return out


def abstention_checks(suite: Suite, measured: dict[str, Any] | None) -> list[Check]:
    """The suite's abstention minimums (and the most recall it may cost), on held-out questions."""
    wanted = {k: v for k, v in suite.abstention.items() if k != "max_cost"}
    if not wanted:
        return []
    part = measured["validation"] if measured and measured["validation"]["answerable"] else None
    note = "" if part is None else (f"threshold {measured['threshold']:.4f} fitted on tune; {part['answerable']} answerable "
                                    f"and {part['unanswerable']} unanswerable held-out questions")
    if part is not None and part.get("small_n"):  # judged all the same: the gate's file chose the suite
        note += f"; too few to hold: {part['small_n']}"
        warnings.warn(LabWarning(f"gate suite {suite.name}: abstention figures on {part['small_n']}"), stacklevel=2)
    out = []
    for name, bound in sorted(wanted.items()):
        got = None if part is None else part[name]
        if name == "cost":
            out.append(Check(suite.name, f"abstention {measured['metric'] if measured else 'recall'} cost", got,
                             f"<= {bound:g}", got is not None and got <= bound, note or "no held-out questions"))
        else:
            out.append(Check(suite.name, f"abstention {name}", got, f">= {bound:g}", got is not None and got >= bound,
                             note or "no held-out questions"))
    return out


def finetune_record(model: str | None) -> dict[str, Any] | None:
    """The ``lab-finetune.json`` of a model `lab adapt --kind finetune` wrote (an ``st:`` folder),
    or None for any other model."""
    if not model or not model.startswith("st:") or not looks_local(model):
        return None
    meta = local_model_folder(model) / FINETUNE_META
    if not meta.is_file():
        return None
    try:
        return json.loads(meta.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ValidationError(f"{meta}: the fine-tuned model's record is not JSON: train it again") from None


def adapter_checks(gate: GateConfig, query_model: str | None, store_model: str | None = None) -> list[Check]:
    """The gate's ``adapter_beats_base``: a candidate whose queries a query adapter encodes, or whose
    store a fine-tuned model embeds, must show, on the held-out folds `lab adapt` judged it on (its
    adapter.json or lab-finetune.json records them), a gain over its base model whose 95% CI lies
    above zero on each listed metric. The suites cannot judge this: a model trained on a suite's own
    gold would be scored on what it learnt."""
    if not gate.adapter_beats_base:
        return []
    adapted = []
    if query_model is not None and is_adapter_model(query_model):
        adapted.append(("adapter", read_adapter(query_model).trained))
    record = finetune_record(store_model)
    if record is not None:
        adapted.append(("fine-tune", record.get("trained") or {}))
    if not adapted:
        return [Check("adapter", "adapter beats its base (held out)", None, "95% CI low of the gain > 0", True,
                      "no query adapter and no fine-tuned model: the base model encodes the candidate")]
    return [check for kind, trained in adapted for check in _beats_base(gate, kind, trained)]


def _beats_base(gate: GateConfig, kind: str, trained: dict[str, Any]) -> list[Check]:
    pooled = {row["metric"]: row for row in (trained.get("held_out") or [])}
    checks = []
    for metric in gate.adapter_beats_base:
        row = pooled.get(metric)
        name = f"{kind} beats base {metric} (held out)"
        if row is None:
            why = ("it was trained with --no-cv, so no held-out judgement is recorded: train it again without "
                   "--no-cv" if not pooled else f"its held-out judgement has no {metric} (it has {sorted(pooled)})")
            checks.append(Check(kind, name, None, "95% CI low of the gain > 0", False, why))
            continue
        low = float(row["delta_low"])
        checks.append(Check(kind, name, low, "95% CI low of the gain > 0", low > 0,
                            f"base {row['mean_a']:.4f} -> adapted {row['mean_b']:.4f}, vector-only, on {row['n']} "
                            f"held-out questions of {trained.get('dataset')}"))
    return checks


def verdict(checks: list[Check]) -> str:
    return "GO" if checks and all(c.passed for c in checks) else "NO-GO"


def candidate_config(candidate: str | None) -> Candidate:
    """A preset name, or a candidate file (e.g. a sweep's best.yaml, with its save and assemble settings)."""
    from lab.eval.report import candidate_from  # heavy: numba

    if candidate and Path(candidate).suffix in (".yaml", ".yml", ".json"):
        return candidate_from(None, candidate)
    return candidate_from(candidate or "lab", None)
