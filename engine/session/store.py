"""RunStore: one folder per session, written so that a crash at any moment loses at most the step
in flight, and so that `resume` and `--open` can rebuild everything from it.

Layout (schema 1):
    manifest.json         schema, run id, task path and hash, merged config, GPU, versions
    task.py               the task as it was when the run started (resume uses this copy)
    state.json            status (running | stopped | finished), stop reason, best round, active seconds
    calls.jsonl           every LLM call (prompt, reply, usage, cost), appended and fsynced as it ends
    rounds/NNN/round.json kind, parent, started/finished, summary
(each file's record type is in engine/session/records.py)
    rounds/NNN/coder-K.json      the K-th Coder draft of the round (regenerate makes K+1)
    rounds/NNN/candidate.py      the approved (or edited) candidate; candidate.json says who wrote it
    rounds/NNN/eval.json         the EvalResult
    rounds/NNN/profile.json      ProfileResult and analysis (correct candidates, CUDA only)
    rounds/NNN/judge-K.json      the K-th Judge draft
    rounds/NNN/recommendation.json  the recommendation that goes to the next Coder (maybe edited)
    rounds/NNN/decisions.json    every decision at the round's decision points, in order
    rounds/NNN/hold.json         why a passing result is held for review (engine/hold.py)
    rounds/NNN/rerun.json        the held candidate's re-run in a fresh worker (an EvalResult)
    rulings.jsonl         a person's rulings on held rounds (engine/session/rulings.py), appended
Every JSON file is written atomically (temp file + rename); a live session holds `run.lock`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import secrets
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from cudaforge.engine import __version__
from cudaforge.engine.errors import UsageError
from cudaforge.engine.fsutil import append_json_line, atomic_write_json, atomic_write_text, read_json
from cudaforge.engine.hold import HoldReason
from cudaforge.engine.llm.types import CallRecord, known_cost
from cudaforge.engine.profiling.analysis import Analysis
from cudaforge.engine.profiling.result import ProfileResult
from cudaforge.engine.results import EvalResult
from cudaforge.engine.session.records import (
    SCHEMA_VERSION,
    CandidateMeta,
    CoderDraft,
    DecisionEntry,
    GpuInfo,
    JudgeDraft,
    Manifest,
    Recommendation,
    RoundMeta,
    State,
    round_status,
)
from cudaforge.engine.session.rulings import Ruling, RulingKind, append_ruling, new_ruling, read_rulings
from cudaforge.engine.task import Task

_T = TypeVar("_T", ProfileResult, Analysis)


def make_run_id(task_name: str, now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now if now is not None else time.time()))
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in task_name)[:40] or "task"
    return f"{stamp}-{safe}-{secrets.token_hex(2)}"


def environment_versions() -> dict[str, Any]:
    """Versions that decide whether two results are comparable; torch is read without importing CUDA."""
    versions: dict[str, Any] = {"cudaforge": __version__, "python": platform.python_version(),
                                "platform": platform.platform()}
    try:
        from importlib.metadata import version

        versions["torch"] = version("torch")
    except Exception:
        versions["torch"] = None
    return versions


@dataclass(frozen=True)
class RoundRecord:
    """Everything stored about one round, as loaded from its folder."""

    round: int
    kind: str
    parent: int | None
    started_at: float = 0.0
    finished: bool = False
    candidate: str | None = None
    format: str | None = None
    origin: str | None = None
    explanation: str = ""
    coder_error: str | None = None
    result: EvalResult | None = None
    profile: ProfileResult | None = None
    analysis: Analysis | None = None
    recommendation: str | None = None
    judge_mode: str | None = None
    judge_source: str | None = None
    subject_round: int | None = None
    decisions: tuple[DecisionEntry, ...] = ()
    coder_drafts: int = 0
    judge_drafts: int = 0
    cost_usd: float | None = 0.0  # None: a call of the round has no price (unknown, not free)
    tokens: int = 0
    hold: tuple[HoldReason, ...] = ()  # why the result is held for review (empty: it is not)
    ruling: Ruling | None = None
    rerun: EvalResult | None = None

    @property
    def pending(self) -> bool:
        """Held for review and not yet ruled on."""
        return bool(self.hold) and self.ruling is None

    @property
    def counts(self) -> bool:
        """Accepted and not held back: may be the best, seed a round, count as fast."""
        if self.result is None or not self.result.accepted:
            return False
        return not self.hold or (self.ruling is not None and self.ruling.ruling == "accept")

    @property
    def outcome(self) -> str:
        return round_status(self.result, coder_error=self.coder_error, finished=self.finished)

    @property
    def speedup(self) -> float | None:
        return self.result.speedup if self.result is not None and self.result.accepted else None


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    path: Path
    task_name: str
    status: str  # running | interrupted | stopped | finished | unreadable
    rounds: int
    best_speedup: float | None
    cost_usd: float | None  # None: some call has no price (unknown, not free)
    created: float
    stop_reason: str = ""
    size_bytes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class RunStore:
    """Reads and writes one run folder. Open read-only to browse a run another process may own."""

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self._lock_fd: int | None = None

    # ---- creation and opening -------------------------------------------------------------
    @classmethod
    def create(cls, root: str | Path, task: Task, *, config: dict[str, Any], mode: str,
               gpu: GpuInfo | None = None, run_id: str | None = None) -> RunStore:
        root = Path(root)
        run_id = run_id or make_run_id(task.name)
        path = root / run_id
        if path.exists():
            raise UsageError(f"run folder {path} already exists")
        path.mkdir(parents=True)
        store = cls(path)
        store.lock()
        atomic_write_text(path / "task.py", task.source)
        atomic_write_json(path / "manifest.json", Manifest(
            schema=SCHEMA_VERSION, run_id=run_id, created=time.time(), task_path=str(task.path), task_name=task.name,
            task_sha256=task.sha256, mode=mode, config=config, gpu=gpu, versions=environment_versions(),
        ).to_dict())
        store.save_state(status="running")
        return store

    @classmethod
    def open(cls, path: str | Path, *, read_only: bool = False) -> RunStore:
        path = Path(path)
        manifest = path / "manifest.json"
        if not manifest.is_file():
            raise UsageError(f"{path}: not a run folder (no manifest.json)")
        try:
            data = read_json(manifest)
        except (OSError, ValueError) as exc:
            raise UsageError(f"{manifest}: unreadable run manifest ({exc})") from None
        schema = data.get("schema")
        if schema != SCHEMA_VERSION:
            raise UsageError(f"{manifest}: run folder schema {schema!r}; this cudaforge reads schema "
                             f"{SCHEMA_VERSION}")
        store = cls(path, read_only=read_only)
        if not read_only:
            store.lock()
        return store

    def lock(self) -> None:
        """Hold run.lock while a session drives this folder: two live sessions never share a run."""
        if self._lock_fd is not None:
            return
        fd = os.open(self.path / "run.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UsageError(f"{self.path}: another cudaforge process is driving this run") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_fd = fd

    def close(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)
            self._lock_fd = None

    def is_live(self) -> bool:
        """True while some process holds the run lock."""
        lock = self.path / "run.lock"
        if not lock.exists():
            return False
        fd = os.open(lock, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    # ---- top-level files ----------------------------------------------------------------------
    @property
    def run_id(self) -> str:
        return self.manifest.run_id or self.path.name

    @property
    def manifest(self) -> Manifest:
        return Manifest.from_dict(read_json(self.path / "manifest.json"))

    def task_copy(self) -> Path:
        return self.path / "task.py"

    @property
    def state(self) -> State:
        try:
            return State.from_dict(read_json(self.path / "state.json"))
        except (OSError, ValueError):
            return State()

    def save_state(self, **values: Any) -> None:
        """Update the named State fields; keys on disk this version does not know are kept."""
        self._writable()
        unknown = set(values) - State.keys()
        if unknown:
            raise TypeError(f"State has no field {', '.join(sorted(unknown))}")
        path = self.path / "state.json"
        try:
            state = read_json(path) if path.exists() else {}
        except (OSError, ValueError):
            state = {}
        state.update(values)
        state["updated"] = time.time()
        atomic_write_json(path, state)

    def append_call(self, record: CallRecord) -> None:
        """Append one call and fsync: a completed call is never lost (or repeated) after a crash."""
        self._writable()
        append_json_line(self.path / "calls.jsonl", record.to_dict())

    def reconcile_calls(self) -> int:
        """Append to calls.jsonl the call records of stored agent drafts that it lacks (a crash between
        storing a draft and appending its calls); returns how many were added."""
        known = {c.call_id for c in self.calls()}
        added = 0
        for n in self.round_numbers():
            for path in sorted(self.round_dir(n).glob("*-*.json")):
                if not path.stem.startswith(("coder-", "judge-")):
                    continue
                with contextlib.suppress(OSError, ValueError):
                    raw_draft = read_json(path)
                    draft = (CoderDraft if path.stem.startswith("coder-") else JudgeDraft).from_dict(raw_draft)
                    for raw in draft.records:
                        if isinstance(raw, dict) and raw.get("call_id") and raw["call_id"] not in known:
                            with contextlib.suppress(TypeError, KeyError, ValueError):
                                self.append_call(CallRecord.from_dict(raw))
                                known.add(raw["call_id"])
                                added += 1
        return added

    def calls(self) -> list[CallRecord]:
        path = self.path / "calls.jsonl"
        if not path.exists():
            return []
        records = []
        for line in path.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError, TypeError, KeyError):  # a torn last line from a crash
                records.append(CallRecord.from_dict(json.loads(line)))
        return records

    # ---- rounds ---------------------------------------------------------------------------------
    def round_dir(self, n: int) -> Path:
        return self.path / "rounds" / f"{n:03d}"

    def round_numbers(self) -> list[int]:
        folder = self.path / "rounds"
        if not folder.is_dir():
            return []
        return sorted(int(p.name) for p in folder.iterdir() if p.is_dir() and p.name.isdigit())

    def get(self, n: int, name: str) -> Any:
        """A stored JSON document of round n, or None when that step has not completed."""
        path = self.round_dir(n) / f"{name}.json"
        if not path.exists():
            return None
        try:
            return read_json(path)
        except (OSError, ValueError):
            return None  # cannot happen with atomic writes, except by hand-editing

    def put(self, n: int, name: str, data: Any) -> None:
        self._writable()
        atomic_write_json(self.round_dir(n) / f"{name}.json", data)

    # ---- typed round records (engine/session/records.py) ---------------------------------------
    def round_meta(self, n: int) -> RoundMeta | None:
        """rounds/NNN/round.json, or None before the round started."""
        data = self.get(n, "round")
        return None if data is None else RoundMeta.from_dict({"round": n, **data})

    def put_round_meta(self, meta: RoundMeta) -> None:
        self.put(meta.round, "round", meta.to_dict())

    def start_round(self, n: int, kind: str, parent: int | None) -> None:
        if self.round_meta(n) is None:
            self.put_round_meta(RoundMeta(round=n, kind=kind, parent=parent, started_at=time.time()))

    def finish_round(self, n: int, *, outcome: str, speedup: float | None, progress: dict[str, Any],
                     repeat_of: int | None = None) -> None:
        meta = self.round_meta(n) or RoundMeta(round=n)
        self.put_round_meta(replace(meta, outcome=outcome, speedup=speedup, progress=progress, repeat_of=repeat_of,
                                    finished=True,
                                    finished_at=time.time()))

    def coder_draft(self, n: int, k: int) -> CoderDraft | None:
        data = self.get(n, f"coder-{k}")
        return None if data is None else CoderDraft.from_dict(data)

    def put_coder_draft(self, n: int, k: int, draft: CoderDraft) -> None:
        self.put(n, f"coder-{k}", draft.to_dict())

    def judge_draft(self, n: int, k: int) -> JudgeDraft | None:
        data = self.get(n, f"judge-{k}")
        return None if data is None else JudgeDraft.from_dict(data)

    def put_judge_draft(self, n: int, k: int, draft: JudgeDraft) -> None:
        self.put(n, f"judge-{k}", draft.to_dict())

    def recommendation(self, n: int) -> Recommendation | None:
        data = self.get(n, "recommendation")
        return None if data is None else Recommendation.from_dict(data)

    def put_recommendation(self, n: int, rec: Recommendation) -> None:
        self.put(n, "recommendation", rec.to_dict())

    def candidate_meta(self, n: int) -> CandidateMeta | None:
        data = self.get(n, "candidate")
        return None if data is None else CandidateMeta.from_dict(data)

    def put_candidate(self, n: int, source: str, *, format: str, origin: str, explanation: str = "") -> None:
        self._writable()
        atomic_write_text(self.round_dir(n) / "candidate.py", source)
        self.put(n, "candidate", CandidateMeta(format=format, origin=origin, explanation=explanation).to_dict())

    def candidate(self, n: int) -> str | None:
        path = self.round_dir(n) / "candidate.py"
        meta = self.get(n, "candidate")
        if meta is None or not path.exists():
            return None
        return path.read_text(encoding="utf-8")

    def decisions(self, n: int) -> list[DecisionEntry]:
        return [DecisionEntry.from_dict(e) for e in self.get(n, "decisions") or [] if isinstance(e, dict)]

    def add_decision(self, n: int, entry: DecisionEntry) -> None:
        items = [e.to_dict() for e in self.decisions(n)]
        items.append(replace(entry, at=time.time()).to_dict())
        self.put(n, "decisions", items)

    def hold(self, n: int) -> tuple[HoldReason, ...]:
        data = self.get(n, "hold") or {}
        return tuple(HoldReason(r["kind"], r["message"]) for r in data.get("reasons", []))

    def put_hold(self, n: int, reasons: tuple[HoldReason, ...]) -> None:
        self.put(n, "hold", {"reasons": [{"kind": r.kind, "message": r.message} for r in reasons]})

    def rerun(self, n: int) -> EvalResult | None:
        data = self.get(n, "rerun")
        return EvalResult.from_dict(data) if data else None

    def rulings(self) -> dict[int, Ruling]:
        return read_rulings(self.path)

    def add_ruling(self, n: int, ruling: RulingKind, reason: str = "", who: str | None = None) -> Ruling:
        """Record a ruling on held round n; a round that is not held, or already ruled, is a UsageError."""
        self._writable()
        if not self.hold(n):
            raise UsageError(f"round {n} is not held for review")
        done = self.rulings().get(n)
        if done is not None:
            raise UsageError(f"round {n} is already ruled: {done.ruling} by {done.who}")
        made = new_ruling(n, ruling, reason, who)
        append_ruling(self.path, made)
        return made

    def profile(self, n: int) -> tuple[ProfileResult | None, Analysis | None] | None:
        """The round's stored ncu profile and its analysis, typed; None when the round has none stored."""
        prof = self.get(n, "profile")
        if prof is None:
            return None
        return _typed(ProfileResult, prof.get("profile")), _typed(Analysis, prof.get("analysis"))

    def load_round(self, n: int, calls: list[CallRecord] | None = None,
                   rulings: dict[int, Ruling] | None = None) -> RoundRecord:
        meta = self.round_meta(n) or RoundMeta(round=n)
        cand = self.candidate_meta(n) or CandidateMeta()
        ev = self.get(n, "eval")
        rec = self.recommendation(n) or Recommendation()
        drafts = sorted(self.round_dir(n).glob("coder-*.json"))
        coder_error = None
        if drafts and self.candidate(n) is None:
            last = CoderDraft.from_dict(self.get(n, drafts[-1].stem) or {})
            coder_error = last.error_message
        round_calls = [c for c in (calls if calls is not None else self.calls()) if c.round == n]
        profile, analysis = self.profile(n) or (None, None)
        return RoundRecord(
            round=n, kind=str(meta.kind), parent=meta.parent,
            started_at=float(meta.started_at or 0.0), finished=bool(meta.finished),
            candidate=self.candidate(n), format=cand.format, origin=cand.origin,
            explanation=cand.explanation or "", coder_error=coder_error,
            result=EvalResult.from_dict(ev) if ev else None,
            profile=profile, analysis=analysis,
            recommendation=rec.text, judge_mode=rec.mode, judge_source=rec.source,
            subject_round=rec.subject_round, decisions=tuple(self.decisions(n)),
            coder_drafts=len(drafts), judge_drafts=len(list(self.round_dir(n).glob("judge-*.json"))),
            cost_usd=known_cost(round_calls),
            tokens=sum(c.usage.total_tokens for c in round_calls),
            hold=self.hold(n), ruling=(rulings if rulings is not None else self.rulings()).get(n),
            rerun=self.rerun(n),
        )

    def rounds(self) -> list[RoundRecord]:
        calls, rulings = self.calls(), self.rulings()
        return [self.load_round(n, calls, rulings) for n in self.round_numbers()]

    def summary(self) -> RunSummary:
        return summarize_run(self.path)

    def _writable(self) -> None:
        if self.read_only:
            raise UsageError(f"{self.path}: opened read-only")


def _typed(cls: type[_T], data: dict[str, Any] | None) -> _T | None:
    """A stored profile or analysis back to its dataclass; None when absent or unreadable (an old
    or damaged run folder shows "no profile" rather than failing to open)."""
    if not data:
        return None
    try:
        return cls.from_dict(data)
    except (TypeError, ValueError, KeyError):
        return None


def _folder_size(path: Path) -> int:
    total = 0
    for p in path.rglob("*"):
        with contextlib.suppress(OSError):
            if p.is_file():
                total += p.stat().st_size
    return total


def summarize_run(path: Path) -> RunSummary:
    store = RunStore(path, read_only=True)
    try:
        manifest = store.manifest
    except (OSError, ValueError):
        return RunSummary(path.name, path, "?", "unreadable", 0, None, 0.0, 0.0)
    state = store.state
    status = state.status or "running"
    if status == "running" and not store.is_live():
        status = "interrupted"
    calls = store.calls()
    return RunSummary(
        run_id=manifest.run_id or path.name, path=path, task_name=manifest.task_name or "?",
        status=status, rounds=len(store.round_numbers()), best_speedup=state.best_speedup,
        cost_usd=known_cost(calls), created=float(manifest.created or 0.0),
        stop_reason=str(state.stop_reason or ""), size_bytes=_folder_size(path),
    )


def iter_runs(root: str | Path) -> Iterator[Path]:
    root = Path(root)
    if not root.is_dir():
        return
    for p in sorted(root.iterdir()):
        if (p / "manifest.json").is_file():
            yield p


def list_runs(root: str | Path) -> list[RunSummary]:
    return sorted((summarize_run(p) for p in iter_runs(root)), key=lambda s: s.created)


def prune_runs(root: str | Path, *, keep: int | None = None, older_than_days: float | None = None,
               dry_run: bool = False) -> list[Path]:
    """Delete old run folders (never a live one): beyond the newest `keep`, or older than N days."""
    runs = list_runs(root)
    doomed: list[Path] = []
    now = time.time()
    for i, run in enumerate(reversed(runs)):  # newest first
        if run.status == "running":
            continue
        too_many = keep is not None and i >= keep
        too_old = older_than_days is not None and now - run.created > older_than_days * 86400
        if too_many or too_old:
            doomed.append(run.path)
    if not dry_run:
        for p in doomed:
            shutil.rmtree(p, ignore_errors=True)
    return doomed


def prune_cache(cache_dir: str | Path, *, older_than_days: float, dry_run: bool = False) -> tuple[int, int]:
    """Delete cache entries (build folders, NVRTC blobs, results) not used for N days.
    Returns (entries removed, bytes freed). Entries are the children of each cache kind's folder."""
    cache_dir = Path(cache_dir)
    if not cache_dir.is_dir():
        return 0, 0
    cutoff = time.time() - older_than_days * 86400
    removed = freed = 0
    for kind in cache_dir.iterdir():
        if not kind.is_dir():
            continue
        for entry in kind.iterdir():
            try:
                mtime = max((p.stat().st_mtime for p in [entry, *entry.rglob("*")] if p.exists()),
                            default=entry.stat().st_mtime) if entry.is_dir() else entry.stat().st_mtime
            except OSError:
                continue
            if mtime >= cutoff or entry.name.endswith(".lock"):
                continue
            size = _folder_size(entry) if entry.is_dir() else entry.stat().st_size
            if not dry_run:
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
            removed += 1
            freed += size
    return removed, freed
