"""A person's rulings on held rounds (engine/hold.py), kept in the run folder's `rulings.jsonl`.

One typed `Ruling` a line, appended and fsynced (engine/fsutil.py): round, ruling (accept | reject),
reason, who, time. The first ruling on a round is the one that counts (a ruled round is no longer
held, so no second one is taken). A resumed session reads them back, and so do `cudaforge rule`,
`cudaforge export` and the workbench's Review pane.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cudaforge.engine.fsutil import append_json_line

RULINGS_FILE = "rulings.jsonl"
RulingKind = Literal["accept", "reject"]


@dataclass(frozen=True)
class Ruling:
    round: int
    ruling: RulingKind
    reason: str = ""
    who: str = ""
    time: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"round": self.round, "ruling": self.ruling, "reason": self.reason, "who": self.who,
                "time": self.time}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Ruling:
        ruling = data["ruling"]
        if ruling not in ("accept", "reject"):
            raise ValueError(f"unknown ruling {ruling!r}")
        return cls(round=int(data["round"]), ruling=ruling, reason=str(data.get("reason", "")),
                   who=str(data.get("who", "")), time=float(data.get("time", 0.0)))


def who_am_i() -> str:
    """The person making a ruling, as the system names them."""
    with contextlib.suppress(Exception):
        return getpass.getuser()
    return "person"


def new_ruling(round: int, ruling: RulingKind, reason: str = "", who: str | None = None) -> Ruling:
    return Ruling(round, ruling, " ".join(reason.split())[:300], who or who_am_i(), time.time())


def read_rulings(run_dir: str | Path) -> dict[int, Ruling]:
    """Each round's ruling (the first one made), skipping a torn last line from a crash."""
    path = Path(run_dir) / RULINGS_FILE
    out: dict[int, Ruling] = {}
    if not path.exists():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError, TypeError, KeyError):
            r = Ruling.from_dict(json.loads(line))
            out.setdefault(r.round, r)
    return out


def append_ruling(run_dir: str | Path, ruling: Ruling) -> None:
    append_json_line(Path(run_dir) / RULINGS_FILE, ruling.to_dict())
