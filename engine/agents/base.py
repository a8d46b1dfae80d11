"""What the Coder and the Judge share: making one recorded call through an LLMClient."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from cudaforge.engine.llm.client import LLMClient
from cudaforge.engine.llm.types import CallRecord, LLMError, LLMResult, Message, Usage, UsageLedger

RecordHook = Callable[[CallRecord], None]


def total_usage(records: Sequence[CallRecord]) -> Usage:
    total = Usage()
    for r in records:
        total = total + r.usage
    return total


def total_cost(records: Sequence[CallRecord]) -> float | None:
    """Sum of costs; None if any call that used tokens has no price (unknown, not zero)."""
    if any(r.cost_usd is None and r.usage.total_tokens for r in records):
        return None
    return sum(r.cost_usd or 0.0 for r in records)


class Agent:
    """Runs calls, records each one at once (ledger + hook), so nothing is lost if the session
    is cancelled between the first call and a retry."""

    name = "agent"

    def __init__(
        self,
        client: LLMClient,
        *,
        gpu_summary: str = "",
        ledger: UsageLedger | None = None,
        on_record: RecordHook | None = None,
    ) -> None:
        self.client = client
        self.gpu_summary = gpu_summary
        self.ledger = ledger
        self.on_record = on_record

    def notice(self) -> str:
        """Who receives the task and the kernel source (shown before the first call)."""
        return self.client.notice(self.name.capitalize())

    async def _call(
        self,
        system: str,
        messages: Sequence[Message],
        *,
        purpose: str,
        round: int | None,
        attempt: int,
    ) -> tuple[LLMResult, CallRecord | None]:
        """One call; refused without a request when the ledger's dollar cap is already reached."""
        if self.ledger is not None and self.ledger.exceeded():
            spent = self.ledger.spent_usd
            return (
                LLMError(
                    kind="budget",
                    message=f"the session's dollar cap (${self.ledger.cap_usd:.2f}) is reached "
                    f"(${spent:.2f} spent); no call was made",
                    provider=self.client.provider,
                    model=self.client.model,
                ),
                None,
            )
        started = time.time()
        result = await self.client.complete(system, messages)
        record = CallRecord.from_result(
            result,
            agent=self.name,
            purpose=purpose,
            round=round,
            attempt=attempt,
            system=system,
            messages=messages,
            started_at=started,
        )
        if self.ledger is not None:
            self.ledger.add(record)
        if self.on_record is not None:
            self.on_record(record)
        return result, record
