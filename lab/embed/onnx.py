"""ONNX Runtime embedder: a transformer exported to ONNX (the int8 all-MiniLM-L6-v2, or any local
export beside its ``tokenizer.json``), mean-pooled and normalised as sentence-transformers does.

No torch: the runtime and the ``tokenizers`` package are all it loads.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

import numpy as np

from lab.embed.base import Symmetric, mean_pool
from lab.embed.st import HFTokenizer


class OnnxEmbedder(Symmetric):
    """One ONNX model file and the tokenizer it was exported with; the session opens on first use."""

    def __init__(self, onnx_path: Path, tokenizer_dir: Path, *, model_id: str, space: str | None = None,
                 max_tokens: int = 256, batch_size: int = 32, dim: int | None = None) -> None:
        self.onnx_path = Path(onnx_path)
        self.model_id = model_id
        self._space = space or model_id
        self.max_tokens = max_tokens
        # larger batches of long texts run slower in onnxruntime's int8 kernels on these CPUs, not faster
        self.batch_size = min(batch_size, 8)
        self.tokenizer = HFTokenizer(Path(tokenizer_dir))
        # a second tokenizer object for the model's input: truncated, with special tokens
        from tokenizers import Tokenizer as _Tok

        self._encoder = _Tok.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
        self._encoder.enable_truncation(max_length=max_tokens)
        self._encoder.no_padding()
        self.threads = os.cpu_count() or 1  # batches side by side (torch too takes every core by default)
        self._session = None
        self._inputs: list[str] = []
        self.dim = dim if dim is not None else self._output_dim()

    @property
    def space(self) -> str:  # type: ignore[override]
        return self._space

    def set_threads(self, n: int) -> None:
        """How many batches of one call run side by side (each on one thread)."""
        self.threads = max(1, int(n))

    def _load(self):
        if self._session is None:
            import onnxruntime as ort

            options = ort.SessionOptions()
            # one thread per call: ``threads`` batches run side by side instead (on two cores that
            # embeds more texts per second than one call spread over both)
            options.intra_op_num_threads = 1
            options.inter_op_num_threads = 1
            options.log_severity_level = 3  # the int8 file's initializer warnings are noise
            self._session = ort.InferenceSession(str(self.onnx_path), options, providers=["CPUExecutionProvider"])
            self._inputs = [i.name for i in self._session.get_inputs()]
        return self._session

    def _output_dim(self) -> int:
        shape = self._load().get_outputs()[0].shape
        if isinstance(shape[-1], int):
            return shape[-1]
        return int(self.embed(["dimension probe"]).shape[1])  # a symbolic last axis: ask the model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        session = self._load()
        encodings = self._encoder.encode_batch(list(texts))
        # sorted by length, so each batch pads to a length close to its own texts'
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))
        batches = [order[start:start + self.batch_size] for start in range(0, len(order), self.batch_size)]

        def run(batch: list[int]) -> np.ndarray:
            width = max(len(encodings[i].ids) for i in batch)
            ids = np.zeros((len(batch), width), dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.int64)
            for row, i in enumerate(batch):
                n = len(encodings[i].ids)
                ids[row, :n] = encodings[i].ids
                mask[row, :n] = 1
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            hidden = session.run(None, {k: v for k, v in feed.items() if k in self._inputs})[0]
            return mean_pool(hidden, mask)

        if self.threads > 1 and len(batches) > 1:  # onnxruntime's run releases the GIL
            with ThreadPoolExecutor(self.threads) as pool:
                results = list(pool.map(run, batches))
        else:
            results = [run(b) for b in batches]
        out = np.zeros((len(texts), results[0].shape[1]), dtype=np.float32)
        for batch, vectors in zip(batches, results):
            out[batch] = vectors
        return out
