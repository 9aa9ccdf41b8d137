"""Array views of one namespace's memories and edges at one store version, for fast signals and results."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any
from datetime import datetime, timezone

import numpy as np
import polars as pl

from lab.config import FilterConfig
from lab.errors import ValidationError
from lab.schema import MEMORY_TYPES
from lab.search import timex
from lab.search.pending import PendingMatch, resolved
from lab.search.sorted_ids import Positions, SortedIds
from lab.store.records import episode_expr, parse_time


EXTEND_AT_MOST = 4096  # new labels a memoised label map or grouping takes in alone; more: made again
CONTAINS_MEMO_BYTES = 128 * 1024 ** 2  # NamespaceView.contains's memo: 128 needles at a million memories
SLICE_AT_MOST = 64  # rows `rows_at` reads as one-row slices; more: one gather


@dataclass
class NamespaceView:
    namespace: str
    ids: SortedIds  # sorted: positions are in id order, the order ties break in
    pos: Positions
    created_s: np.ndarray  # epoch seconds
    access: np.ndarray
    valid: np.ndarray
    tags: list[list[str]] | pl.Series  # a Series until a tag filter needs the lists (`_mask`)
    superseded: np.ndarray
    text_lower: pl.Series  # title + content, lower-cased, for exact matching
    neighbours: dict[int, list[tuple[int, str, float]]]
    contradicts: dict[int, set[int]]
    key: tuple
    # a derived memory's position -> the positions it was derived from (derived_from edges, src -> dst)
    derived_from: dict[int, list[int]] = field(default_factory=dict)
    rows: pl.DataFrame = field(default_factory=pl.DataFrame)  # the memory rows, in position order
    by_newest: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # positions, newest first
    by_access: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # most accessed first
    _label_maps: dict[int, np.ndarray] = field(default_factory=dict)
    _by_position: dict[int, tuple[tuple[int, int], tuple[np.ndarray, ...]]] = field(default_factory=dict)
    # a moved view's matches wait for their moves until asked (lab.search.pending)
    _contains: dict[str, np.ndarray | PendingMatch] = field(default_factory=dict)
    _masks: dict[tuple[FilterConfig, bool], np.ndarray] = field(default_factory=dict)  # (filters, without_derived)
    # per index: the last memoised mask asked for, the index's label list and count then, and the
    # per-label mask
    _passing: dict[int, tuple[np.ndarray, list[str], int, np.ndarray]] = field(default_factory=dict)
    # analysed terms per memory id (an id's text is the same in every view this memo is shared by:
    # a view moved on by new memories keeps it)
    _terms: dict[str, frozenset[str]] = field(default_factory=dict)
    _episodes: pl.Series | None = None  # a Series: a view moved on by a save splices it, no list copied
    _members: dict[str, list[int]] | None = None
    _derived_mask: np.ndarray | None = None
    _episode_turns: tuple[np.ndarray, np.ndarray] | None = None
    _order: tuple[np.ndarray, np.ndarray] | None = None  # `_episode_order`
    _adjacent: tuple[np.ndarray, np.ndarray] | None = None
    _dated: np.ndarray | None = None
    _event_s: np.ndarray | None = None
    _types: np.ndarray | None = None  # `types`, made when a type filter first asks
    _lift: dict = field(default_factory=dict)  # `lab.search.adjacency.adjacency_lift`, per index
    _latest: tuple[np.ndarray, float] | None = None  # (created_s, its maximum): `latest`
    # where the store's tables stood when this view's rows were read (lab.store.memories.RowsMark):
    # a view can be moved on by what was appended since (lab.search.view_insert)
    source: Any = None

    @property
    def types(self) -> np.ndarray:
        """Each memory's type, by position (made from the rows when first asked: only type filters do)."""
        if self._types is None:
            self._types = self.rows["type"].to_numpy().astype(str) if self.ids else np.zeros(0, dtype=str)
        return self._types

    def dated(self) -> np.ndarray:
        """Per position: whether the memory's text holds a time expression (`lab.search.timex`)."""
        if self._dated is None:
            self._dated = timex.dated(self.text_lower)
        return self._dated

    def event_s(self) -> np.ndarray:
        """Per position: when the memory's event happened (epoch seconds): its created_at moved by
        the relative expression its text holds ("yesterday"), else its created_at."""
        if self._event_s is None:
            self._event_s = timex.event_seconds(self.text_lower, self.created_s, self.dated())
        return self._event_s

    @property
    def matches_memoised(self) -> int:
        """How many text matches this view memoises (`contains_all`), moved or waiting for their moves."""
        return len(self._contains)

    def contains(self, needle: str) -> np.ndarray:
        """Which memories hold ``needle`` (lower-case) in title or content, as booleans."""
        return self.contains_all((needle,))[0]

    def contains_all(self, needles: tuple[str, ...]) -> list[np.ndarray]:
        """``contains`` for each of ``needles``, memoised per view, since names recur across
        queries and a scan of a million texts costs ~20 ms a needle. The needles not memoised yet
        are scanned in one polars select, which runs its expressions in parallel. The memo holds
        at most CONTAINS_MEMO_BYTES (at a million memories it held up to 1,024 float arrays of 8 MB:
        the library's memory grew by 0.8 GB over 300 searches)."""
        missing = list(dict.fromkeys(n for n in needles if n not in self._contains))
        if missing:
            room = min(1024, max(1, CONTAINS_MEMO_BYTES // max(len(self.ids), 1)))
            if len(self._contains) + len(missing) > room:
                self._contains.clear()
                # the needles memoised before are gone too: scan every one asked for
                missing = list(dict.fromkeys(needles))
            scanned = pl.DataFrame({"text": self.text_lower}).select(
                pl.col("text").str.contains(needle, literal=True).alias(str(i)) for i, needle in enumerate(missing))
            for i, needle in enumerate(missing):
                hit = scanned[str(i)].to_numpy().astype(bool)
                hit.setflags(write=False)
                self._contains[needle] = hit
        return [resolved(self._contains, n) for n in needles]

    def terms(self, positions: list[int], term_sets) -> list[frozenset[str]]:
        """The analysed terms of title + content at ``positions``, memoised per view (``term_sets``
        maps texts to their term sets: the lexical index's analyzer, which memoises by text)."""
        ids = self.ids
        missing = [p for p in positions if ids[p] not in self._terms]
        if missing:
            # one gather, not an item access per position (a polars item access costs microseconds)
            for p, terms in zip(missing, term_sets(self.text_lower.gather(missing).to_list())):
                self._terms[ids[p]] = terms
        return [self._terms[ids[p]] for p in positions]

    @property
    def episodes(self) -> pl.Series:
        """Each memory's episode key (metadata "episode", else "session"; null for none), by position."""
        if self._episodes is None:
            self._episodes = (self.rows.select(episode_expr()).to_series() if self.ids
                              else pl.Series("episode", [], dtype=pl.String))
        return self._episodes

    def _episode_order(self) -> tuple[np.ndarray, np.ndarray]:
        """The valid memories that have an episode, grouped by episode and in turn order within
        it (created_at, then id), as positions; and where each episode's group starts in them.
        Array work, not a Python loop per memory: a view is rebuilt after every write, and at a
        million memories the loop cost a second of the next search."""
        if self._order is None:
            n = len(self.ids)
            # from the episode list (kept by a view moved on by saves), not the rows' JSON again
            codes = (self.episodes.rank("dense").fill_null(0).to_numpy()
                     .astype(np.int64) - 1) if n else np.zeros(0, dtype=np.int64)
            members = np.flatnonzero((codes >= 0) & self.valid)
            members = members[np.lexsort((members, self.created_s[members], codes[members]))]
            grouped = codes[members]
            starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]]) if len(members) else np.zeros(0, np.int64)
            self._order = (members, starts)
        return self._order

    def episode_members(self) -> dict[str, list[int]]:
        """Episode key -> positions of its valid memories, by (created_at, id): the turns in order."""
        if self._members is None:
            members, starts = self._episode_order()
            ends = np.r_[starts[1:], len(members)].astype(np.int64)
            keys = self.episodes.gather(members[starts]).to_list() if len(starts) else []
            self._members = {key: members[a:b].tolist() for key, a, b in zip(keys, starts, ends)}
        return self._members

    def has_episodes(self) -> bool:
        """Whether any valid memory belongs to an episode."""
        return len(self._episode_order()[0]) > 0

    def episode_turns(self) -> tuple[np.ndarray, np.ndarray]:
        """Per position: a number naming its episode (its first turn's position; -1 for none) and
        its turn in it (0-based, over the episode's valid memories by time)."""
        if self._episode_turns is None:
            members, starts = self._episode_order()
            sizes = np.diff(np.r_[starts, len(members)]).astype(np.int64)
            ep = np.full(len(self.ids), -1.0)
            turn = np.full(len(self.ids), -1.0)
            ep[members] = np.repeat(members[starts], sizes).astype(np.float64)
            turn[members] = (np.arange(len(members)) - np.repeat(starts, sizes)).astype(np.float64)
            self._episode_turns = (ep, turn)
        return self._episode_turns

    def adjacent_turns(self) -> tuple[np.ndarray, np.ndarray]:
        """Per position: the position of the turn just before it and just after it in its
        episode (-1 for none)."""
        if self._adjacent is None:
            members, starts = self._episode_order()
            before = np.full(len(self.ids), -1, dtype=np.int64)
            after = np.full(len(self.ids), -1, dtype=np.int64)
            if len(members):
                same = np.ones(len(members) - 1, dtype=bool)
                same[starts[1:] - 1] = False  # the last turn of an episode and the first of the next
                before[members[1:][same]] = members[:-1][same]
                after[members[:-1][same]] = members[1:][same]
            self._adjacent = (before, after)
        return self._adjacent

    @property
    def derived_mask(self) -> np.ndarray:
        """Which memories are derived from others (have a derived_from edge), by position."""
        if self._derived_mask is None:
            mask = np.zeros(len(self.ids), dtype=bool)
            mask[list(self.derived_from)] = True
            self._derived_mask = mask
        return self._derived_mask

    def rows_at(self, positions: list[int]) -> list[dict]:
        """The memory rows at ``positions``, as dicts, in that order."""
        if not positions:
            return []
        if len(positions) <= SLICE_AT_MOST:
            # a search's results are a few rows: one-row slices of a frame a save left in pieces
            # cost far less than a gather, which reassembles every piece of a list column
            return pl.concat([self.rows.slice(p, 1) for p in positions], rechunk=False).to_dicts()
        return self.rows[positions].to_dicts()

    @property
    def latest(self) -> datetime:
        if not self.ids:
            return datetime.now(timezone.utc)  # an empty namespace has no "now"; nothing ranks anyway
        # every search asks (its reference time): the maximum of a million times, taken once per
        # array (a moved view has arrays of its own; a view sharing this one shares the answer)
        memo = self._latest
        if memo is None or memo[0] is not self.created_s:
            memo = self._latest = (self.created_s, float(self.created_s.max()))
        return datetime.fromtimestamp(memo[1], tz=timezone.utc)

    def label_positions(self, index_id: int, memory_of: list[str]) -> np.ndarray:
        """Index label -> memory position (-1 for labels of memories no longer here)."""
        cached = self._label_maps.get(index_id)
        if cached is not None and len(cached) < len(memory_of) and len(memory_of) - len(cached) <= EXTEND_AT_MOST:
            # labels only ever grow (their memory never changes): the new ones looked up alone
            grown = np.fromiter((self.pos.get(m, -1) for m in memory_of[len(cached):]), dtype=np.int64)
            cached = np.concatenate([cached, grown])
            self._label_maps[index_id] = cached
        if cached is None or len(cached) != len(memory_of):
            # a hash join in polars, not a dictionary lookup per label (a second at a million labels)
            cached = (pl.Series(memory_of, dtype=pl.String)
                      .replace_strict(self.rows["id"], pl.int_range(len(self.ids), eager=True, dtype=pl.Int64),
                                      default=-1, return_dtype=pl.Int64).to_numpy()
                      if len(self.ids) and len(memory_of) else np.full(len(memory_of), -1, dtype=np.int64))
            self._label_maps[index_id] = cached
        return cached

    def labels_passing(self, index_id: int, memory_of: list[str], mask: np.ndarray) -> np.ndarray:
        """Per label of index ``index_id``: does its memory pass ``mask`` (a per-position mask)?
        Labels of memories no longer here do not."""
        cached = self._passing.get(index_id)
        if cached is not None and cached[0] is mask and cached[1] is memory_of:
            if cached[2] == len(memory_of):
                return cached[3]
            if 0 < len(memory_of) - cached[2] <= EXTEND_AT_MOST:  # labels added since: theirs alone
                label_pos = self.label_positions(index_id, memory_of)[cached[2]:]
                fresh = np.zeros(len(label_pos), dtype=bool)
                fresh[label_pos >= 0] = mask[label_pos[label_pos >= 0]]
                passing = np.concatenate([cached[3], fresh])
                passing.setflags(write=False)
                self._passing[index_id] = (mask, memory_of, len(memory_of), passing)
                return passing
        label_pos = self.label_positions(index_id, memory_of)
        passing = np.zeros(len(label_pos), dtype=bool)
        ok = label_pos >= 0
        passing[ok] = mask[label_pos[ok]]
        if any(mask is m for m in self._masks.values()):  # memoised: the same object, the same values
            passing.setflags(write=False)
            # the label list itself is kept too: an index rebuilt in its place may reuse its id()
            self._passing[index_id] = (mask, memory_of, len(memory_of), passing)
        return passing

    def labels_by_position(self, index_id: int, memory_of: list[str], live: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The live labels of index ``index_id`` grouped by memory position, CSR-style: the labels
        of position p are ``labels[indptr[p]:indptr[p + 1]]``."""
        return self._by_label_group(index_id, memory_of, live)[:2]

    def covered(self, index_id: int, memory_of: list[str], live: np.ndarray) -> np.ndarray:
        """Per position: has the memory a live chunk in the index ``index_id`` (a view's child index)?"""
        return self._by_label_group(index_id, memory_of, live)[2]

    def _by_label_group(self, index_id: int, memory_of: list[str], live: np.ndarray) -> tuple[np.ndarray, ...]:
        key = (len(memory_of), int(live.sum()))  # labels added or masked since: recompute
        cached = self._by_position.get(index_id)
        if cached is not None and cached[0] != key:
            cached = self._grouped_with_new_labels(index_id, memory_of, live, cached, key)
        if cached is None or cached[0] != key:
            label_pos = self.label_positions(index_id, memory_of)
            labels = np.flatnonzero(live & (label_pos >= 0))
            labels = labels[np.argsort(label_pos[labels], kind="stable")]
            indptr = np.zeros(len(self.ids) + 1, dtype=np.int64)
            np.cumsum(np.bincount(label_pos[labels], minlength=len(self.ids)), out=indptr[1:])
            cached = (key, (labels, indptr, np.diff(indptr) > 0))
            self._by_position[index_id] = cached
        return cached[1]

    def _grouped_with_new_labels(self, index_id: int, memory_of: list[str], live: np.ndarray, cached: tuple,
                                 key: tuple[int, int]) -> tuple | None:
        """The memoised grouping with the labels added since it was made put in their places (None
        when any other label changed: masked since, or too many new ones)."""
        (n_before, live_before), (labels, indptr, _) = cached
        if not 0 < key[0] - n_before <= EXTEND_AT_MOST or int(live[:n_before].sum()) != live_before:
            return None
        fresh = np.arange(n_before, key[0], dtype=np.int64)
        at = self.label_positions(index_id, memory_of)[fresh]
        fresh, at = fresh[live[fresh] & (at >= 0)], at[live[fresh] & (at >= 0)]
        order = np.lexsort((fresh, at))  # by position, then label: the order a full grouping has
        fresh, at = fresh[order], at[order]
        labels = np.insert(labels, indptr[at + 1], fresh)
        indptr, covered = indptr.copy(), cached[1][2].copy()
        for p, n in zip(*np.unique(at, return_counts=True)):  # a pass per memory given labels: a few
            indptr[p + 1:] += n
        covered[at] = True
        grouped = (key, (labels, indptr, covered))
        self._by_position[index_id] = grouped
        return grouped

    def mask(self, filters: FilterConfig, *, without_derived: bool = False) -> np.ndarray:
        """Memories passing every filter (before any ranking), derived facts left out if asked.
        Memoised per filter set and read-only: every search of a configuration asks for the same
        one, and at 100,000 memories building it (and the per-label mask made from it) is a tenth
        of a millisecond per query."""
        key = (filters, without_derived)
        try:
            hit = self._masks.get(key)
        except TypeError:  # a filter set built with lists is unhashable: computed every time
            return self._mask(filters, without_derived)
        if hit is None:
            if len(self._masks) >= 64:
                self._masks.clear()
            hit = self._mask(filters, without_derived)
            hit.setflags(write=False)
            self._masks[key] = hit
        return hit

    def _mask(self, filters: FilterConfig, without_derived: bool = False, at: np.ndarray | None = None) -> np.ndarray:
        """``mask`` computed, for every position or only those ``at``."""
        return filter_mask(self, filters, without_derived, at)


def filter_mask(view: NamespaceView, filters: FilterConfig, without_derived: bool = False,
                at: np.ndarray | None = None) -> np.ndarray:
    """Which memories of ``view`` (all, or those at positions ``at``) pass ``filters``."""
    pick = (lambda a: a) if at is None else (lambda a: a[at])  # noqa: E731
    keep = ~pick(view.derived_mask) if without_derived else np.ones(len(view.ids) if at is None else len(at), dtype=bool)
    if filters.valid_only:
        keep &= pick(view.valid)
    if filters.types:
        bad = sorted(set(filters.types) - set(MEMORY_TYPES))
        if bad:
            raise ValidationError(f"filters.types: unknown type(s) {bad}; known: {list(MEMORY_TYPES)}")
        keep &= np.isin(pick(view.types), list(filters.types))
    if filters.tags:
        wanted = set(filters.tags)
        if isinstance(view.tags, pl.Series):  # made lists once, when a filter first asks
            view.tags = view.tags.to_list()
        tags = view.tags if at is None else [view.tags[p] for p in at.tolist()]
        keep &= np.fromiter((bool(wanted & set(t)) for t in tags), dtype=bool, count=len(tags))
    if filters.since:
        keep &= pick(view.created_s) >= parse_time(filters.since, "filters.since").timestamp()
    if filters.until:
        keep &= pick(view.created_s) < parse_time(filters.until, "filters.until").timestamp()
    return keep


def text_of(memories: pl.DataFrame) -> pl.Series:
    """Title and content of each memory row, lower-cased: what exact matching looks in."""
    return memories.select(pl.concat_str([pl.col("title"), pl.lit("\n"), pl.col("content")])
                           .str.to_lowercase()).to_series()


def build_view(memories: pl.DataFrame, edges: pl.DataFrame, namespace: str, key: tuple) -> NamespaceView:
    memories = memories.sort("id")
    ids = SortedIds(memories["id"].to_list())
    pos = Positions(ids)
    superseded = memories["superseded_by"].is_not_null().to_numpy().copy()
    neighbours: dict[int, list[tuple[int, str, float]]] = defaultdict(list)
    contradicts: dict[int, set[int]] = defaultdict(set)
    derived_from: dict[int, list[int]] = defaultdict(list)
    for src, dst, relation, weight in edges.select("src", "dst", "relation", "weight").iter_rows():
        a, b = pos.get(src), pos.get(dst)  # (a binary search each: a store's edges are few)
        if a is None or b is None:
            continue
        if relation == "derived_from":
            derived_from[a].append(b)
        # walks go both ways: a hit on an old fact must reach the fact that supersedes it
        neighbours[a].append((b, relation, weight))
        neighbours[b].append((a, relation, weight))
        if relation == "supersedes":
            superseded[b] = True
        elif relation == "contradicts":
            contradicts[a].add(b)
            contradicts[b].add(a)
    for lst in neighbours.values():
        lst.sort()
    for lst in derived_from.values():
        lst.sort()
    access = memories["access_count"].to_numpy().astype(np.int64) if ids else np.zeros(0, dtype=np.int64)
    created = memories["created_at"].dt.epoch("us").to_numpy().astype(np.float64) / 1e6 if ids else np.zeros(0)
    return NamespaceView(
        namespace=namespace,
        ids=ids,
        pos=pos,
        created_s=created,
        access=access,
        valid=memories["valid"].to_numpy().astype(bool) if ids else np.zeros(0, dtype=bool),
        tags=memories["tags"],
        superseded=superseded,
        text_lower=text_of(memories),
        neighbours=dict(neighbours),
        contradicts=dict(contradicts),
        derived_from=dict(derived_from),
        key=key,
        rows=memories,
        # stable sorts: equal times or counts stay in id order, the order ties break in
        by_newest=np.argsort(-created, kind="stable"),
        by_access=np.argsort(-access, kind="stable"),
    )
