"""Context assembly's configuration (``AssembleConfig``): the token budget and its zones."""
from __future__ import annotations

from dataclasses import dataclass

from lab.errors import ValidationError
from lab.fields import check_declared, setting


ZONES: tuple[str, ...] = ("critical", "middle", "recency")


@dataclass(frozen=True)
class AssembleConfig:
    """Position-aware context assembly: a token budget split into critical / middle / recency zones.

    Query-time only: changing any of it re-assembles cached results, no re-search.
    """

    # tokens of an assembled context: the one definition of the budget's bounds (the command line
    # and every served face take theirs from here)
    budget: int = setting(2000, low=1, high=1_000_000, doc="tokens of context (rendered lines: citation + text)")
    critical_ratio: float = setting(0.15, low=0, high=1, doc="the critical zone's share of the budget")
    middle_ratio: float = setting(0.65, low=0, high=1, doc="the middle zone's share of the budget")
    recency_ratio: float = setting(0.20, low=0, high=1, doc="the recency zone's share of the budget")
    critical_threshold: float = setting(0.7, low=0, high=1, doc="normalised score (score / best) at or above: critical")
    recency_threshold: float = setting(0.3, low=0, high=1, doc="recent items at or above this normalised score: recency")
    recent_hours: float = setting(24.0, low=0, doc="recent: created within this window before the reference time")
    reference_time: str | None = setting(None, doc="ISO 8601 'now'; none: the namespace's latest memory")
    counter: str = setting("estimate", choices=("estimate", "exact"),
                           doc="token counter: estimate (max(chars/4, words*1.5)) or exact (the model's tokenizer)")
    dedupe_threshold: float = setting(0.9, above=0, high=1, doc="word-trigram Jaccard at or above: near-duplicate")
    oversize: str = setting("truncate", choices=("truncate", "skip"), doc="an item longer than the whole budget")
    min_truncated_tokens: int = setting(16, low=1, doc="a truncated item keeps at least this many tokens")
    neighbours: int = setting(0, low=0, doc="adjacent turns of the same episode added around placed items")

    def __post_init__(self) -> None:
        check_declared(self, "assemble.")
        ratios = (self.critical_ratio, self.middle_ratio, self.recency_ratio)
        if any(r < 0 for r in ratios) or abs(sum(ratios) - 1.0) > 1e-6:
            raise ValidationError(
                "assemble zone ratios must be >= 0 and sum to 1, got critical "
                f"{self.critical_ratio} + middle {self.middle_ratio} + recency {self.recency_ratio} = {sum(ratios):g}",
                field="assemble.critical_ratio")
