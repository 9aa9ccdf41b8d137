"""`TuneSession`: one dataset and one preset held in memory, re-scored at slider speed.

The notebooks are views over this object. Opening a session builds (or reads from the cache) the
evaluation store and the candidate table, once. After that every change of a query-time knob
(RRF k, a signal's weight, the fusion method, zone ratios, token budget) re-fuses the cached
candidates once and reads everything off that one fused run: retrieval metrics with bootstrap CIs,
the recall@k curve, per-category figures and context metrics, through `BatchScorer`'s counting and
`ContextPool`'s vectorised assembler. Nothing is re-embedded or re-searched. On LoCoMo dev (997
questions) that is tens of milliseconds (``benchmarks/notebook.py``).

The numbers equal `lab eval`'s on the same configuration: the same fused run, the same metric
definitions (held by tests). `log` runs the real `lab eval` path and records it in MLflow.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import polars as pl

from lab.assemble import assemble
from lab.config import DEFAULT_KS, AssembleConfig, Candidate, SaveConfig, SearchConfig
from lab.errors import ValidationError
from lab.eval.candidate_cache import candidate_table
from lab.eval.candidate_cache import prepared_for
from lab.eval.context import context_items, context_reference
from lab.eval.dataset import EvalDataset
from lab.eval.goldens import load_dataset
from lab.eval.metrics import bootstrap_cis, resample_counts
from lab.eval.report import candidate_from
from lab.eval.runner import EvalOptions
from lab.eval.runs import evaluate_to_folder
from lab.eval.stores import eval_retriever
from lab.search.fusion import FUSERS, fuse_arrays
from lab.track import log_eval
from lab.tune.assembly import ContextPool, PooledAssembler
from lab.tune.batch import BatchScorer
from lab.tune.params import assemble_config, search_config
from lab.workspace import Workspace
from lab.eval.metrics import compare_runs

if TYPE_CHECKING:
    from lab.track.connect import Where

TUNED = Path(".lab/tune/current.yaml")  # the tune notebook's current knobs, for the errors notebook
CURVE_KS: tuple[int, ...] = (1, 2, 3, 5, 10, 15, 20, 30, 50, 100)
DEPTH = max(DEFAULT_KS)  # the run `lab eval` scores and assembles: the top 100
# the metrics table of the tune notebook, in this order; context metrics at the session's budget
HEADLINE: tuple[str, ...] = ("recall@5", "recall@10", "ndcg@10", "mrr", "context_recall", "context_tokens")
# query-time knobs a notebook exposes, as sweep-space names (``fusion.weights.<signal>`` too)
KNOBS: tuple[str, ...] = ("fusion.method", "fusion.k", "fusion.neighbour_boost", "assemble.critical_ratio",
                          "assemble.recency_ratio", "assemble.budget")


@dataclass
class TuneNumbers:
    """Everything one configuration scores, per question and in summary."""
    search: SearchConfig
    assemble: AssembleConfig
    qids: list[str]
    categories: np.ndarray  # per question
    per_query: dict[str, np.ndarray]  # metric -> per-question values (qids order)
    means: dict[str, float]
    ci95: dict[str, tuple[float, float]]
    seconds: float  # from the change to these numbers
    fused: tuple[np.ndarray, np.ndarray, np.ndarray] = field(repr=False, default=None)  # (pairs, ranks, scores)

    def table(self, baseline: "TuneNumbers | None" = None) -> pl.DataFrame:
        """metric, value, 95% CI, and the baseline's value and the difference when one is given."""
        rows = []
        for m in HEADLINE:
            lo, hi = self.ci95[m]
            row: dict[str, Any] = {"metric": m, "value": self.means[m], "ci95_low": lo, "ci95_high": hi}
            if baseline is not None:
                row["baseline"] = baseline.means[m]
                row["delta"] = self.means[m] - baseline.means[m]
            rows.append(row)
        return pl.DataFrame(rows)

    def curve(self) -> pl.DataFrame:
        """recall@k at every cutoff of `CURVE_KS`."""
        return pl.DataFrame({"k": list(CURVE_KS), "recall": [self.means[f"recall@{k}"] for k in CURVE_KS]})

    def by_category(self, metrics: Sequence[str] = ("recall@10", "ndcg@10", "context_recall")) -> pl.DataFrame:
        """Per category: question count and the mean of each metric (long form: category, metric, value, n)."""
        rows = []
        for cat in sorted(set(self.categories.tolist())):
            mask = self.categories == cat
            for m in metrics:
                rows.append({"category": cat, "metric": m, "value": float(self.per_query[m][mask].mean()),
                             "n": int(mask.sum())})
        return pl.DataFrame(rows, schema={"category": pl.String, "metric": pl.String, "value": pl.Float64, "n": pl.Int64})


class TuneSession:
    """A dataset, a starting preset (or candidate file) and everything needed to re-score it fast."""
    def __init__(self, dataset: EvalDataset, candidate: Candidate, retriever, cands: pl.DataFrame,
                 *, budget: int | None = None, seed: int = 0, resamples: int = 1000, root: Path | None = None) -> None:

        self.root = root  # the evaluation root its store and candidate tables are under (None: the built-in one)
        self.dataset = dataset
        self.candidate = candidate
        self.retriever = retriever
        self.cands = cands
        self.prepared = prepared_for(cands)
        self.seed, self.resamples = seed, resamples
        self._counts = resample_counts(dataset.questions.height, resamples, seed)  # drawn once, reused per change
        questions = dataset.questions
        self.qids: list[str] = questions["qid"].to_list()
        self.categories = np.asarray(questions["category"].to_list(), dtype=object)
        self.scorer = BatchScorer(self.prepared, dataset.qrels, self.qids, ks=CURVE_KS)
        order = {q: i for i, q in enumerate(self.scorer.questions)}  # the scorer keeps qids sorted
        self._to_session = np.asarray([order[q] for q in self.qids], dtype=np.int64)
        self.pool = ContextPool(retriever, dataset, self.prepared, candidate.search, self.qids)
        base_asm = candidate.assemble or AssembleConfig()
        self.base_assemble = replace(base_asm, budget=budget) if budget is not None else base_asm
        self._fused_key: Any = None
        self._assembler: PooledAssembler | None = None
        self.baseline = self.numbers(candidate.search, self.base_assemble)

    @classmethod
    def open(cls, dataset: str = "demo", preset: str = "lab", *, config_file: str | Path | None = None,
             datasets: str | Path | None = None, observations: bool = False, budget: int | None = None,
             root: Path | None = None, embedder=None, progress: bool = False,
             workspace: Workspace | None = None) -> "TuneSession":
        """Load ``dataset`` (demo, locomo, scifact, a golden .yaml or BEIR folder) and the store and
        candidate table of ``preset`` (or of a candidate file such as a sweep's best.yaml); the
        datasets root, evaluation root and embedding cache are ``workspace``'s unless given (None:
        the built-in one: a notebook hands the workspace it installed)."""
        ws = workspace or Workspace()
        root = root or ws.eval_root
        data = load_dataset(dataset, datasets or ws.datasets_root, observations=observations, project=ws.project)
        candidate = candidate_from(None if config_file else preset, config_file)
        retriever = eval_retriever(data, candidate.save or SaveConfig(), root=root, embedder=embedder, progress=progress,
                                   embeddings=ws.embed_cache)
        cands, _ = candidate_table(retriever, data, candidate.search, depth=DEPTH, root=root)
        return cls(data, candidate, retriever, cands, budget=budget, root=root)

    @classmethod
    def from_args(cls, args: Any, workspace: Workspace | None = None) -> "TuneSession":
        """A session from a notebook's command-line arguments (``mo.cli_args()``): ``--dataset``
        (default demo), ``--preset`` (default lab) or ``--config FILE`` (a candidate file)."""
        return cls.open(str(args.get("dataset") or "demo"), str(args.get("preset") or "lab"),
                        config_file=args.get("config"), workspace=workspace)

    # ------------------------------------------------------------------ knobs
    @property
    def signals(self) -> list[str]:
        """The signals whose lists the candidate table holds (each has a weight knob)."""
        return list(self.prepared.signals)

    @staticmethod
    def methods() -> list[str]:
        return sorted(FUSERS)

    def knobs(self) -> dict[str, Any]:
        """The preset's own knob values, by sweep-space name (the notebook's starting position)."""
        f, a = self.candidate.search.fusion, self.base_assemble
        out: dict[str, Any] = {"fusion.method": f.method, "fusion.k": f.k, "fusion.neighbour_boost": f.neighbour_boost}
        out.update({f"fusion.weights.{s}": float(f.weights.get(s, 1.0)) for s in self.signals})
        out.update({"assemble.critical_ratio": a.critical_ratio, "assemble.recency_ratio": a.recency_ratio,
                    "assemble.budget": a.budget})
        return out

    def configure(self, knobs: dict[str, Any]) -> tuple[SearchConfig, AssembleConfig]:
        """The preset with ``knobs`` applied (sweep-space names; the middle zone takes what the
        critical and recency ratios leave). A bad value raises `ValidationError` naming it."""
        unknown = sorted(k for k in knobs if k not in KNOBS and not k.startswith("fusion.weights."))
        if unknown:
            raise ValidationError(f"unknown knob(s) {unknown}; known: {list(KNOBS)} and fusion.weights.<signal>")
        if "assemble.budget" in knobs:
            knobs = {**knobs, "assemble.budget": int(knobs["assemble.budget"])}
        if float(knobs.get("assemble.critical_ratio", 0)) + float(knobs.get("assemble.recency_ratio", 0)) > 1 + 1e-9:
            raise ValidationError(f"assemble.critical_ratio + assemble.recency_ratio must be at most 1, got "
                                  f"{knobs.get('assemble.critical_ratio')} + {knobs.get('assemble.recency_ratio')}")
        search = search_config(self.candidate.search, knobs)
        search = replace(search, name=f"{self.candidate.search.name}-tuned")
        return search, assemble_config(self.base_assemble, knobs)

    # ------------------------------------------------------------------ scoring
    def numbers(self, search: SearchConfig | None = None, assemble: AssembleConfig | None = None) -> TuneNumbers:
        """Every metric of one configuration, from one fusion of the cached candidates."""
        started = time.perf_counter()
        search = search or self.candidate.search
        assemble = assemble or self.base_assemble
        fusion = replace(search.fusion, top_k=DEPTH)
        key = repr(fusion)
        if key != self._fused_key:
            idx, rank, score, _ = fuse_arrays(self.prepared, fusion, DEPTH)
            self._fused = (idx, rank, score)
            self._retrieval = self._retrieval_metrics(idx, rank)
            self._assembler = self.pool.assembler(idx, score)
            self._fused_key = key
        per_query = dict(self._retrieval)
        ctx = self._assembler.evaluate([assemble])
        per_query["context_recall"] = ctx["context_recall"][0]
        per_query["context_tokens"] = ctx["context_tokens"][0].astype(np.float64)
        means = {m: float(v.mean()) for m, v in per_query.items()}
        # intervals for the headline metrics only: the bootstrap is most of the cost of a change
        cis = bootstrap_cis(np.column_stack([per_query[m] for m in HEADLINE]), self.resamples, seed=self.seed,
                            counts=self._counts)
        ci95 = {m: (c[1], c[2]) for m, c in zip(HEADLINE, cis)}
        return TuneNumbers(search, assemble, self.qids, self.categories, per_query, means, ci95,
                           time.perf_counter() - started, self._fused)

    def _retrieval_metrics(self, idx: np.ndarray, rank: np.ndarray) -> dict[str, np.ndarray]:
        """Per-question retrieval metrics (session order) from the gold pairs' ranks in a fused run."""
        got = self.scorer.score_fused(idx, rank)
        out = {m: v[self._to_session] for m, v in got.items()}
        out["mrr"] = out.pop(f"mrr@{max(CURVE_KS)}")
        return out

    # ------------------------------------------------------------------ outputs
    def run_frame(self, numbers: TuneNumbers) -> pl.DataFrame:
        """The fused run as `lab eval` writes it: qid, memory_id, rank, score."""
        idx, rank, score = numbers.fused
        prep = self.prepared
        return pl.DataFrame({"qid": prep.qids.gather(prep.pair_q[idx]), "memory_id": prep.memory_ids.gather(prep.pair_m[idx]),
                             "rank": rank.astype(np.int32), "score": score})

    def as_candidate(self, search: SearchConfig, assemble: AssembleConfig) -> Candidate:
        return Candidate(search, self.candidate.save, assemble)

    def write_candidate(self, search: SearchConfig, assemble: AssembleConfig, path: str | Path) -> Path:
        """The configuration as a candidate file (what `lab gate --candidate` and `lab eval --config` read)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        head = f"# tuned interactively from {self.candidate.search.name} on {self.dataset.name}\n"
        path.write_text(self.as_candidate(search, assemble).to_yaml(head), encoding="utf-8")
        return path

    def log(self, search: SearchConfig, assemble: AssembleConfig, *, out: str | Path = "runs",
            uri: Where = None) -> tuple[str, Path]:
        """Evaluate the configuration through `lab eval`'s own path (run folder and all) and log it
        to MLflow; returns (MLflow run id, run folder)."""
        options = EvalOptions(budget=assemble.budget or None, assemble=assemble)
        result, folder = evaluate_to_folder(self.retriever, self.dataset, search, options, out, root=self.root)
        run_id = log_eval(result, folder, dataset=self.dataset, store_version=str(self.retriever.version), uri=uri,
                          extra_tags={"source": "notebook"})
        return run_id, folder

    # ------------------------------------------------------------------ what a change did
    def paired(self, numbers: TuneNumbers, baseline: TuneNumbers | None = None,
               metrics: Sequence[str] = ("recall@10", "ndcg@10", "mrr", "context_recall")) -> pl.DataFrame:
        """The change against the baseline as `lab compare` reports it: per metric the paired
        delta, its bootstrap 95% CI and the randomization test's p-value."""
        base = baseline or self.baseline
        frame = lambda n: pl.DataFrame({"qid": self.qids, **{m: n.per_query[m] for m in metrics}})  # noqa: E731
        return compare_runs(frame(base), frame(numbers), list(metrics), n_resamples=2000, seed=self.seed)

    def changes(self, numbers: TuneNumbers, baseline: TuneNumbers | None = None,
                metric: str = "recall@10") -> pl.DataFrame:
        """The questions whose ``metric`` the change moved, worst-hit first among the broken:
        ``fixed`` (it went up) or ``broken`` (down), with both values."""
        base = baseline or self.baseline
        before, after = base.per_query[metric], numbers.per_query[metric]
        frame = self.dataset.questions.select("qid", "category", "question").with_columns(
            pl.Series("before", before), pl.Series("after", after))
        return (frame.with_columns((pl.col("after") - pl.col("before")).alias("delta"))
                .filter(pl.col("delta").abs() > 1e-12)
                .with_columns(pl.when(pl.col("delta") > 0).then(pl.lit("fixed")).otherwise(pl.lit("broken"))
                              .alias("change"))
                .sort(["change", "delta", "qid"], descending=[False, False, False])
                .select("change", "qid", "category", "question", "before", "after", "delta"))

    def ranked(self, qid: str, numbers: TuneNumbers, k: int = 10) -> pl.DataFrame:
        """One question's top ``k`` under ``numbers``' configuration, each memory with whether it is
        gold, its text and the rank every signal's own list gave it (null: not returned)."""
        if qid not in set(self.qids):
            raise ValidationError(f"unknown question {qid!r} in dataset {self.dataset.name!r}")
        top = self.run_frame(numbers).filter((pl.col("qid") == qid) & (pl.col("rank") <= k)).drop("qid")
        lists = (self.cands.filter((pl.col("qid") == qid) & ~pl.col("signal").str.starts_with("_"))
                 .join(top.select("memory_id"), on="memory_id", how="semi")
                 .pivot(on="signal", index="memory_id", values="rank", aggregate_function="min"))
        gold = self.gold_of(qid)
        out = (top.join(lists, on="memory_id", how="left")
               .join(self.memory_texts(top["memory_id"].to_list()), on="memory_id", how="left")
               .with_columns(pl.col("memory_id").is_in(sorted(gold)).alias("gold")))
        signals = [c for c in self.signals if c in out.columns]
        return out.select("rank", "memory_id", "gold", "score", *signals, "text").sort("rank")

    def budget_curve(self, numbers: TuneNumbers, budgets: Sequence[int] = (250, 500, 1000, 1500, 2000, 3000, 4000)
                     ) -> pl.DataFrame:
        """Context recall against the tokens spent, at each budget, for ``numbers``' fusion and
        assembly settings (budget, context_recall, context_tokens)."""
        configs = [replace(numbers.assemble, budget=int(b)) for b in budgets]
        idx, _, score = numbers.fused
        got = self.pool.assembler(idx, score).evaluate(configs)
        return pl.DataFrame({"budget": [int(b) for b in budgets],
                             "context_recall": [float(v.mean()) for v in got["context_recall"]],
                             "context_tokens": [float(v.mean()) for v in got["context_tokens"]]})

    def live_search(self, text: str, namespace: str, search: SearchConfig, k: int = 10) -> pl.DataFrame:
        """A free-text query against the evaluation store with the tuned configuration: rank,
        memory, score, each signal's rank, text."""
        if not text.strip():
            return pl.DataFrame(schema={"rank": pl.Int64, "memory_id": pl.String, "score": pl.Float64, "text": pl.String})
        hits = self.retriever.search(text, namespace, k=k, config=search, explain=True)
        rows = [{"rank": h.rank, "memory_id": h.memory_id, "score": float(h.score),
                 **{s: (h.signals[s].rank if s in h.signals else None) for s in self.signals},
                 "text": f"{h.title}: {h.content}"[:300] if h.title else h.content[:300]} for h in hits]
        return pl.DataFrame(rows, infer_schema_length=None)

    # ------------------------------------------------------------------ error analysis
    def gold_ranks(self, numbers: TuneNumbers) -> pl.DataFrame:
        """Per (question, gold memory): its fused rank (null past the top 100) and the rank each
        signal's own list gave it (null where the signal did not return it)."""
        q = self.dataset.questions.select("qid", "namespace", "question", "category")
        gold = self.dataset.qrels.filter(pl.col("relevance") >= 1).select("qid", "memory_id")
        fused = self.run_frame(numbers).select("qid", "memory_id", pl.col("rank").alias("fused_rank"))
        lists = (self.cands.filter(~pl.col("signal").str.starts_with("_"))
                 .join(gold, on=["qid", "memory_id"], how="semi")
                 .pivot(on="signal", index=["qid", "memory_id"], values="rank", aggregate_function="min"))
        out = q.join(gold, on="qid").join(fused, on=["qid", "memory_id"], how="left").join(
            lists, on=["qid", "memory_id"], how="left")
        for s in self.signals:  # a signal that found no gold at all still gets its column
            if s not in out.columns:
                out = out.with_columns(pl.lit(None, dtype=pl.Int64).alias(s))
        return out.sort("qid", "memory_id")

    def misses(self, numbers: TuneNumbers, k: int = 10, category: str | None = None) -> pl.DataFrame:
        """Gold memories outside the fused top ``k``, each with every signal's rank for it, its text,
        and the memory that took rank 1 instead."""
        ranks = self.gold_ranks(numbers).filter(pl.col("fused_rank").is_null() | (pl.col("fused_rank") > k))
        if category:
            ranks = ranks.filter(pl.col("category") == category)
        top = self.run_frame(numbers).filter(pl.col("rank") <= 3)
        texts = self.memory_texts(ranks["memory_id"].to_list() + top["memory_id"].to_list())
        instead = (top.join(texts, on="memory_id", how="left").sort("qid", "rank").group_by("qid", maintain_order=True)
                   .agg(pl.col("memory_id").alias("retrieved_ids"), pl.col("text").alias("retrieved_texts")))
        return (ranks.join(texts.rename({"text": "gold_text"}), on="memory_id", how="left")
                .join(instead, on="qid", how="left").sort("category", "qid", "memory_id"))

    def rescues(self, numbers: TuneNumbers, k: int = 10) -> pl.DataFrame:
        """Gold memories in the fused top ``k`` that only one of the vector and lexical lists
        returned at all: ``lexical`` rescues (BM25 found what the embedding missed) and ``semantic``."""
        if not {"vector", "lexical"} <= set(self.signals):
            return pl.DataFrame(schema={"qid": pl.String, "memory_id": pl.String, "rescue": pl.String})
        ranks = self.gold_ranks(numbers).filter(pl.col("fused_rank") <= k)
        out = ranks.with_columns(
            pl.when(pl.col("vector").is_null() & pl.col("lexical").is_not_null()).then(pl.lit("lexical"))
            .when(pl.col("lexical").is_null() & pl.col("vector").is_not_null()).then(pl.lit("semantic"))
            .otherwise(None).alias("rescue")).filter(pl.col("rescue").is_not_null())
        texts = self.memory_texts(out["memory_id"].to_list())
        return out.join(texts.rename({"text": "gold_text"}), on="memory_id", how="left").sort("rescue", "qid")

    def memory_texts(self, ids: Sequence[str]) -> pl.DataFrame:
        """memory_id -> text as assembly shows it (``title: content``)."""
        pool = self.pool
        want = set(ids)
        rows = {(mid, text) for mid, text, ok in zip(pool.slot_id, pool.slot_text, pool.slot_valid.tolist())
                if ok and mid in want}
        return pl.DataFrame(sorted(rows), schema={"memory_id": pl.String, "text": pl.String}, orient="row")

    def context(self, qid: str, numbers: TuneNumbers):
        """The assembled context of one question under ``numbers``' configuration (`lab.assemble.Context`)."""
        if qid not in set(self.qids):
            raise ValidationError(f"unknown question {qid!r} in dataset {self.dataset.name!r}")
        run = self.run_frame(numbers).filter(pl.col("qid") == qid)
        one = replace(self.dataset, questions=self.dataset.questions.filter(pl.col("qid") == qid))
        [(_, items, ref)] = list(context_items(self.retriever, one, run, numbers.search))
        return assemble(items, numbers.assemble, counter=self.retriever.counter(numbers.assemble.counter),
                        reference_time=context_reference(self.dataset, numbers.assemble, ref))

    @staticmethod
    def choice(flag: str, value: Any, allowed: Sequence[str]) -> str:
        """A notebook argument that must be one of ``allowed``; else one line naming both."""
        if str(value) not in allowed:
            raise ValidationError(f"{flag} {value!r} is not one of {list(allowed)}")
        return str(value)

    def question_id(self, qid: Any) -> str:
        """The question ``qid`` names (default: the first); an unknown one names a few that exist."""
        if qid is None or qid == "":
            return self.qids[0]
        if str(qid) not in set(self.qids):
            raise ValidationError(f"--question {qid!r} is not a question of {self.dataset.name}; its questions are "
                                  f"{', '.join(self.qids[:5])}, ... ({len(self.qids)} in all)")
        return str(qid)

    def gold_of(self, qid: str) -> set[str]:
        return self.pool.gold[self.qids.index(qid)]
