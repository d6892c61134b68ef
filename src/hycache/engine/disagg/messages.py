"""What the prefill (driving) process tells the decode process, and what comes back.

prefill -> decode: ``("setup", DecodeConfig, InstanceMeta)``, ``("request", EngineRequest)``,
``("close", None)``. decode -> prefill: ``("meta", InstanceMeta)`` or ``("error", text)``
after a setup; ``("pull", Pull)`` then, after the payload, ``("result", DecodeOutcome)`` per
request (only the result when the decode side could not admit it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hycache.engine.disagg.base import TransferReport

if TYPE_CHECKING:
    import torch

    from hycache.engine.request import EngineRequest, RequestResult


@dataclass(frozen=True)
class DecodeConfig:
    """The decode instance: its checkpoint, dtype, preset, budget and knobs."""

    model_dir: str
    dtype: str
    preset: str
    capacity: int
    knobs: dict[str, object] = field(default_factory=dict)
    check_owners: bool = True
    #: ``no-tail-zero``: landing pages pre-filled with another request's KV, tails kept
    inject: str | None = None


@dataclass(frozen=True)
class DecodeOutcome:
    """One request as the decode instance ran it."""

    status: str
    error: str | None
    output: tuple[int, ...]
    logits: tuple[torch.Tensor, ...]
    hit: int
    violations: tuple[str, ...]
    in_place_tokens: int
    report: TransferReport | None
    #: the decode instance's fault counters after the request (cumulative)
    stored: int = 0
    fired: int = 0

    @staticmethod
    def of(
        result: RequestResult, report: TransferReport | None, stored: int, fired: int
    ) -> DecodeOutcome:
        return DecodeOutcome(
            result.status,
            result.error,
            tuple(result.output),
            tuple(result.logits),
            result.hit,
            tuple(result.violations),
            result.in_place_tokens,
            report,
            stored,
            fired,
        )

    @staticmethod
    def failed(error: str) -> DecodeOutcome:
        return DecodeOutcome("failed", error, (), (), 0, (), 0, None)

    def as_result(self, request: EngineRequest) -> RequestResult:
        from hycache.engine.request import RequestResult

        result = RequestResult(request, self.status, hit=self.hit, error=self.error)
        result.output = list(self.output)
        result.logits = list(self.logits)
        result.violations = list(self.violations)
        result.in_place_tokens = self.in_place_tokens
        return result
