"""The routed-expert shape of a mixture-of-experts model (``MoEShape``).

A ``ModelSpec`` keeps its active MLP parameters per token; for a MoE model it also keeps this
shape, so the cost model can count the expert weights a batch touches (all experts exist, each
token reads ``k`` of them) without knowing where the spec came from.
"""

from __future__ import annotations

from dataclasses import dataclass

from hycache.errors import SpecError


@dataclass(frozen=True, kw_only=True)
class MoEShape:
    """The routed-expert part of a model's MLPs.

    ``experts``: routed experts per MoE layer (E); ``experts_per_token``: routed experts each
    token uses (k); ``routed_params_per_token``: routed-expert parameters one token multiplies,
    summed over all MoE layers (``moe_layers * k * params_per_expert``; shared experts and
    routers are not routed and stay in the dense part). SpecError for a non-positive field or
    ``k > E``.
    """

    experts: int
    experts_per_token: int
    routed_params_per_token: int

    def __post_init__(self) -> None:
        for field in ("experts", "experts_per_token", "routed_params_per_token"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise SpecError(
                    f"MoEShape: '{field}' must be a positive int, got {value!r}", field=field
                )
        if self.experts_per_token > self.experts:
            raise SpecError(
                f"MoEShape: experts_per_token {self.experts_per_token} > experts {self.experts}",
                field="experts_per_token",
            )

    @property
    def routed_params_total(self) -> float:
        """All routed-expert parameters: ``routed_params_per_token * E / k``."""
        return self.routed_params_per_token * self.experts / self.experts_per_token

    def coverage(self, tokens: int) -> float:
        """Expected share of experts ``tokens`` tokens touch: ``1 - (1 - k/E) ** tokens``."""
        if tokens <= 0:
            return 0.0
        return 1.0 - (1.0 - self.experts_per_token / self.experts) ** tokens
