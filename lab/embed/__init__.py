"""Embedders (sentence-transformers with the bundled model; a deterministic fake) and their cache."""
from __future__ import annotations

from lab.config import DEFAULT_MODEL, FAKE_MODEL, EmbedConfig
from lab.embed.base import Embedder, Tokenizer
from lab.embed.fake import FakeEmbedder
from lab.embed.st import SentenceTransformerEmbedder
from lab.errors import ValidationError

__all__ = ["Embedder", "Tokenizer", "make_embedder", "KNOWN_MODELS"]

KNOWN_MODELS = (DEFAULT_MODEL, FAKE_MODEL)


def make_embedder(config: EmbedConfig) -> Embedder:
    """The embedder named by the config; only bundled models exist (nothing is downloaded)."""
    if config.model == DEFAULT_MODEL:
        return SentenceTransformerEmbedder(batch_size=config.batch_size)
    if config.model == FAKE_MODEL:
        return FakeEmbedder()
    raise ValidationError(f"unknown embedding model {config.model!r}; known: {list(KNOWN_MODELS)}")
