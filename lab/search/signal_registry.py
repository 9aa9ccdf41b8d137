"""The signal registry: each signal turns one query into a ranked list of memory positions.

Signals run in registration order, so a signal may build on the lists made before it (the graph
walk seeds from the vector and lexical lists, so it registers last). A signal returns None when it
does not apply to a query (no entities, no time window): it then contributes no list.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Callable

import numpy as np
import polars as pl

from lab.config import SIGNALS as SIGNAL_NAMES
from lab.config import VIEW_SIGNALS, SearchConfig
from lab.errors import ValidationError
from lab.index.namespace import NamespaceIndex
from lab.search import signals as sig
from lab.search.analysis import QueryAnalysis, entities
from lab.search.view import NamespaceView

Ranked = sig.Ranked


@dataclass
class SignalInput:
    """What a signal sees of one query in one namespace."""

    text: str
    vector: np.ndarray
    view: NamespaceView
    index: NamespaceIndex
    allowed: np.ndarray  # memory positions passing the filters
    allowed_labels: np.ndarray  # index labels passing the filters
    allowed_facts: np.ndarray  # derived facts passing the filters (the derived view ranks them)
    analysis: QueryAnalysis
    reference: datetime
    config: SearchConfig
    depth: int
    lists: dict[str, Ranked]  # the lists of the signals that ran before


@dataclass(frozen=True)
class Signal:
    name: str
    fn: Callable[[SignalInput], Ranked | None]
    description: str = ""


SIGNALS: dict[str, Signal] = {}


def register(signal: Signal) -> Signal:
    if signal.name not in SIGNAL_NAMES:
        raise ValidationError(f"signal {signal.name!r} is not declared in lab.config.SIGNALS {list(SIGNAL_NAMES)}")
    SIGNALS[signal.name] = signal
    return signal


def get_signal(name: str) -> Signal:
    if name not in SIGNALS:
        raise ValidationError(f"unknown signal {name!r}; known: {list(SIGNALS)}")
    return SIGNALS[name]


def _from_hits(view: NamespaceView, hits: list[tuple[str, float]]) -> Ranked:
    return (np.array([view.pos[m] for m, _ in hits], dtype=np.int64), np.array([s for _, s in hits]))


def _at_positions(hits: list[tuple[int, float]]) -> Ranked:
    return np.array([p for p, _ in hits], dtype=np.int64), np.array([s for _, s in hits], dtype=np.float64)


def _label_positions(q: SignalInput) -> np.ndarray:
    """The main index's label -> view position (memoised by the view): hits collapse to positions."""
    return q.view.label_positions(id(q.index), q.index.memory_of)


def _vector(q: SignalInput) -> Ranked:
    return _at_positions(q.index.search_vector(q.vector, q.depth, q.allowed_labels, _label_positions(q)))


def _lexical(q: SignalInput) -> Ranked:
    return _at_positions(q.index.search_lexical(q.text, q.depth, q.allowed_labels, _label_positions(q)))


def _entity(q: SignalInput) -> Ranked | None:
    if not q.config.analysis.entities:
        return None
    return sig.entity(q.view, q.allowed, q.analysis.entities, q.depth)


def _temporal(q: SignalInput) -> Ranked | None:
    if q.config.analysis.temporal != "boost":
        return None
    if q.analysis.window is not None:
        return sig.temporal(q.view, q.allowed, q.analysis.window, q.depth)
    if q.analysis.asks_time:
        return sig.dated_evidence(q.view, _seeds(q, q.depth), q.depth)
    return None


def _graph(q: SignalInput) -> Ranked:
    return sig.graph(q.view, q.allowed, sorted(_seeds(q, q.config.graph.seeds).items()), q.config.graph, q.depth)


def _seeds(q: SignalInput, top: int) -> dict[int, float]:
    """The first hits a second-stage signal starts from: the top ``top`` of the vector and the
    lexical lists, each scored 1/rank by its better list."""
    seeds: dict[int, float] = {}
    for name in ("vector", "lexical"):
        positions = q.lists.get(name, sig.EMPTY)[0][:top]
        for rank, p in enumerate(positions.tolist(), start=1):
            seeds[p] = max(seeds.get(p, 0.0), 1.0 / rank)
    return seeds


def _hop(q: SignalInput) -> Ranked | None:
    seeds = sorted(_seeds(q, q.config.hop.seeds).items(), key=lambda kv: (-kv[1], kv[0]))[: q.config.hop.seeds]
    if not seeds:
        return None
    pool = np.asarray([p for p, _ in seeds], dtype=np.int64)
    labels, indptr = q.view.labels_by_position(id(q.index), q.index.memory_of, q.index.live)
    qvec = np.asarray(q.vector, dtype=np.float32)
    hits = []
    for p in pool.tolist():  # each seed's chunk closest to the question stands for it
        own = labels[indptr[p]:indptr[p + 1]]
        if len(own):
            hits.append(own[int(np.argmax(q.index.cosines(qvec, own)))])
    if not hits:
        return None
    mean = q.index.chunk_vectors(np.asarray(hits)).mean(axis=0)
    mix = q.config.hop.mix
    moved = _unit((1 - mix) * _unit(qvec) + mix * _unit(mean))
    return _at_positions(q.index.search_vector(moved, q.depth, q.allowed_labels, _label_positions(q)))


BRIDGE_MAX_SHARE = 0.05  # a name in more of the namespace than this bridges to nothing in particular (a speaker)


def _bridge(q: SignalInput) -> Ranked | None:
    """The second hop of a multi-hop question, seeded by the names of the first hits rather than
    their vectors: the rare names and codes the top hits mention and the question does not (the
    other half's subject: "Caroline's support group" -> the group's name) are added to the question,
    BM25 is asked again, and the first hits themselves are left out (the other lists have them)."""
    seeds = [p for p, _ in sorted(_seeds(q, q.config.hop.seeds).items(), key=lambda kv: (-kv[1], kv[0]))
             ][: q.config.hop.seeds]
    if not seeds:
        return None
    asked = {e.lower() for e in q.analysis.entities}
    texts = q.view.rows[seeds].select(pl.concat_str([pl.col("title"), pl.lit("\n"), pl.col("content")]))
    found = dict.fromkeys(e for text in texts.to_series().to_list() for e in entities(text)
                          if e.lower() not in asked and len(e) >= 3)
    names = tuple(dict.fromkeys(e.lower() for e in found))
    if not names:
        return None
    rare = [n for n, hit in zip(names, q.view.contains_all(names)) if hit.mean() <= BRIDGE_MAX_SHARE]
    if not rare:
        return None
    hits = q.index.search_lexical(f"{q.text} {' '.join(rare)}", q.depth + len(seeds), q.allowed_labels)
    own = set(seeds)
    kept = [(m, s) for m, s in hits if q.view.pos[m] not in own][: q.depth]
    return _from_hits(q.view, kept) if kept else None


def _unit(v: np.ndarray) -> np.ndarray:
    return v / max(float(np.linalg.norm(v)), 1e-12)


for _signal in (
    Signal("vector", _vector, "cosine of the query and the memory's best chunk (hnswlib)"),
    Signal("lexical", _lexical, "BM25 of the memory's best chunk (bm25s, main index + delta)"),
    Signal("recency", lambda q: sig.recency(q.view, q.allowed, q.reference, q.config.half_life_hours, q.depth),
           "0.5 ** (age / half-life), age from the reference time"),
    Signal("frequency", lambda q: sig.frequency(q.view, q.allowed, q.depth), "log(1 + access count)"),
    Signal("entity", _entity, "exact matches of the query's names and codes"),
    Signal("temporal", _temporal, "memories inside the time window the query names (said then, or telling of "
           "then); for a 'when' question, the first hits that hold a time expression"),
    Signal("graph", _graph, "breadth-first walk over typed edges from the top vector and lexical hits"),
    Signal("hop", _hop, "a second vector search, the query moved toward its top vector and lexical hits"),
    Signal("bridge", _bridge, "a second BM25 search, the query joined by the rare names its top hits mention "
           "(the first hits left out)"),
):
    register(_signal)


# ---------------------------------------------------------------------------- views
def _index_view(q: SignalInput, view: str, wanted: list[str]) -> dict[str, Ranked]:
    """The view's lists: its child index ranks the memories it holds (those with index-time
    context); every other memory's text in the view is its main text, so its rank comes from the
    main list. The two are merged by score (both cosines, or both BM25 over the same texts)."""
    child = q.index.views.get(view)
    # a store that does not declare the view (no index-time context, where the view would equal
    # the main one, or a store made before views) ranks its main lists in the view's place: a
    # configuration's weights keep their balance against the other signals on any store
    covered = q.view.covered(id(child), child.memory_of, child.live) if child is not None and child.n_live else None
    allowed = q.view.labels_passing(id(child), child.memory_of, q.allowed) if covered is not None else None
    out = {}
    for name in wanted:
        main = q.lists[name]  # the main signal ran first (views are ranked after every signal)
        if covered is None:  # no memory differs in this view: its list is the main one, at no cost
            out[f"{name}@{view}"] = main
            continue
        own = _from_hits(q.view, child.search_vector(q.vector, q.depth, allowed) if name == "vector"
                         else child.search_lexical(q.text, q.depth, allowed))
        keep = ~covered[main[0]]
        positions = np.concatenate([own[0], main[0][keep]])
        scores = np.concatenate([own[1], main[1][keep]])
        order = np.lexsort((positions, -scores))[: q.depth]  # by score, ties by position
        out[f"{name}@{view}"] = (positions[order], scores[order])
    return out


def _derived_view(q: SignalInput, wanted: list[str]) -> dict[str, Ranked]:
    """Derived facts ranked by vector and by BM25, each hit credited to the memories it was derived
    from: a turn is found by what was distilled from it, without the fact taking its place."""
    nsview = q.view
    if not nsview.derived_from:
        return {}
    allowed = nsview.labels_passing(id(q.index), q.index.memory_of, q.allowed_facts)
    out = {}
    for name in wanted:
        # facts of one source share its credit, so fetch beyond depth to fill depth sources
        hits = (q.index.search_vector(q.vector, 2 * q.depth, allowed) if name == "vector"
                else q.index.search_lexical(q.text, 2 * q.depth, allowed))
        positions, scores, seen = [], [], set()
        for mid, score in hits:
            for source in nsview.derived_from.get(nsview.pos[mid], ()):
                if source not in seen and q.allowed[source]:
                    seen.add(source)
                    positions.append(source)
                    scores.append(score)
        out[f"{name}@derived"] = (np.asarray(positions[: q.depth], dtype=np.int64),
                                  np.asarray(scores[: q.depth], dtype=np.float64))
    return out


def view_lists(q: SignalInput, view: str) -> dict[str, Ranked]:
    """The ranked lists of one view (``SearchConfig.views``): its vector and lexical lists, for
    those of the two the configuration's signals enable."""
    wanted = [s for s in VIEW_SIGNALS if s in q.config.signals]
    if not wanted:
        return {}
    if view == "derived":
        return _derived_view(q, wanted)
    return _index_view(q, view, wanted)
