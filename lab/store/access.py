"""The access log table: an append-only record of reads, folded into memories' access counts."""
from __future__ import annotations

from datetime import datetime
from typing import Mapping, Sequence

import polars as pl
import pyarrow as pa

from lab.schema import ACCESS_LOG
from lab.store.table import DeltaFrame


class AccessLog:
    """Accesses appended as they happen, so serving reads never rewrite memory rows."""

    def __init__(self, delta: DeltaFrame) -> None:
        self.delta = delta

    def record(self, ids: Sequence[str], namespace_of: Mapping[str, str], *, at: datetime, context: str) -> int:
        """Log an access of each id that ``namespace_of`` knows (one commit); returns how many."""
        rows = [
            {"memory_id": i, "namespace": namespace_of[i], "accessed_at": at, "context": context}
            for i in ids if i in namespace_of
        ]
        self.delta.append(pa.Table.from_pylist(rows, schema=ACCESS_LOG))
        return len(rows)

    def fold(self, memories: pl.DataFrame, log: pl.DataFrame | None = None) -> pl.DataFrame:
        """Memory rows with the logged accesses (``log``: the log's rows, default all of them now)
        added to access_count and accessed_at."""
        log = self.delta.frame() if log is None else log
        if not log.height:
            return memories
        folded = log.group_by("memory_id").agg(
            pl.len().cast(pl.Int64).alias("_n"), pl.col("accessed_at").max().alias("_last")
        )
        return (
            memories.join(folded, left_on="id", right_on="memory_id", how="left")
            .with_columns(
                (pl.col("access_count") + pl.col("_n").fill_null(0)).alias("access_count"),
                pl.max_horizontal("accessed_at", "_last").alias("accessed_at"),
            )
            .drop("_n", "_last")
        )
