"""Abstention: "nothing relevant is stored", decided from the evidence every search already has.

Fused scores are rank-based (reciprocal rank fusion gives the first hit the same score whatever it
is), so they cannot say whether anything relevant exists. The evidence is the best candidate's
cosine similarity to the query: every candidate of every list carries its best chunk's cosine
(the ``_cosine`` feature rows of the candidate table), so the same number is read by a served
search and by an evaluation from its cached candidate tables. A question asked where its answer is
not stored finds only loosely related text, and its best cosine is lower (on LoCoMo, a question
asked in another conversation's namespace; see docs/abstention.md for the measured separation).

The threshold is a cosine of the store's embedding model, so it is fitted per model on tune
questions (``lab.eval.abstention``) and carried by the search configuration (``abstain.threshold``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from lab.config import AbstainConfig
from lab.search.fusion.prepare import CandidateCodes

EVIDENCE = "_cosine"  # the candidate table's feature rows this decision reads


@dataclass(frozen=True)
class Abstention:
    """A search's abstention decision with its evidence: the best candidate's cosine (None: no
    candidate at all) and the threshold it was compared with (None: the configuration never abstains)."""

    abstain: bool
    score: float | None
    threshold: float | None

    @property
    def reason(self) -> str:
        if not self.abstain:
            return ""
        if self.score is None:
            return "nothing relevant stored: no candidate at all"
        return f"nothing relevant stored: best cosine {self.score:.4f} < threshold {self.threshold:.4f}"

    def to_dict(self) -> dict[str, Any]:
        return {"abstain": self.abstain, "score": self.score, "threshold": self.threshold}


def decide(score: float | None, config: AbstainConfig) -> Abstention:
    """Abstain when a threshold is set and the best cosine is below it (or there is no candidate)."""
    threshold = config.threshold
    abstain = threshold is not None and (score is None or score < threshold)
    return Abstention(abstain, None if score is None else round(float(score), 6), threshold)


def best_scores(cands: pl.DataFrame) -> dict[str, float]:
    """Per query id of a candidate table: its best candidate's cosine (a query without candidates
    is absent)."""
    if not cands.height:
        return {}
    best = (cands.filter(pl.col("signal") == EVIDENCE).group_by("qid")
            .agg(pl.col("score").max().alias("best")))
    return dict(best.iter_rows())


def best_scores_of_codes(codes: CandidateCodes) -> dict[str, float]:
    """`best_scores` of the table ``codes`` stand for (a search encodes its candidates without
    writing the table out): per query id, its best candidate's cosine."""
    got = codes.features.get(EVIDENCE)
    if got is None or not len(got[0]):
        return {}
    q, _, values = got
    best = np.full(len(codes.qids), -np.inf)
    np.maximum.at(best, q, values)
    qids = codes.qids.to_list()
    return {qids[c]: float(best[c]) for c in np.unique(q).tolist()}
