"""Many zone/budget configurations per compiled pass over one fused run: the context metrics of
`lab.eval.context.context_metrics`, without building a context per (configuration, question).

Everything that does not depend on the assembly configuration is computed once per run: the items
of each question in greedy order (score descending, then memory id), their token costs per counter,
normalised scores, reading-order ranks, ages against each reference time, and which items are
near-duplicates of which at each threshold. The compiled kernel then replays `assemble`'s routing
and greedy fill (critical, middle with critical's overflow, recency; unused space carried on; an
item that does not fit is skipped and smaller ones still tried; an item that near-duplicates one
already placed is dropped) and reads the metrics off the placement.

Exactness. Filling with near-duplicates checked as items are placed is `assemble`'s own reference
(its batch check only short-cuts it when nothing placed is a duplicate), so the kernel gives the
same placement. One case is not replayed: truncation of an item longer than the whole budget
(``oversize: truncate``); those (configuration, question) pairs go through `assemble` itself.
Neighbour expansion is not used by context metrics. A hypothesis test holds this equal to
`context_metrics`.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Callable, Sequence

import numpy as np
import polars as pl

from lab.assemble import AssembleConfig, Item, TokenCounter, assemble, line, make_counter
from lab.assemble.dedupe import Deduper, signatures
from lab.assemble.routing import capacities
from lab.config import SearchConfig
from lab.errors import ValidationError
from lab.eval.context import CONTEXT_COLUMNS, context_items, context_metrics, context_row, gold_sets
from lab.eval.dataset import EvalDataset
from lab.retriever import Retriever
from lab.store.records import parse_time
from lab.tune.kernels import NEVER_RECENT, fill_zones

_MICROSECOND = timedelta(microseconds=1)


class BatchAssembler:
    """Context metrics of one fused ``run`` under many `AssembleConfig`\\ s.

    ``evaluate(configs)`` returns ``{metric: (len(configs), len(qids)) array}`` for the metrics of
    `CONTEXT_COLUMNS`; ``context_first_gold`` is NaN where no gold item was placed (as the null of
    `context_metrics`)."""

    def __init__(self, questions: Sequence[tuple[str, list[Item], datetime | str | None]], gold: dict[str, set[str]],
                 counter: Callable[[str], TokenCounter] = make_counter, fixed_reference: str | None = None) -> None:
        """``questions``: per question its id, its items (any order) and its default reference time;
        ``gold``: the gold memory ids per question; ``counter``: a token counter by name;
        ``fixed_reference``: a reference time that overrides every other (a dataset's own)."""
        self._counter = counter
        self.fixed_reference = fixed_reference
        self.qids = [qid for qid, _, _ in questions]
        self.raw_items = [items for _, items, _ in questions]
        self.retriever = self.dataset = self.run = self.config = None
        self.items: list[list[Item]] = []
        self.ns_refs: list[datetime | str | None] = []
        self.gold = [gold.get(q, set()) for q in self.qids]
        starts = [0]
        norm, score_key, time_key = [], [], []
        self.always_direct = np.zeros(len(self.qids), dtype=bool)  # chunks of one memory: merged by assemble
        for q, (qid, items, ref) in enumerate(questions):
            order = sorted(range(len(items)), key=lambda k: (-items[k].score, items[k].memory_id, k))
            items = [items[k] for k in order]
            self.items.append(items)
            self.ns_refs.append(ref)
            starts.append(starts[-1] + len(items))
            scores = np.asarray([it.score for it in items], dtype=np.float64)
            if len({it.memory_id for it in items}) != len(items) or np.isnan(scores).any():
                self.always_direct[q] = True
            best = float(scores[0]) if len(items) else 0.0
            norm.append(scores / best if best > 0 else np.zeros(len(items)))
            # reading order inside critical and middle, and inside recency (`lab.assemble.fill`)
            by_score = sorted(range(len(items)), key=lambda k: (
                -items[k].score, items[k].created_at.timestamp() if items[k].created_at else 0.0, items[k].memory_id))
            by_time = sorted(range(len(items)), key=lambda k: (
                items[k].created_at.timestamp() if items[k].created_at else float("-inf"), items[k].memory_id))
            score_key.append(np.argsort(by_score))
            time_key.append(np.argsort(by_time))
        self.q_start = np.asarray(starts, dtype=np.int64)
        flat = [it for items in self.items for it in items]
        self.norm = np.concatenate(norm) if flat else np.zeros(0)
        self.srank = np.concatenate(score_key).astype(np.int64) if flat else np.zeros(0, dtype=np.int64)
        self.trank = np.concatenate(time_key).astype(np.int64) if flat else np.zeros(0, dtype=np.int64)
        self.working = np.asarray([it.type == "working" for it in flat], dtype=bool)
        self.pinned = np.asarray([bool(it.pinned) or it.type == "anchor" for it in flat], dtype=bool)
        self.is_gold = np.asarray([it.memory_id in self.gold[q] for q, items in enumerate(self.items) for it in items],
                                  dtype=bool)
        self.n_gold = np.asarray([len(g) for g in self.gold], dtype=np.int64)
        self._tokens: dict[str, np.ndarray] = {}
        self._widest: dict[str, np.ndarray] = {}
        self._ages: dict[str | None, np.ndarray] = {}
        self._dups: dict[float, tuple[np.ndarray, np.ndarray]] = {}

    @classmethod
    def for_run(cls, retriever: Retriever, dataset: EvalDataset, run: pl.DataFrame, config: SearchConfig,
                qids: Sequence[str] | None = None) -> "BatchAssembler":
        """The questions of ``dataset`` (in ``qids`` order, default the dataset's), with ``run``'s
        results as items, as `context_metrics` builds them."""
        by_qid = {qid: (items, ref) for qid, items, ref in context_items(retriever, dataset, run, config)}
        qids = list(qids) if qids is not None else dataset.questions["qid"].to_list()
        missing = [q for q in qids if q not in by_qid]
        if missing:
            raise ValidationError(f"{len(missing)} question ids are not in dataset {dataset.name!r}, e.g. {missing[0]!r}")
        out = cls([(q, *by_qid[q]) for q in qids], gold_sets(dataset), retriever.counter, dataset.reference_time)
        out.retriever, out.dataset, out.run, out.config = retriever, dataset, run, config
        return out

    # -- per-configuration inputs, each computed once per distinct value ---------------------------
    def tokens(self, counter: str) -> np.ndarray:
        if counter not in self._tokens:
            lines = [line(it.memory_id, it.text) for items in self.items for it in items]
            tok = np.asarray(self._counter(counter).count_many(lines), dtype=np.int64)
            self._tokens[counter] = tok
            self._widest[counter] = np.asarray(
                [tok[a:b].max() if b > a else 0 for a, b in zip(self.q_start[:-1], self.q_start[1:])], dtype=np.int64)
        return self._tokens[counter]

    def ages(self, fixed: str | None) -> np.ndarray:
        """Microseconds from each item's time to its question's reference time (``fixed`` when the
        dataset or the configuration sets one, else the namespace's, else the newest item's)."""
        if fixed not in self._ages:
            out = np.full(len(self.norm), NEVER_RECENT, dtype=np.int64)
            at = 0
            for items, ns_ref in zip(self.items, self.ns_refs):
                ref = fixed if fixed is not None else ns_ref
                if isinstance(ref, str):
                    ref = parse_time(ref, "reference_time")
                if ref is None:
                    times = [it.created_at for it in items if it.created_at is not None]
                    ref = max(times) if times else None
                if ref is not None:
                    for j, it in enumerate(items):
                        if it.created_at is not None:
                            out[at + j] = (ref - it.created_at) // _MICROSECOND
                at += len(items)
            self._ages[fixed] = out
        return self._ages[fixed]

    def duplicates(self, threshold: float) -> tuple[np.ndarray, np.ndarray]:
        """Per item, its near-duplicates in the same question (positions), as CSR offsets and values."""
        if threshold not in self._dups:
            partners: list[list[int]] = []
            for items in self.items:
                mine: list[list[int]] = [[] for _ in items]
                seen = Deduper(threshold)  # the very check `assemble` makes, against every earlier item
                for i, sig in enumerate(signatures([it.text for it in items], threshold)):
                    for j in seen.matches(sig):
                        mine[i].append(j)
                        mine[j].append(i)
                    seen.add(sig, i)
                partners.extend(mine)
            start = np.zeros(len(partners) + 1, dtype=np.int64)
            start[1:] = np.cumsum([len(p) for p in partners])
            values = np.asarray([j for p in partners for j in p], dtype=np.int64)
            self._dups[threshold] = (start, values)
        return self._dups[threshold]

    # -- evaluation --------------------------------------------------------------------------------
    def evaluate(self, configs: Sequence[AssembleConfig]) -> dict[str, np.ndarray]:
        n_conf, n_q = len(configs), len(self.qids)
        out = {"context_recall": np.zeros((n_conf, n_q)), "context_gold_critical": np.zeros((n_conf, n_q)),
               "context_first_gold": np.full((n_conf, n_q), np.nan), "context_tokens": np.zeros((n_conf, n_q), dtype=np.int64)}
        # one kernel call per (counter, dedupe threshold): the item-level inputs they select
        groups: dict[tuple[str, float], list[int]] = {}
        for c, cfg in enumerate(configs):
            if not isinstance(cfg, AssembleConfig):
                raise ValidationError(f"configuration {c}: expected an AssembleConfig, got {type(cfg).__name__}")
            groups.setdefault((cfg.counter, cfg.dedupe_threshold), []).append(c)
        for (counter, threshold), members in groups.items():
            tok = self.tokens(counter)
            dup_start, dup_local = self.duplicates(threshold)
            refs: dict[str | None, int] = {}
            for c in members:
                refs.setdefault(self.fixed_reference or configs[c].reference_time, len(refs))
            ages = np.stack([self.ages(r) for r in refs]) if len(self.norm) else np.zeros((len(refs), 0), dtype=np.int64)
            sub = [configs[c] for c in members]
            caps = np.asarray([[cap[z] for z in ("critical", "middle", "recency")] for cap in map(capacities, sub)],
                              dtype=np.int64)
            widest = self._widest[counter]  # each question's longest item
            # truncation of an item longer than the whole budget is left to `assemble` itself
            skip = np.asarray([(widest > cfg.budget) & (cfg.oversize == "truncate") | self.always_direct for cfg in sub],
                              dtype=bool).reshape(len(sub), n_q)
            recall, critical, first, used = fill_zones(
                self.q_start, tok, self.norm, ages,
                np.asarray([refs[self.fixed_reference or cfg.reference_time] for cfg in sub], dtype=np.int64),
                self.working, self.pinned, self.is_gold, self.srank, self.trank, dup_start, dup_local, self.n_gold,
                caps, np.asarray([cfg.critical_threshold for cfg in sub], dtype=np.float64),
                np.asarray([cfg.recency_threshold for cfg in sub], dtype=np.float64),
                np.asarray([timedelta(hours=cfg.recent_hours) // _MICROSECOND for cfg in sub], dtype=np.int64), skip)
            rows = np.asarray(members)
            out["context_recall"][rows] = recall
            out["context_gold_critical"][rows] = critical
            out["context_first_gold"][rows] = np.where(first > 0, first, np.nan)
            out["context_tokens"][rows] = used
            for i, q in zip(*np.nonzero(skip)):
                self._direct(out, int(rows[i]), int(q), sub[i])
        return out

    def _direct(self, out: dict[str, np.ndarray], c: int, q: int, config: AssembleConfig) -> None:
        """One (configuration, question) through `assemble` itself."""
        ref = self.fixed_reference or config.reference_time or self.ns_refs[q]
        ctx = assemble(self.raw_items[q], config, counter=self._counter(config.counter), reference_time=ref)
        _, rec, crit, first, used = context_row(self.qids[q], ctx, self.gold[q])
        out["context_recall"][c, q] = rec
        out["context_gold_critical"][c, q] = crit
        out["context_first_gold"][c, q] = np.nan if first is None else first
        out["context_tokens"][c, q] = used

    def reference(self, config: AssembleConfig) -> dict[str, np.ndarray]:
        """`context_metrics` itself for one configuration, in this object's question order (only on
        an assembler made by `for_run`)."""
        if self.retriever is None:
            raise ValidationError("reference() needs the retriever and run: make the assembler with BatchAssembler.for_run")
        frame = pl.DataFrame({"qid": self.qids}).join(
            context_metrics(self.retriever, self.dataset, self.run, self.config, config), on="qid", how="left")
        return {m: frame[m].cast(pl.Float64).fill_null(np.nan).to_numpy() for m in CONTEXT_COLUMNS}
