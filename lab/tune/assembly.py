"""Many zone/budget configurations per compiled pass over one fused run: the context metrics of
`lab.eval.context.context_metrics`, without building a context per (configuration, question).

Everything that does not depend on the assembly configuration is computed once per run: the items
of each question in greedy order (score descending, then memory id), their token costs per counter,
normalised scores, reading-order ranks, ages against each reference time, and which items are
near-duplicates of which at each threshold. The compiled kernel (`lab.tune.zone_kernel`) then
routes every item by `assemble`'s own rule (`lab.assemble.routing.zone_of`, compiled), replays its
greedy fill (critical, middle with critical's overflow, recency; unused space carried on; an item
that does not fit is skipped and smaller ones still tried; an item that near-duplicates one already
placed is dropped) and reads the metrics off the placement.

Exactness. Filling with near-duplicates checked as items are placed is `assemble`'s own reference
(its batch check only short-cuts it when nothing placed is a duplicate), so the kernel gives the
same placement. One case is not replayed: truncation of an item longer than the whole budget
(``oversize: truncate``); those (configuration, question) pairs go through `assemble` itself.
Neighbour expansion is not used by context metrics. A hypothesis test holds this equal to
`context_metrics`.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
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
from lab.search.candidates import reference_time
from lab.store.records import item_text, parse_time
from lab.tune.zone_kernel import NEVER_RECENT, fill_zones

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

    def question_items(self, q: int) -> list[Item]:
        """Question ``q``'s items as `assemble` takes them (for the pairs the kernel leaves to it)."""
        return self.raw_items[q]

    def _direct(self, out: dict[str, np.ndarray], c: int, q: int, config: AssembleConfig) -> None:
        """One (configuration, question) through `assemble` itself."""
        ref = self.fixed_reference or config.reference_time or self.ns_refs[q]
        ctx = assemble(self.question_items(q), config, counter=self._counter(config.counter), reference_time=ref)
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


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _micros(moment: datetime | str) -> int:
    """Microseconds since the epoch, exactly (the integer `ages` differences are taken in)."""
    if isinstance(moment, str):
        moment = parse_time(moment, "reference_time")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return (moment - _EPOCH) // _MICROSECOND


class ContextPool:
    """What assembly needs of every memory a candidate table can return, computed once, so that a
    new fused run gives its `BatchAssembler` in a few vectorised passes instead of rebuilding items,
    re-counting tokens and re-checking near-duplicates per question.

    This is what an interactive slider needs: a change of RRF k or a weight re-fuses the cached
    candidates and re-assembles every question of LoCoMo dev in tens of milliseconds. Token counts
    are kept per memory and counter, near-duplicate pairs per namespace and threshold (Jaccard is a
    property of two texts, so the pairs inside any one question are the pool's pairs restricted to
    it). `assembler(...).evaluate` equals `BatchAssembler.for_run(...).evaluate` (tested)."""

    def __init__(self, retriever: Retriever, dataset: EvalDataset, prepared, config: SearchConfig,
                 qids: Sequence[str] | None = None) -> None:
        self.retriever, self.dataset, self.prepared, self.config = retriever, dataset, prepared, config
        self.qids = list(qids) if qids is not None else dataset.questions["qid"].to_list()
        self.fixed_reference = dataset.reference_time
        ns_of = dict(dataset.questions.select("qid", "namespace").iter_rows())
        namespaces = sorted(set(ns_of.values()))
        ns_index = {ns: i for i, ns in enumerate(namespaces)}
        prep_q = prepared.qids.to_list()
        eval_pos = {q: i for i, q in enumerate(self.qids)}
        # prepared query code -> its position in self.qids (-1: not evaluated) and its namespace
        self.q_pos = np.asarray([eval_pos.get(q, -1) for q in prep_q], dtype=np.int64)
        q_ns = np.asarray([ns_index.get(ns_of.get(q), -1) for q in prep_q], dtype=np.int64)
        n_m = max(len(prepared.memory_ids), 1)
        pair_ns = q_ns[prepared.pair_q] if prepared.n_pairs else np.zeros(0, dtype=np.int64)
        # a slot is one memory in one namespace: what an item is made of
        slot_key, self.pair_slot = np.unique(pair_ns * n_m + prepared.pair_m, return_inverse=True)
        slot_ns, slot_m = slot_key // n_m, slot_key % n_m
        self.n_slots = len(slot_key)
        mem_ids = prepared.memory_ids.to_list()
        order = sorted(range(len(mem_ids)), key=mem_ids.__getitem__)  # ties go to the smaller id, as `assemble` sorts
        mem_rank = np.empty(len(mem_ids), dtype=np.int64)
        mem_rank[order] = np.arange(len(mem_ids))
        self.slot_rank = mem_rank[slot_m] if len(mem_ids) else np.zeros(0, dtype=np.int64)
        self.slot_id = [mem_ids[m] for m in slot_m.tolist()]
        self.slot_ns = slot_ns
        self.slot_text: list[str] = [""] * self.n_slots
        self.slot_created = np.zeros(self.n_slots, dtype=np.int64)
        self.slot_time: list[datetime | None] = [None] * self.n_slots
        self.slot_type: list[str] = ["semantic"] * self.n_slots
        self.slot_pinned = np.zeros(self.n_slots, dtype=bool)
        self.slot_valid = np.zeros(self.n_slots, dtype=bool)  # the namespace holds the memory
        self.ns_ref: list[datetime | str | None] = [None] * len(namespaces)
        for ns_i, ns in enumerate(namespaces):
            nsview = retriever.view(ns)
            self.ns_ref[ns_i] = reference_time(config, nsview)
            mem = nsview.rows.select("id", "title", "content", "type", "pinned", "created_at")
            at = {mid: i for i, mid in enumerate(mem["id"].to_list())}
            created = mem["created_at"].dt.epoch("us").to_numpy()
            times = mem["created_at"].to_list()
            titles, contents = mem["title"].to_list(), mem["content"].to_list()
            types, pins = mem["type"].to_list(), mem["pinned"].to_list()
            for s in np.flatnonzero(slot_ns == ns_i).tolist():
                i = at.get(self.slot_id[s])
                if i is None:
                    continue
                self.slot_valid[s] = True
                self.slot_text[s] = item_text(titles[i], contents[i])
                self.slot_created[s] = created[i]
                self.slot_time[s] = times[i]
                self.slot_type[s] = types[i]
                self.slot_pinned[s] = bool(pins[i])
        # each slot's place in (created_at, memory id) order: the tie-broken time key of reading orders
        self.slot_time_order = np.empty(self.n_slots, dtype=np.int64)
        self.slot_time_order[np.lexsort((self.slot_rank, self.slot_created))] = np.arange(self.n_slots)
        if len(mem_ids) and not bool(np.all(mem_rank == np.arange(len(mem_ids)))):
            raise ValidationError("prepared candidates must encode memory ids in sorted order (as `prepare` does)")
        self.slot_working = np.asarray([t == "working" for t in self.slot_type], dtype=bool)
        self.slot_anchor_or_pinned = self.slot_pinned | np.asarray([t == "anchor" for t in self.slot_type], dtype=bool)
        gold = gold_sets(dataset)
        self.gold = [gold.get(q, set()) for q in self.qids]
        self.n_gold = np.asarray([len(g) for g in self.gold], dtype=np.int64)
        mem_code = {m: i for i, m in enumerate(mem_ids)}
        q_code = {q: i for i, q in enumerate(prep_q)}
        self.gold_keys = np.unique(np.asarray(
            [q_code[q] * n_m + mem_code[m] for q, ids in gold.items() if q in q_code for m in ids if m in mem_code],
            dtype=np.int64))
        self._n_m = n_m
        q_ns_eval = [ns_index.get(ns_of.get(q), -1) for q in self.qids]
        self.q_ref = [self.ns_ref[i] if i >= 0 else None for i in q_ns_eval]
        self._tokens: dict[str, np.ndarray] = {}
        self._dups: dict[float, tuple[np.ndarray, np.ndarray]] = {}
        self.counter = retriever.counter

    def tokens(self, counter: str) -> np.ndarray:
        """Each slot's cost as rendered (citation and text) under ``counter``."""
        if counter not in self._tokens:
            lines = [line(mid, text) for mid, text in zip(self.slot_id, self.slot_text)]
            self._tokens[counter] = np.asarray(self.counter(counter).count_many(lines), dtype=np.int64)
        return self._tokens[counter]

    def duplicates(self, threshold: float) -> tuple[np.ndarray, np.ndarray]:
        """Each slot's near-duplicates in its own namespace (slots), as CSR offsets and values."""
        if threshold not in self._dups:
            partners: list[list[int]] = [[] for _ in range(self.n_slots)]
            for ns_i in range(len(self.ns_ref)):
                slots = [s for s in np.flatnonzero((self.slot_ns == ns_i) & self.slot_valid).tolist()]
                seen = Deduper(threshold)
                for s, sig in zip(slots, signatures([self.slot_text[s] for s in slots], threshold)):
                    for t in seen.matches(sig):
                        partners[s].append(t)
                        partners[t].append(s)
                    seen.add(sig, s)
            start = np.zeros(self.n_slots + 1, dtype=np.int64)
            start[1:] = np.cumsum([len(p) for p in partners])
            self._dups[threshold] = (start, np.asarray([t for p in partners for t in p], dtype=np.int64))
        return self._dups[threshold]

    def assembler(self, pair_idx: np.ndarray, scores: np.ndarray) -> "PooledAssembler":
        """The `BatchAssembler` of a fused run given as prepared pair indices and their fused scores
        (`fuse_arrays`' first and third outputs)."""
        return PooledAssembler(self, np.asarray(pair_idx, dtype=np.int64), np.asarray(scores, dtype=np.float64))


class PooledAssembler(BatchAssembler):
    """A `BatchAssembler` whose items come from a `ContextPool`: the same arrays, built by gathers."""

    def __init__(self, pool: ContextPool, pair_idx: np.ndarray, scores: np.ndarray) -> None:
        prep = pool.prepared
        self.pool = pool
        self._counter = pool.counter
        self.fixed_reference = pool.fixed_reference
        self.qids = pool.qids
        self.gold = pool.gold
        self.n_gold = pool.n_gold
        self.ns_refs = pool.q_ref  # each question's namespace reference time (`_direct`)
        self.retriever = self.dataset = self.run = self.config = None
        slot = pool.pair_slot[pair_idx]
        q = pool.q_pos[prep.pair_q[pair_idx]]
        keep = (q >= 0) & pool.slot_valid[slot]
        slot, q, scores, pair_idx = slot[keep], q[keep], scores[keep], pair_idx[keep]
        # fused runs come sorted by query, then score descending, then memory code, and memory codes
        # follow the ids' sort order: within a query that is already `assemble`'s greedy order, so
        # only the questions need putting into evaluation order (a stable integer sort, not a lexsort)
        if len(q) > 1 and not bool(np.all(q[1:] >= q[:-1])):
            order = np.argsort(q, kind="stable")
            slot, q, scores, pair_idx = slot[order], q[order], scores[order], pair_idx[order]
        n_q = len(self.qids)
        self.q_start = np.searchsorted(q, np.arange(n_q + 1)).astype(np.int64)
        self.item_slot, self.item_q = slot, q
        self.scores = scores
        seg_start = self.q_start[:-1][q] if len(q) else np.zeros(0, dtype=np.int64)
        best = scores[seg_start] if len(q) else np.zeros(0)
        with np.errstate(divide="ignore", invalid="ignore"):
            self.norm = np.where(best > 0, scores / np.where(best > 0, best, 1.0), 0.0)
        local = np.arange(len(q)) - seg_start
        # reading orders of `lab.assemble.fill`, each one integer sort: by score (ties by time, then
        # id) and by time (ties by id); a slot's place in (time, id) order stands for both keys
        when = pool.slot_time_order[slot]
        tie_group = np.cumsum(np.r_[True, (q[1:] != q[:-1]) | (scores[1:] != scores[:-1])]) if len(q) else q
        self.srank = np.empty(len(q), dtype=np.int64)
        self.srank[np.argsort(tie_group * pool.n_slots + when)] = local
        self.trank = np.empty(len(q), dtype=np.int64)
        self.trank[np.argsort(q * pool.n_slots + when)] = local
        self.working = pool.slot_working[slot]
        self.pinned = pool.slot_anchor_or_pinned[slot]
        key = prep.pair_q[pair_idx] * pool._n_m + prep.pair_m[pair_idx]
        self.is_gold = np.isin(key, pool.gold_keys)
        self.always_direct = np.zeros(n_q, dtype=bool)  # one item per memory: fused runs never repeat one
        self._tokens, self._widest, self._ages, self._dups = {}, {}, {}, {}

    def tokens(self, counter: str) -> np.ndarray:
        if counter not in self._tokens:
            tok = self.pool.tokens(counter)[self.item_slot]
            self._tokens[counter] = tok
            widest = np.zeros(len(self.qids), dtype=np.int64)
            if len(tok):
                np.maximum.at(widest, self.item_q, tok)
            self._widest[counter] = widest
        return self._tokens[counter]

    def ages(self, fixed: str | None) -> np.ndarray:
        if fixed not in self._ages:
            created = self.pool.slot_created[self.item_slot]
            refs = np.zeros(len(self.qids), dtype=np.int64)
            has = np.zeros(len(self.qids), dtype=bool)
            for i, ref in enumerate(self.pool.q_ref):
                ref = fixed if fixed is not None else ref
                if ref is not None:
                    refs[i], has[i] = _micros(ref), True
            newest = np.full(len(self.qids), np.iinfo(np.int64).min, dtype=np.int64)
            if len(created):
                np.maximum.at(newest, self.item_q, created)
            use_newest = ~has & (newest > np.iinfo(np.int64).min)
            refs[use_newest], has[use_newest] = newest[use_newest], True
            self._ages[fixed] = np.where(has[self.item_q], refs[self.item_q] - created, NEVER_RECENT).astype(np.int64)
        return self._ages[fixed]

    def duplicates(self, threshold: float) -> tuple[np.ndarray, np.ndarray]:
        if threshold not in self._dups:
            start, vals = self.pool.duplicates(threshold)
            slot, q = self.item_slot, self.item_q
            degree = start[slot + 1] - start[slot]
            owner = np.repeat(np.arange(len(slot)), degree)
            first = np.cumsum(degree) - degree  # where each item's partners begin in the flat list
            partner = vals[np.repeat(start[slot], degree) + np.arange(int(degree.sum())) - np.repeat(first, degree)]
            key = q * self.pool.n_slots + slot  # items sorted by question; keys unique per question
            order = np.argsort(key, kind="stable")
            want = q[owner] * self.pool.n_slots + partner
            at = np.searchsorted(key[order], want)
            at_c = np.minimum(at, max(len(key) - 1, 0))
            found = (len(key) > 0) & (key[order][at_c] == want) if len(want) else np.zeros(0, dtype=bool)
            owner, partner_item = owner[found], order[at_c[found]]
            local = partner_item - self.q_start[:-1][q[partner_item]]
            counts = np.bincount(owner, minlength=len(slot))
            out_start = np.zeros(len(slot) + 1, dtype=np.int64)
            out_start[1:] = np.cumsum(counts)
            self._dups[threshold] = (out_start, local[np.argsort(owner, kind="stable")].astype(np.int64))
        return self._dups[threshold]

    def question_items(self, q: int) -> list[Item]:
        pool = self.pool
        a, b = int(self.q_start[q]), int(self.q_start[q + 1])
        return [Item(pool.slot_id[s], pool.slot_text[s], float(self.scores[k]), pool.slot_time[s], pool.slot_type[s],
                     bool(pool.slot_pinned[s])) for k, s in zip(range(a, b), self.item_slot[a:b].tolist())]
