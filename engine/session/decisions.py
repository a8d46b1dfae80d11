"""Decision points and the drivers that answer them.

At each decision point the Session awaits `driver.decide(request)`. A driver is anything with that
coroutine: the TUI (answers come from the decision bar), a terminal prompt, a scripted list in
tests, or `AutoApprove`. In auto mode the Session approves without asking the driver; in manual
mode the person must supply every candidate (`edit` with the source).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from cudaforge.engine.session.events import DecisionAction, DecisionNeeded


@dataclass(frozen=True)
class Decision:
    action: DecisionAction
    text: str | None = None  # the edited candidate or recommendation (for "edit")
    round: int | None = None  # the round to branch from (for "branch")

    def to_dict(self) -> dict[str, object]:
        return {"action": self.action, "text": self.text, "round": self.round}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Decision:
        action = str(data.get("action", "approve"))
        text = data.get("text")
        rnd = data.get("round")
        return cls(action, text if isinstance(text, str) else None,  # type: ignore[arg-type]
                   rnd if isinstance(rnd, int) else None)


APPROVE = Decision("approve")
STOP = Decision("stop")


class Driver(Protocol):
    async def decide(self, request: DecisionNeeded) -> Decision: ...


class AutoApprove:
    """Approves everything (headless `--auto`)."""

    async def decide(self, request: DecisionNeeded) -> Decision:
        return APPROVE


class QueueDriver:
    """Answers come from elsewhere (a UI, another task): `answer()` puts, the session awaits."""

    def __init__(self) -> None:
        self.requests: asyncio.Queue[DecisionNeeded] = asyncio.Queue()
        self._answers: asyncio.Queue[Decision] = asyncio.Queue()
        self.pending: DecisionNeeded | None = None

    async def decide(self, request: DecisionNeeded) -> Decision:
        self.pending = request
        await self.requests.put(request)
        try:
            return await self._answers.get()
        finally:
            self.pending = None

    def answer(self, decision: Decision) -> None:
        self._answers.put_nowait(decision)


class ScriptedDriver:
    """Answers from a list in order, then approves (tests and recorded demos)."""

    def __init__(self, decisions: Iterable[Decision]) -> None:
        self.decisions = list(decisions)
        self.seen: list[DecisionNeeded] = []

    async def decide(self, request: DecisionNeeded) -> Decision:
        self.seen.append(request)
        return self.decisions.pop(0) if self.decisions else APPROVE
