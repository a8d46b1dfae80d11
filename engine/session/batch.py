"""Batch runs: many tasks (a folder such as a KernelBench level), one session each, in auto mode.

Sessions run concurrently so that LLM calls of different tasks overlap; evaluations of one GPU
never overlap in their GPU phases (the worker's per-device file lock), and on the CPU device one
evaluation runs at a time. Tasks are spread over the visible GPUs. `batch.json` is rewritten
(atomically) as each task finishes, so a resumed batch skips finished tasks and resumes the
unfinished sessions from their run folders. The dollar cap `[budget] batch_dollars` is shared.
With `[batch] backend = "ray"` the evaluations and profiles run on a Ray cluster instead
(engine/session/ray_backend.py); everything else stays here.
"""

from __future__ import annotations

import asyncio
import math
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from cudaforge.engine.config import Config, config_from_data, config_to_data
from cudaforge.engine.errors import CudaforgeError, UsageError
from cudaforge.engine.fsutil import atomic_write_json, read_json
from cudaforge.engine.llm.prices import format_cost
from cudaforge.engine.llm.types import Usage, UsageLedger, known_cost
from cudaforge.engine.session.decisions import AutoApprove
from cudaforge.engine.session.events import Event
from cudaforge.engine.session.factory import create_session, llm_configured, resume_session
from cudaforge.engine.session.store import RunStore, RunSummary, list_runs
from cudaforge.engine.task import load_task

FAST_P = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
BATCH_SCHEMA = 1
# Tokens per round assumed by the cost estimate (an estimate: real prompts grow with the task).
EST_CODER = Usage(input_tokens=7000, output_tokens=5000)
EST_JUDGE = Usage(input_tokens=6000, output_tokens=800)


def find_tasks(targets: Sequence[str | Path]) -> list[Path]:
    """Task files from files and folders (a folder: its *.py files, sorted, not recursive)."""
    tasks: list[Path] = []
    for target in targets:
        path = Path(target)
        if path.is_dir():
            found = sorted(p for p in path.glob("*.py") if not p.name.startswith("_"))
            if not found:
                found = sorted(p for p in path.glob("*/task.py"))  # our examples/ layout
            tasks.extend(found)
        elif path.is_file():
            tasks.append(path)
        else:
            raise UsageError(f"{path}: no such task file or folder")
    if not tasks:
        raise UsageError("no task files found in " + ", ".join(str(t) for t in targets))
    return tasks


def estimate_cost(config: Config, n_tasks: int) -> tuple[float | None, str]:
    """(dollars or None if a model is unpriced, a one-line explanation). An upper-end estimate."""
    from cudaforge.engine.llm.prices import price_of

    rounds = int(config.get("session", "rounds"))
    parts, total = [], 0.0
    for role, usage in (("coder", EST_CODER), ("judge", EST_JUDGE)):
        if not llm_configured(config, role):
            continue
        table = config.section(role)
        price = price_of(str(table.get("model", "")), usage, provider=table.get("provider"),
                         base_url=table.get("base_url"))
        if price is None:
            return None, f"{role} model {table.get('model')!r} has no price sheet; cost unknown"
        total += price * rounds * n_tasks
        parts.append(f"{role} ~{usage.input_tokens + usage.output_tokens} tokens/round at ${price:.3f}")
    text = (f"estimate: {n_tasks} tasks x {rounds} rounds; " + "; ".join(parts or ["no LLM calls"])
            + f" = ${total:.2f} (cap ${config.get('budget', 'batch_dollars'):.2f})")
    return total, text


def visible_gpus() -> int:
    """Number of GPUs this process may use, without importing torch (nvidia-smi, CUDA_VISIBLE_DEVICES)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return len([d for d in env.split(",") if d.strip() and d.strip() != "-1"])
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


@dataclass(frozen=True)
class TaskOutcome:
    task: str
    status: str  # pending | running | done | failed | skipped (does not fit) | stopped (a failure every task meets)
    run_dir: str | None = None
    correct: bool = False
    best_speedup: float | None = None
    best_round: int | None = None
    rounds: int = 0
    tokens: int = 0
    dollars: float | None = 0.0  # None: a call has no price (unknown; null in summary.json)
    wall_s: float = 0.0
    stop_reason: str = ""
    message: str = ""
    gpu: int | None = None
    best_sol: float | None = None  # the best round's fraction of speed of light (engine/speed_of_light.py)
    held: int = 0  # rounds held for review without a ruling: never fast until a person accepts them


@dataclass(frozen=True)
class BatchSummary:
    tasks: int
    correct: int
    fast_p: dict[str, float]
    geomean_speedup: float | None
    geomean_sol: float | None  # geomean fraction of speed of light over the correct tasks that have one
    held: int  # rounds held for review, all tasks
    tokens: int
    dollars: float | None  # None when any task's cost is unknown
    wall_s: float
    rows: tuple[TaskOutcome, ...] = field(default_factory=tuple)

    @property
    def correct_pct(self) -> float:
        return 100.0 * self.correct / self.tasks if self.tasks else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"tasks": self.tasks, "correct": self.correct, "correct_pct": self.correct_pct,
                "fast_p": self.fast_p, "geomean_speedup": self.geomean_speedup, "geomean_sol": self.geomean_sol,
                "held": self.held, "tokens": self.tokens,
                "dollars": self.dollars, "wall_s": self.wall_s, "rows": [asdict(r) for r in self.rows]}


def summarize(rows: Sequence[TaskOutcome], wall_s: float) -> BatchSummary:
    """fast_p counts correct tasks with speedup > p (strictly) over all tasks; failures are not fast, nor is
    a correct task without a speed claim (its timings stayed noisy, or Triton's interpreter timed it)."""
    n = len(rows)
    timed = [r for r in rows if r.correct and r.best_speedup is not None]
    fast = {f"fast_{p:g}": (sum(1 for r in timed if r.best_speedup > p) / n if n else 0.0)  # type: ignore[operator]
            for p in FAST_P}
    logs = [math.log(r.best_speedup) for r in timed if r.best_speedup and r.best_speedup > 0]
    geo = math.exp(sum(logs) / len(logs)) if logs else None
    sols = [math.log(r.best_sol) for r in timed if r.best_sol and r.best_sol > 0]
    geo_sol = math.exp(sum(sols) / len(sols)) if sols else None
    return BatchSummary(n, sum(1 for r in rows if r.correct), fast, geo, geo_sol, sum(r.held for r in rows),
                        sum(r.tokens for r in rows), _total(r.dollars for r in rows), wall_s, tuple(rows))


def _total(costs: Iterable[float | None]) -> float | None:
    """A sum that stays unknown (None) once any part is."""
    values = list(costs)
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def format_summary(summary: BatchSummary) -> str:
    lines = [f"{'task':<28} {'status':<8} {'correct':<8} {'speedup':>8} {'rounds':>6} {'tokens':>8} {'$':>7} "
             f"{'wall':>7}  stop"]
    for r in summary.rows:
        sp = f"{r.best_speedup:.2f}x" if r.best_speedup is not None else "-"
        lines.append(f"{Path(r.task).parent.name + '/' + Path(r.task).name if Path(r.task).name == 'task.py' else Path(r.task).name:<28.28} "
                     f"{r.status:<8} {'yes' if r.correct else 'no':<8} {sp:>8} {r.rounds:>6} {r.tokens:>8} "
                     f"{format_cost(r.dollars).removeprefix('$'):>7} {r.wall_s:>6.0f}s  "
                     f"{'skipped: does not fit this card' if r.status == 'skipped' else r.stop_reason}")
    geo = f"{summary.geomean_speedup:.3f}x" if summary.geomean_speedup is not None else "-"
    fast = "  ".join(f"{k}={v:.0%}" for k, v in summary.fast_p.items())
    lines.append("")
    lines.append(f"correct {summary.correct}/{summary.tasks} ({summary.correct_pct:.0f}%)  geomean speedup "
                 f"(correct tasks) {geo}")
    sol = f"{summary.geomean_sol:.1%}" if summary.geomean_sol is not None else "-"
    lines.append(f"{fast}  geomean speed of light {sol}")
    if summary.held:
        lines.append(f"{summary.held} round(s) held for review (not fast until accepted: cudaforge rule RUN)")
    lines.append(f"tokens {summary.tokens}  dollars {format_cost(summary.dollars)}  wall {summary.wall_s:.0f} s")
    return "\n".join(lines)


BatchHook = Callable[[str, Event], None]


class Batch:
    """A batch folder: `batch.json` (tasks, config, per-task outcome) and one run folder per task."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = asyncio.Lock()

    @classmethod
    def create(cls, root: str | Path, tasks: Sequence[Path], config: Config) -> Batch:
        for t in tasks:
            load_task(t)  # bad input fails before anything runs
        path = Path(root) / f"batch-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
        path.mkdir(parents=True)
        atomic_write_json(path / "batch.json", {
            "schema": BATCH_SCHEMA, "created": time.time(), "config": config_to_data(config),
            "tasks": [asdict(TaskOutcome(str(Path(t).resolve()), "pending")) for t in tasks],
        })
        return cls(path)

    @classmethod
    def open(cls, path: str | Path) -> Batch:
        path = Path(path)
        if not (path / "batch.json").is_file():
            raise UsageError(f"{path}: not a batch folder (no batch.json)")
        return cls(path)

    @staticmethod
    def is_batch(path: str | Path) -> bool:
        return (Path(path) / "batch.json").is_file()

    def data(self) -> dict[str, Any]:
        return read_json(self.path / "batch.json")

    def rows(self) -> list[TaskOutcome]:
        return [TaskOutcome(**row) for row in self.data()["tasks"]]

    async def update(self, row: TaskOutcome) -> None:
        async with self._lock:
            data = self.data()
            data["tasks"] = [asdict(row) if r["task"] == row.task else r for r in data["tasks"]]
            atomic_write_json(self.path / "batch.json", data)


@dataclass(frozen=True)
class BatchListing:
    """One batch folder as `cudaforge runs` lists it: its tasks, how many are done, and its runs."""

    path: Path
    created: float
    tasks: int
    done: int
    runs: tuple[RunSummary, ...]
    dollars: float | None  # None: some call of the batch has no price

    @property
    def live(self) -> bool:
        return any(r.status == "running" for r in self.runs)


def list_batches(root: str | Path) -> list[BatchListing]:
    """The batch folders under `root`, oldest first, each with the runs inside it."""
    root = Path(root)
    out = []
    for p in sorted(root.iterdir()) if root.is_dir() else ():
        if not Batch.is_batch(p):
            continue
        try:
            data = Batch.open(p).data()
        except (OSError, ValueError):
            continue
        rows = [TaskOutcome(**row) for row in data.get("tasks", [])]
        runs = tuple(list_runs(p))
        out.append(BatchListing(p, float(data.get("created", 0.0)), len(rows), sum(r.status == "done" for r in rows),
                                runs, _total(r.cost_usd for r in runs)))
    return sorted(out, key=lambda b: b.created)


def prune_batches(root: str | Path, *, keep: int | None = None, older_than_days: float | None = None,
                  dry_run: bool = False) -> list[Path]:
    """Delete old batch folders, each with its runs (never one with a live run): beyond the newest
    `keep` batches, or older than N days; the same rule as single runs (store.prune_runs)."""
    doomed: list[Path] = []
    now = time.time()
    for i, b in enumerate(reversed(list_batches(root))):  # newest first
        if b.live:
            continue
        if (keep is not None and i >= keep) or (older_than_days is not None and now - b.created > older_than_days * 86400):
            doomed.append(b.path)
    if not dry_run:
        for p in doomed:
            shutil.rmtree(p, ignore_errors=True)
    return doomed


def rows_to_run(batch: Batch, rounds: int | None) -> tuple[list[TaskOutcome], list[str]]:
    """What `run_batch` (re)starts: every unfinished task, and with `rounds` (resume --rounds N) every
    finished one whose run has fewer rounds, so it is extended. Also why each finished task is not."""
    todo, why_not = [], []
    for row in batch.rows():
        if row.status != "done":
            todo.append(row)
        elif rounds is None:
            why_not.append(f"{Path(row.task).name}: done ({row.rounds} rounds; --rounds N extends it)")
        elif not row.run_dir or not Path(row.run_dir, "manifest.json").is_file():
            why_not.append(f"{Path(row.task).name}: its run folder is gone")
        elif row.rounds >= rounds:
            why_not.append(f"{Path(row.task).name}: already has {row.rounds} rounds (>= {rounds})")
        else:
            todo.append(row)
    return todo, why_not


# A session stopped for one of these (an LLM failure that every task would meet: a missing SDK
# module, a refused key, an unknown model) stops the batch; the unstarted tasks stay pending.
BATCH_STOPPING_REASONS = ("unavailable", "bad_config")


async def run_batch(
    batch: Batch,
    *,
    overrides: dict[str, Any] | None = None,
    on_event: BatchHook | None = None,
    on_task_done: Callable[[TaskOutcome], None] | None = None,
    jobs: int = 4,
    env: dict[str, str] | None = None,
) -> BatchSummary:
    """Run (or resume) every unfinished task of a batch; returns the summary over all tasks."""
    data = batch.data()
    config = config_from_data(data["config"], overrides, source=f"{batch.path}/batch.json")
    ledger = UsageLedger(float(config.get("budget", "batch_dollars")))
    for row in batch.rows():
        if row.run_dir and Path(row.run_dir, "manifest.json").is_file():
            ledger.extend(RunStore(Path(row.run_dir), read_only=True).calls())
    device = config.get("eval", "device")
    n_gpus = max(1, visible_gpus()) if device == "cuda" else 1
    first_gpu = int(config.get("eval", "gpu"))
    cpu_gate = asyncio.Semaphore(1)
    job_gate = asyncio.Semaphore(max(1, jobs))
    started = time.monotonic()
    prior_wall = float(data.get("wall_s", 0.0))
    rounds = (overrides or {}).get("session.rounds")
    pending, _ = rows_to_run(batch, int(rounds) if rounds is not None else None)
    pool = await _open_pool(config, on_event) if pending else None
    halted: list[str] = []  # set by a session stopped for a failure every task would meet

    async def one(index: int, row: TaskOutcome) -> None:
        async with job_gate:
            if halted:
                return  # left pending: `cudaforge resume` runs it once the cause is fixed
            gpu = (first_gpu + index) % n_gpus if device == "cuda" and n_gpus > 1 else first_gpu
            gpu = None if pool is not None else gpu  # on Ray, each evaluation's GPU is in the run's manifest
            task_overrides = {**(overrides or {}), "eval.gpu": gpu, "session.mode": "auto",
                              "budget.dollars": float(config.get("budget", "batch_dollars"))}
            cfg = config_from_data(data["config"], task_overrides)
            hook = (lambda e, t=row.task: on_event(t, e)) if on_event else None
            t0 = time.monotonic()
            try:
                if row.run_dir and Path(row.run_dir, "manifest.json").is_file():
                    session = resume_session(row.run_dir, overrides=task_overrides, driver=AutoApprove(),
                                             on_event=hook, mode="auto", env=env, ledger=ledger, backend=pool)
                else:
                    session = create_session(row.task, cfg, driver=AutoApprove(), on_event=hook, mode="auto",
                                             run_root=batch.path, env=env, ledger=ledger, backend=pool)
                if pool is not None:
                    pool.bind(session, hook)
                _gate_evaluator(session, cpu_gate if device == "cpu" and pool is None else None)
                await batch.update(replace(row, status="running", run_dir=str(session.store.path), gpu=gpu))
                stopped = await session.run()
                outcome = _outcome(row, session.store.path, stopped.reason, stopped.message,
                                   prior_s=row.wall_s + time.monotonic() - t0, gpu=gpu)
                if stopped.reason in BATCH_STOPPING_REASONS:
                    halted.append(stopped.message)
                    outcome = replace(outcome, status="stopped")
                elif pool is not None and pool.unavailable and stopped.reason == "error":
                    outcome = replace(outcome, status="failed")  # no node was left: resume retries it
            except CudaforgeError as exc:
                outcome = replace(row, status="failed", message=exc.message, wall_s=time.monotonic() - t0)
            await batch.update(outcome)
            if on_task_done:
                on_task_done(outcome)

    try:
        await asyncio.gather(*(one(i, r) for i, r in enumerate(pending)))
    finally:
        if pool is not None:
            await pool.close()
    wall = prior_wall + time.monotonic() - started
    final = batch.data()
    final["wall_s"] = wall
    atomic_write_json(batch.path / "batch.json", final)
    summary = summarize(batch.rows(), wall)
    atomic_write_json(batch.path / "summary.json", summary.to_dict())
    return summary


async def _open_pool(config: Config, on_event: BatchHook | None) -> Any:
    """The Ray pool when `[batch] backend = "ray"` (engine/session/ray_backend.py), else None (this host)."""
    if config.get("batch", "backend") != "ray":
        return None
    from cudaforge.engine.session.ray_backend import RayPool

    return await RayPool.start(config, on_notice=(lambda e: on_event("ray", e)) if on_event else None)


def _gate_evaluator(session: Any, gate: asyncio.Semaphore | None) -> None:
    """On the CPU device one evaluation at a time (timings would disturb each other)."""
    if gate is None:
        return
    evaluator = session.evaluator
    inner = evaluator.evaluate

    async def gated(task: Any, candidate: Any, **kw: Any) -> Any:
        async with gate:
            return await inner(task, candidate, **kw)

    evaluator.evaluate = gated


def _outcome(row: TaskOutcome, run_dir: Path, reason: str, message: str, *, prior_s: float,
             gpu: int | None) -> TaskOutcome:
    store = RunStore(run_dir, read_only=True)
    state = store.state
    calls = store.calls()
    best = state.best_speedup
    if reason == "does_not_fit":  # said once for the task; counts as not correct (fast_p over all tasks)
        return replace(row, status="skipped", run_dir=str(run_dir), correct=False, best_speedup=None,
                       wall_s=prior_s, stop_reason=reason, message=f"skipped: does not fit this card ({message})",
                       gpu=gpu)
    rounds = store.rounds()
    best_rec = next((r for r in rounds if r.round == state.best_round), None)
    # Correct: some round was accepted (a round whose timing stayed noisy is accepted, never the best).
    correct = state.best_round is not None or any(r.result is not None and r.result.accepted
                                                  for r in rounds)
    return replace(row, status="done", run_dir=str(run_dir), correct=correct,
                   best_speedup=best, held=sum(1 for r in rounds if r.pending),
                   best_sol=best_rec.result.sol_fraction if best_rec is not None and best_rec.result else None,
                   best_round=state.best_round, rounds=int(state.rounds_done or 0),
                   tokens=sum(c.usage.total_tokens for c in calls), dollars=known_cost(calls),
                   wall_s=prior_s, stop_reason=reason, message=message, gpu=gpu)
