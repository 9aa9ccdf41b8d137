"""Index-time configuration (``SaveConfig``): chunks, the embedding model and the indexes;
changing any of it needs a rebuild."""
from __future__ import annotations

from dataclasses import dataclass

from lab.config.names import DEFAULT_MODEL, ENCODERS, INDEX_VIEWS
from lab.errors import ValidationError
from lab.fields import check_declared, setting


@dataclass(frozen=True)
class ChunkConfig:
    """Token windows over a memory's content; title and tags are prepended to every chunk.

    Index-time levers (each changes what is embedded and indexed, never what is returned):
    ``context_turns`` prepends up to that many earlier memories of the same episode (metadata
    "episode", else "session"; by time) to every chunk, so a reply like "yes, last week" is indexed
    with the question it answers. Only earlier memories are used, so a memory saved alone later
    is indexed exactly as it would be in a batch. ``time_in_text`` prepends the memory's date
    ("8 May 2023"), so a query naming a month or a year can match it.

    ``context_turns`` defaults to 2 (decision record in docs/decisions/, figures in the docs'
    results page); it changes nothing for memories without an episode.

    ``views`` indexes a memory again, once per named view, into indexes of its own, so search
    can rank each view as separate vector and lexical lists (``SearchConfig.views``). The one
    index-time view is ``plain``: the memory without the index-time context above. The
    contextual view finds a reply by the question it answers; the plain view keeps a turn's own
    words from being drowned by its neighbours'. Only memories that have index-time context get
    a second chunk (one more embedding each; identical texts are embedded once): for the others
    the plain text is the main one, and search reads their plain-view ranks from the main lists.
    A store of memories without episodes (and without ``time_in_text``) therefore pays nothing
    for the view, at index or at query time. With no index-time context configured at all
    (``context_turns`` 0, ``time_in_text`` off) nothing is indexed for it (``indexed_views``), and
    search ranks the main lists in the view's place.

    ``views`` defaults to ``("plain",)``: under leave-one-conversation-out cross-validation on
    LoCoMo dev, its lists (with the neighbour boost) lift ``lab``'s held-out recall@10 on every
    conversation (benchmarks/quality_cv.py).
    """

    size: int = setting(350, low=1, doc="tokens per chunk")
    overlap: int = setting(150, low=0, doc="tokens shared by consecutive chunks (< size)")
    prepend_title_tags: bool = setting(True, doc="prepend the title and tags to every chunk")
    context_turns: int = setting(2, low=0, high=20, doc="earlier turns of the episode indexed with each memory")
    time_in_text: bool = setting(False, doc="index each memory with its date")
    views: tuple[str, ...] = setting(("plain",), doc=f"extra index-time views, of {list(INDEX_VIEWS)}")

    def __post_init__(self) -> None:
        check_declared(self, "chunk.")
        if self.overlap >= self.size:
            raise ValidationError(f"chunk.overlap must be >= 0 and < chunk.size ({self.size}), got {self.overlap}",
                                  field="chunk.overlap")
        bad = sorted(set(self.views) - set(INDEX_VIEWS))
        if bad:
            raise ValidationError(f"chunk.views: unknown view(s) {bad}; index-time views: {list(INDEX_VIEWS)}",
                                  field="chunk.views")
        if len(set(self.views)) != len(self.views):
            raise ValidationError(f"chunk.views lists a view twice: {list(self.views)}", field="chunk.views")

    @property
    def indexed_views(self) -> tuple[str, ...]:
        """The extra views a store with this configuration declares: none without index-time
        context (the plain view would be the main one)."""
        return self.views if (self.context_turns or self.time_in_text) else ()


@dataclass(frozen=True)
class EmbedConfig:
    """Which embedder a store uses; the model id is recorded in the store and checked on open."""

    model: str = setting(DEFAULT_MODEL, doc="the store's embedding model (`lab models`)")
    batch_size: int = setting(64, low=1, doc="texts per model call")
    cache: bool = setting(True, doc="reuse vectors of texts embedded before")

    def __post_init__(self) -> None:
        check_declared(self, "embed.")


@dataclass(frozen=True)
class VectorIndexConfig:
    """hnswlib parameters; search ef is raised to at least k at query time."""

    m: int = setting(16, low=1, doc="hnswlib's links per node")
    ef_construction: int = setting(200, low=1, doc="hnswlib's candidate list while building")
    ef_search: int = setting(100, low=1, doc="hnswlib's candidate list while searching")
    seed: int = setting(100, doc="hnswlib's random seed")
    shards: int = setting(2, low=1, high=64, doc="hnswlib graphs a large namespace's vectors are split over at a "
                          "build, each built on its own thread (deterministic, unlike hnswlib's own threads)")
    shard_from: int = setting(100_000, low=1, doc="chunks a namespace needs at a build for its vectors "
                              "to be split over index.vector.shards graphs")

    def __post_init__(self) -> None:
        check_declared(self, "index.vector.")


# bm25s's variants: Robertson's, Lucene's (the default), ATIRE's, BM25L and BM25+ (Lv & Zhai 2011)
BM25_METHODS = ("robertson", "lucene", "atire", "bm25l", "bm25+")


@dataclass(frozen=True)
class LexicalIndexConfig:
    """bm25s parameters: NLTK's English stopwords and the Snowball stemmer by default.

    k1 0.9, b 0.4 and the 179 stopwords of "en_plus" (bm25s's "en" has 33) won on every held-out
    LoCoMo conversation against Lucene's usual 1.5 / 0.75 and "en" (benchmarks/lexical_cv.py):
    a memory is a turn or a note, shorter and more alike in length than web documents, so length
    normalisation (b) matters less, and questions are full of function words ("did", "what",
    "her") that "en" keeps.
    """

    k1: float = setting(0.9, low=0, doc="BM25 term-frequency saturation")
    b: float = setting(0.4, low=0, high=1, doc="BM25 length normalisation")
    method: str = setting("lucene", choices=BM25_METHODS, doc="the BM25 variant")
    stopwords: str | None = setting("en_plus", doc="stopword list: en, en_plus, a language, or none")
    stemmer: str | None = setting("english", doc="Snowball stemmer language, or none")

    def __post_init__(self) -> None:
        check_declared(self, "index.lexical.")
        # one spelling of "off", so equal settings make equal manifests (a saved index is reused)
        for name in ("stopwords", "stemmer"):
            if getattr(self, name) in ("", "none"):
                object.__setattr__(self, name, None)
        if self.stemmer not in (None, "english"):
            import Stemmer  # PyStemmer, only to check an uncommon choice

            if self.stemmer not in Stemmer.algorithms():
                raise ValidationError(f"index.lexical.stemmer: unknown stemmer {self.stemmer!r}; known: "
                                      f"{Stemmer.algorithms()} (or none)", field="index.lexical.stemmer")
        if self.stopwords not in (None, "en", "en_plus", "english"):
            from bm25s.tokenization import _infer_stopwords  # bm25s's own names for its lists

            try:
                _infer_stopwords(self.stopwords)
            except ValueError:
                raise ValidationError(f"index.lexical.stopwords: unknown stopword list {self.stopwords!r}; known: "
                                      "en, en_plus, a language name bm25s knows (de, fr, es, ...) or none",
                                      field="index.lexical.stopwords") from None


@dataclass(frozen=True)
class IndexConfig:
    vector: VectorIndexConfig = setting(default_factory=VectorIndexConfig, doc="the vector index (hnswlib)")
    lexical: LexicalIndexConfig = setting(default_factory=LexicalIndexConfig, doc="the lexical index (bm25s)")
    # Writes since the last build go to a delta; past this many chunks the lexical delta is
    # folded into the main index in a background thread.
    delta_merge_threshold: int = setting(512, low=1, doc="chunks written before the lexical delta is merged")
    # encoders the store carries beside its own model (keys of ENCODERS): each ranks a list of its
    # own ("vector@e5") when a search config names it in ``encoders``; their passage vectors live
    # in the embedding cache, so adding one embeds only its own vectors
    models: tuple[str, ...] = setting((), doc=f"extra encoders the store carries, of {list(ENCODERS)}")

    def __post_init__(self) -> None:
        check_declared(self, "index.")
        bad = [m for m in self.models if m not in ENCODERS]
        if bad:
            raise ValidationError(f"index.models: unknown encoder(s) {bad}; known: {list(ENCODERS)}",
                                  field="index.models")
        if len(set(self.models)) != len(self.models):
            raise ValidationError(f"index.models lists an encoder twice: {list(self.models)}", field="index.models")


@dataclass(frozen=True)
class SaveConfig:
    """Index-time configuration: changing any of it needs a rebuild."""

    chunk: ChunkConfig = setting(default_factory=ChunkConfig, doc="how memories are cut into chunks")
    embed: EmbedConfig = setting(default_factory=EmbedConfig, doc="the embedding model")
    index: IndexConfig = setting(default_factory=IndexConfig, doc="the indexes built")
