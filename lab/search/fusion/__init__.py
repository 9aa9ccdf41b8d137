"""Fusion: a registry of fusers with one interface, and the vectorised `fuse` over candidates.

The candidate table is encoded once into integer arrays (`prepare`): one slot per
(query, memory) pair and a dense (pair x signal) layout. Fusing under a configuration is then a
handful of numpy gathers and one sort, which is what makes sweeping k and weights over a cached
candidate table cheap. `fuse` accepts either the polars table or its `PreparedCandidates`.

Modules: `registry` (RankedLists, Fuser, FUSERS), one per fuser (`rrf`, `minmax`, `dbsf`,
`combmnz`), `prepare` (encoding), `fused` (fusing and ranking), `rules` (intent gating and the
per-pair post-processing levers, the one source `fuse` and the sweep's batch scorer both run) and
`learned` (a trained model's score on top of a fuser: FusionConfig.learned).
"""
from __future__ import annotations

from lab.search.fusion.registry import FUSERS, Fuser, FuserFn, RankedLists, get_fuser, register
from lab.search.fusion.prepare import FEATURE_DEFAULTS, PreparedCandidates, prepare
from lab.search.fusion.fused import CONTRIB_SCHEMA, RESULT_SCHEMA, explain_learned, fuse, fuse_arrays, fuse_detailed
from lab.search.fusion import combmnz, dbsf, minmax, rrf  # noqa: F401  (importing them registers them)

__all__ = [
    "CONTRIB_SCHEMA", "FEATURE_DEFAULTS", "FUSERS", "RESULT_SCHEMA", "Fuser", "FuserFn", "PreparedCandidates",
    "RankedLists", "explain_learned", "fuse", "fuse_arrays", "fuse_detailed", "get_fuser", "prepare", "register",
]
