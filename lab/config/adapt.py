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


@dataclass(frozen=True)
class FinetuneConfig:
    """Fine-tuning the store's sentence-transformers model itself on gold (`lab adapt --kind
    finetune`): sentence-transformers' trainer with MultipleNegativesRankingLoss over (question,
    gold memory, hard negatives) triplets; every memory is embedded again by the model written."""

    epochs: int = setting(1, low=1, doc="passes over the training triplets")
    batch_size: int = setting(32, low=2, doc="triplets per step; the other triplets' memories are in-batch negatives")
    learning_rate: float = setting(2e-5, above=0, doc="AdamW's learning rate")
    hard_negatives: int = setting(1, low=0, high=8, doc="per triplet: the base model's best-ranked non-gold memories "
                                                      "of the question's own namespace")
    warmup_ratio: float = setting(0.1, low=0, high=1, doc="share of the steps the learning rate warms up over")
    max_steps: int = setting(0, low=0, doc="stop after this many steps (0: the epochs decide; tests take a few)")
    seed: int = setting(0, doc="the training seed")

    def __post_init__(self) -> None:
        check_declared(self, "finetune.")
