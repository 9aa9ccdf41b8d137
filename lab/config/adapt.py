"""How a query adapter is trained (``AdaptConfig``: `lab adapt`'s options, lab.tune.adapt)."""
from __future__ import annotations

from dataclasses import dataclass

from lab.fields import check_declared, setting

ADAPTER_KINDS: tuple[str, ...] = ("lowrank", "linear")


@dataclass(frozen=True)
class AdaptConfig:
    """A query adapter's training: W = I + U V^T (``lowrank``) or a whole W (``linear``), pulled
    toward the identity, trained full-batch with a contrastive loss over each question's namespace."""

    kind: str = setting("lowrank", choices=ADAPTER_KINDS, doc="W = I + U V^T of rank `rank`, or a whole d x d W")
    rank: int = setting(32, low=1, doc="the low-rank adapter's rank")
    # 0.1: of 0.01, 0.03, 0.1, 0.3 and 1 on LoCoMo dev, leave one conversation out
    # (benchmarks/adapt_cv.py chooses it inside each fold; benchmarks/results/adapt_cv.json)
    l2: float = setting(0.1, low=0, doc="the penalty on ||W - I||^2 beside the mean loss")
    steps: int = setting(200, low=1, doc="full-batch Adam steps")
    learning_rate: float = setting(0.005, above=0, doc="Adam's learning rate")
    temperature: float = setting(0.05, above=0, doc="the contrastive softmax's temperature (cosines / it)")
    seed: int = setting(0, doc="the training seed (the same gold and seed give the same weights)")

    def __post_init__(self) -> None:
        check_declared(self, "adapt.")
