"""ragas's LLM-free context metrics (ID-based and string-based), computed offline per question."""
from __future__ import annotations

import asyncio
import math
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import polars as pl

from lab.errors import ValidationError
from lab.workspace import set_library_env

ID_COLUMNS: tuple[str, ...] = ("ragas_id_recall", "ragas_id_precision")
TEXT_COLUMNS: tuple[str, ...] = ("ragas_text_recall", "ragas_text_precision")


def _str_list(row: dict[str, Any], key: str, qid: object) -> list[str]:
    value = row.get(key)
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ValidationError(f"row {qid!r}: {key} must be a list of str, got {value!r}")
    bad = [v for v in value if not isinstance(v, str)]
    if bad:
        raise ValidationError(f"row {qid!r}: {key} must hold only str, got {bad[0]!r}")
    return list(value)


def _validate(rows: list[dict]) -> tuple[list[dict[str, Any]], bool]:
    if not isinstance(rows, list):
        raise ValidationError(f"rows must be a list of dicts, got {type(rows).__name__}")
    clean: list[dict[str, Any]] = []
    seen: set[str] = set()
    with_texts: set[bool] = set()
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValidationError(f"rows[{i}] must be a dict, got {type(row).__name__}")
        qid = row.get("qid")
        if not isinstance(qid, str) or not qid:
            raise ValidationError(f"rows[{i}].qid must be a non-empty str, got {qid!r}")
        if qid in seen:
            raise ValidationError(f"qid {qid!r} appears in more than one row")
        seen.add(qid)
        item: dict[str, Any] = {
            "qid": qid,
            "retrieved_ids": _str_list(row, "retrieved_ids", qid),
            "reference_ids": _str_list(row, "reference_ids", qid),
        }
        if not item["reference_ids"]:
            raise ValidationError(f"row {qid!r}: reference_ids is empty, so recall is undefined")
        has_texts = row.get("retrieved_texts") is not None or row.get("reference_texts") is not None
        with_texts.add(has_texts)
        if has_texts:
            item["retrieved_texts"] = _str_list(row, "retrieved_texts", qid)
            item["reference_texts"] = _str_list(row, "reference_texts", qid)
            if not item["reference_texts"]:
                raise ValidationError(f"row {qid!r}: reference_texts is empty, so text recall is undefined")
        clean.append(item)
    # Mixed rows would leave holes in the text columns that look like real scores of 0 or NaN.
    if len(with_texts) > 1:
        raise ValidationError("either every row or no row must give retrieved_texts/reference_texts")
    return clean, with_texts == {True}


def ragas_metrics(rows: list[dict]) -> pl.DataFrame:
    """One row per qid with ragas_id_recall, ragas_id_precision (and ragas_text_* when texts are given).

    rows: dicts with qid, retrieved_ids (ranked), reference_ids and optionally retrieved_texts,
    reference_texts. ID metrics are set-based (IDBasedContextRecall/Precision); text metrics are
    NonLLMContextRecall and NonLLMContextPrecisionWithReference (rank-aware average precision),
    both matching strings by rapidfuzz similarity with ragas's default threshold. A row that
    retrieved nothing scores 0 everywhere (ragas itself would fail or return NaN there).
    Sorted by qid.
    """
    clean, texts = _validate(rows)
    columns = list(ID_COLUMNS) + (list(TEXT_COLUMNS) if texts else [])
    schema = {"qid": pl.String, **{c: pl.Float64 for c in columns}}
    if not clean:
        return pl.DataFrame(schema=schema)

    # ragas batches usage analytics and posts them over the network unless told not to.
    set_library_env({"RAGAS_DO_NOT_TRACK": "true"}, overwrite=True)
    with warnings.catch_warnings():
        # ragas (and langchain under it) warn on import and on use of these legacy metric
        # classes; the classes are what 0.4.3 offers for LLM-free scoring of samples.
        warnings.simplefilter("ignore", DeprecationWarning)
        from ragas import SingleTurnSample
        from ragas._analytics import do_not_track
        from ragas.metrics import (
            IDBasedContextPrecision,
            IDBasedContextRecall,
            NonLLMContextPrecisionWithReference,
            NonLLMContextRecall,
        )

        # The flag is cached at first use; clear it so the setting above is what counts.
        do_not_track.cache_clear()
        id_recall, id_precision = IDBasedContextRecall(), IDBasedContextPrecision()
        text_recall, text_precision = NonLLMContextRecall(), NonLLMContextPrecisionWithReference()

        async def pair(recall, precision, prefix: str, retrieved: list[str], sample: dict[str, list[str]]) -> dict[str, float]:
            if not retrieved:  # nothing retrieved scores 0 (ragas would divide by zero)
                return {f"{prefix}_recall": 0.0, f"{prefix}_precision": 0.0}
            s = SingleTurnSample(**sample)
            return {f"{prefix}_recall": float(await recall.single_turn_ascore(s)),
                    f"{prefix}_precision": float(await precision.single_turn_ascore(s))}

        async def score(item: dict[str, Any]) -> dict[str, Any]:
            out: dict[str, Any] = {"qid": item["qid"]}
            ids = {"retrieved_context_ids": item["retrieved_ids"], "reference_context_ids": item["reference_ids"]}
            out.update(await pair(id_recall, id_precision, "ragas_id", item["retrieved_ids"], ids))
            if texts:
                text = {"retrieved_contexts": item["retrieved_texts"], "reference_contexts": item["reference_texts"]}
                out.update(await pair(text_recall, text_precision, "ragas_text", item["retrieved_texts"], text))
            return out

        async def score_all() -> list[dict[str, Any]]:
            # Sequential within one loop: the metrics are CPU-bound, so gather would add
            # task overhead without any concurrency gain, and order stays obvious.
            return [await score(item) for item in clean]

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            results = asyncio.run(score_all())
        else:
            # Inside a running loop (a Jupyter cell) asyncio.run refuses to start; a worker
            # thread gets its own loop and we wait for it.
            with ThreadPoolExecutor(max_workers=1) as pool:
                results = pool.submit(asyncio.run, score_all()).result()

    for r in results:
        for c in columns:
            if math.isnan(r[c]):
                raise ValidationError(f"ragas returned NaN for {c} of qid {r['qid']!r}")
    return pl.DataFrame(results, schema=schema).sort("qid")
