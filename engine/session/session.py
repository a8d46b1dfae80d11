"""The optimization loop: rounds of Judge → Coder → evaluate → profile, with decision points.

Round n (n > 1) starts with the Judge's recommendation about its parent round (the head: the
last round, or the best one after a revert, or any round the person branched from); the person
approves, edits, regenerates, branches or stops. Then the Coder writes a candidate from the
parent's candidate, result and that recommendation; the person decides again. The candidate is
evaluated in a worker process and, when correct on CUDA, profiled with Nsight Compute.

Every completed step is written to the RunStore before the next begins, and every step first
looks for its stored result. Re-running the loop over a run folder therefore continues where it
stopped: a finished LLM call or evaluation is loaded, never repeated.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from cudaforge.engine.agents import Coder, Judge, RoundNote
from cudaforge.engine.candidate import Candidate, check_candidate_source
from cudaforge.engine.config import MODES
from cudaforge.engine.errors import EXIT_UNAVAILABLE, CandidateError, UsageError
from cudaforge.engine.evaluation.backend import EvalBackend, ProfileBackend
from cudaforge.engine.evaluation.progress import EvalProgress
from cudaforge.engine.fsutil import atomic_write_text
from cudaforge.engine.hold import HoldSettings, hold_reasons
from cudaforge.engine.llm.types import REPEATING_ERRORS, CallRecord, UsageLedger, known_cost
from cudaforge.engine.profiling.analysis import Analysis, analyze
from cudaforge.engine.profiling.result import ProfileResult
from cudaforge.engine.results import EvalResult
from cudaforge.engine.session.console import SESSION_LOG, SessionLog
from cudaforge.engine.session.decisions import APPROVE, Decision, Driver
from cudaforge.engine.session.events import (
    BuildOutput,
    CandidateEvaluated,
    CandidateProposed,
    CoderFailed,
    DecisionMade,
    DecisionNeeded,
    DecisionPoint,
    Event,
    JudgeRecommended,
    ModeChanged,
    Notice,
    PhaseChanged,
    ProfileReady,
    RerunFinished,
    Reverted,
    RoundFinished,
    RoundHeld,
    RoundStarted,
    RulingMade,
    SessionStarted,
    SessionStopped,
    StopReason,
    UsageUpdated,
)
from cudaforge.engine.session.records import (
    CandidateMeta,
    CoderDraft,
    DecisionEntry,
    JudgeDraft,
    Recommendation,
    RoundMeta,
)
from cudaforge.engine.session.rulings import Ruling, RulingKind
from cudaforge.engine.session.store import RoundRecord, RunStore
from cudaforge.engine.task import Task

EventHook = Callable[[Event], None]


async def _cancelled(task: asyncio.Task[Any] | None) -> None:
    """Cancel a round's speculative profile and wait until its worker tree is gone."""
    if task is None or task.done():
        if task is not None and not task.cancelled():
            task.exception()  # retrieved: a failed profile of a rejected candidate is nobody's error
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


@dataclass(frozen=True)
class SessionPolicy:
    """When to stop and when to go back to the best round (`[session]` and `[budget]`)."""

    rounds: int = 10
    target_speedup: float | None = None
    plateau_rounds: int | None = None
    revert_after_failures: int = 3
    revert_on_regression: bool = True
    regression_tolerance: float = 0.03  # slower than best by more than this fraction is a regression
    dollars: float | None = 5.0
    tokens: int | None = None
    wall_minutes: float | None = None

    @classmethod
    def from_config(cls, config: Any) -> SessionPolicy:
        s, b = config.section("session"), config.section("budget")
        return cls(
            rounds=int(s["rounds"]), target_speedup=s.get("target_speedup"), plateau_rounds=s.get("plateau_rounds"),
            revert_after_failures=int(s["revert_after_failures"]),
            revert_on_regression=bool(s.get("revert_on_regression", True)),
            regression_tolerance=float(s.get("regression_tolerance", 0.03)),
            dollars=b.get("dollars"), tokens=b.get("tokens"), wall_minutes=b.get("wall_minutes"),
        )


@dataclass
class _Progress:
    """The loop's bookkeeping, rebuilt from round.json summaries on resume."""

    head: int | None = None
    best: int | None = None
    best_speedup: float | None = None
    failures: int = 0  # failed rounds in a row
    since_best: int = 0  # rounds since the best speedup last improved

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class _Stop(Exception):
    def __init__(self, reason: StopReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class Session:
    """One optimization session over one task. Drive it with `await session.run()`."""

    def __init__(
        self,
        task: Task,
        *,
        store: RunStore,
        evaluator: EvalBackend,
        profiler: ProfileBackend | None = None,
        coder: Coder | None = None,
        judge: Judge | None = None,
        gpu_spec: Any = None,
        policy: SessionPolicy | None = None,
        mode: str = "review",
        format: str = "nvrtc",
        driver: Driver | None = None,
        on_event: EventHook | None = None,
        ledger: UsageLedger | None = None,
        notice: str = "",
        hold: HoldSettings | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}")
        if mode == "manual" and driver is None:
            raise ValueError("manual mode needs a driver: the person supplies every candidate")
        self.task = task
        self.store = store
        self.evaluator = evaluator
        self.profiler = profiler
        self.coder = coder
        self.judge = judge
        self.gpu_spec = gpu_spec
        self.policy = policy or SessionPolicy()
        self.mode = mode
        self.format = format
        self.driver = driver
        self.on_event = on_event
        self.ledger = ledger or UsageLedger(self.policy.dollars)
        self.notice = notice
        self.hold = hold or HoldSettings()
        self.progress = _Progress()
        self._log = SessionLog(store.path / SESSION_LOG)
        self._pause = False
        self._stop_requested = False
        self._branch_to: int | None = None
        self._replayed: dict[tuple[int, str], int] = {}  # stored decisions consumed, per round and point
        self._started = time.monotonic()
        self._prior_active_s = float(store.state.active_s or 0.0)
        self._pending_calls: list[CallRecord] = []
        if not store.read_only:
            store.reconcile_calls()
        if not self.ledger.records:
            self.ledger.extend(store.calls())  # a resumed session's spend counts against its caps
        for agent in (coder, judge):
            if agent is not None:
                agent.ledger = self.ledger
                agent.on_record = self._record_call

    # ---- controls (call from the driver's side, any time) ------------------------------------
    def request_pause(self) -> None:
        """Auto mode: become review mode at the next decision point."""
        self._pause = True

    def request_stop(self) -> None:
        """Stop after the step in flight (the run stays resumable)."""
        self._stop_requested = True

    def request_branch(self, round: int) -> None:
        """The next round builds on `round` instead of the head."""
        if self.store.round_meta(round) is None:
            raise ValueError(f"no round {round} in this run")
        if self._held_back(round):
            raise ValueError(f"round {round} is held for review: accept it before building on it")
        self._branch_to = round

    @property
    def active_seconds(self) -> float:
        return self._prior_active_s + (time.monotonic() - self._started)

    # ---- the loop -------------------------------------------------------------------------------
    async def run(self) -> SessionStopped:
        resumed = bool(self.store.round_numbers())
        self.store.save_state(status="running", mode=self.mode, max_rounds=self.policy.rounds, cancelled_round=None)
        self._emit(SessionStarted(self.store.run_id, str(self.store.path), str(self.task.shown_path), self.mode,
                                  self.policy.rounds, resumed, self.notice))
        self._emit_usage()
        try:
            stopped = await self._loop()
        except asyncio.CancelledError:
            stopped = self._finish("cancelled", "cancelled; the run folder is resumable")
            raise
        except Exception as exc:  # an engine bug must not lose the run: say so and keep the folder
            atomic_write_text(self.store.path / "error.log", traceback.format_exc())
            stopped = self._finish("error", f"internal error: {exc!r} (details in error.log); resumable")
        finally:
            self.store.close()
            await self._close_workers()
        return stopped

    def _prewarm(self) -> None:
        """Start spare workers (evaluation, and ncu-wrapped profiling) while the LLM thinks."""
        for part in (self.evaluator, self.profiler):
            prewarm = getattr(part, "prewarm", None)
            if callable(prewarm):
                try:
                    prewarm()
                except Exception as exc:  # a spare is an optimisation: never fail the round for it
                    self._emit(Notice("warning", f"could not start a spare worker: {exc}"))

    async def _close_workers(self) -> None:
        for part in (self.evaluator, self.profiler):
            aclose = getattr(part, "aclose", None)
            if callable(aclose):
                with contextlib.suppress(Exception):
                    await asyncio.shield(aclose())

    async def _loop(self) -> SessionStopped:
        # The spares warm (~10 s on an H200) while the fit check runs its own process (~5 s): the first round
        # waits less for its worker. A task that does not fit only had them started for nothing (killed at close).
        self._counts_will_come()
        self._prewarm()
        too_big = await self._does_not_fit()
        if too_big:
            return self._finish("does_not_fit", too_big)
        n = 1
        while True:
            meta = self.store.round_meta(n)
            if meta is not None and meta.finished:
                self._replay_round(n, meta)
                n += 1
                continue
            try:
                self._check_policies(n)
                await self._round(n)
            except _Stop as stop:
                return self._finish(stop.reason, stop.message)
            n += 1

    def _counts_will_come(self) -> bool:
        """On CUDA the fit check (_does_not_fit) counts the task and hands the counts to the evaluator, so the
        spares started before it need not load what counting needs: torch._dynamo, 3.9-5.4 s of an ncu-wrapped
        profile spare's 11-12 s warm-up (H100, session 22), which the first rounds' profiles waited for (a
        spare taken 12.6 s after its start, not yet ready). Whether the evaluator now expects them."""
        options = getattr(self.evaluator, "options", None)
        expect = getattr(self.evaluator, "expect_task_counts", None)
        if getattr(options, "device", "cpu") != "cuda" or not callable(expect) \
                or getattr(self.evaluator, "use_task_counts", None) is None:
            return False
        expect()
        return True

    async def _does_not_fit(self) -> str:
        """The task cannot fit the card (engine/evaluation/fit.py): said once, before the Coder writes a candidate.
        What the check counted goes to the evaluator, so no round's worker counts it again; where it counted
        nothing, the spares started from then on load what counting needs again (_counts_will_come)."""
        options = getattr(self.evaluator, "options", None)
        if options is None or getattr(options, "device", "cpu") != "cuda":
            return ""
        from cudaforge.engine.evaluation.fit import check_task_fit

        fit = None
        with contextlib.suppress(Exception):  # the worker checks again before every build
            fit = await check_task_fit(self.task.path, options, shown_path=self.task.shown_path)
        use_counts = getattr(self.evaluator, "use_task_counts", None)  # a backend without it counts in its workers
        if fit is not None and fit.counts is not None and use_counts is not None:
            use_counts(self.task, fit.counts)
        else:
            expect = getattr(self.evaluator, "expect_task_counts", None)
            if callable(expect):
                expect(False)
        return fit.message if fit is not None and not fit.fits else ""

    def _check_policies(self, n: int) -> None:
        p, prog = self.policy, self.progress
        if self._stop_requested:
            raise _Stop("stopped_by_user", "stopped on request")
        if n > p.rounds:
            raise _Stop("max_rounds", f"reached the round limit ({p.rounds})")
        if p.target_speedup is not None and prog.best_speedup is not None and prog.best_speedup >= p.target_speedup:
            raise _Stop("target_speedup", f"reached the target speedup {p.target_speedup:g}x "
                                          f"({prog.best_speedup:.2f}x in round {prog.best})")
        if p.plateau_rounds is not None and n > 1 and prog.since_best >= p.plateau_rounds:
            raise _Stop("plateau", f"no improvement for {prog.since_best} rounds")
        self._check_budget()

    def _check_budget(self) -> None:
        p = self.policy
        total = self.ledger.total()
        if p.dollars is not None and total.cost_usd >= p.dollars:
            raise _Stop("budget_dollars", f"dollar cap reached (${total.cost_usd:.2f} of ${p.dollars:.2f})")
        if p.tokens is not None and total.usage.total_tokens >= p.tokens:
            raise _Stop("budget_tokens", f"token cap reached ({total.usage.total_tokens} of {p.tokens})")
        if p.wall_minutes is not None and self.active_seconds >= p.wall_minutes * 60:
            raise _Stop("budget_wall", f"wall-time cap reached ({self.active_seconds / 60:.1f} of "
                                       f"{p.wall_minutes:g} min)")

    async def _round(self, n: int) -> None:
        meta = self.store.round_meta(n)
        if meta is None:
            parent = self._branch_to if self._branch_to is not None else self.progress.head
            self._branch_to = None
            self.store.start_round(n, self._kind_for(parent), parent)
            meta = self.store.round_meta(n)
            assert meta is not None
        parent = meta.parent
        self._emit(RoundStarted(n, meta.kind, parent))  # type: ignore[arg-type]
        recommendation = None
        if parent is not None:
            parent, recommendation = await self._judge_stage(n, parent)
        candidate = await self._candidate_stage(n, parent, recommendation)
        result: EvalResult | None = None
        repeat_of = self._repeat_of(n, candidate) if candidate is not None else None
        if candidate is not None:
            if repeat_of is not None:
                self._emit(Notice("warning", f"round {n}'s candidate is identical to round {repeat_of}'s: a repeat, "
                                             "not a new result (the Coder is told)"))
            profiling = self._start_profile(n, candidate)  # beside the evaluation: kept only if it is accepted
            try:
                result = await self._evaluate(n, candidate)
            except BaseException:
                await _cancelled(profiling)
                raise
            if result.accepted:
                await self._profile(n, candidate, profiling)
                await self._hold_stage(n, candidate, result)
            else:
                await _cancelled(profiling)
        self._after_round(n, parent, result, repeat_of)
        kind = (self.store.round_meta(n) or meta).kind
        self.store.finish_round(n, outcome=result.outcome if result else "no_candidate",
                                speedup=result.speedup if result and result.accepted else None,
                                repeat_of=repeat_of,
                                progress=self.progress.to_dict())
        self.store.save_state(best_round=self.progress.best, best_speedup=self.progress.best_speedup,
                              rounds_done=n, active_s=self.active_seconds)
        calls = [c for c in self.ledger.records if c.round == n]
        self._emit(RoundFinished(n, kind, result.outcome if result else "no_candidate",
                                 result.speedup if result and result.accepted else None,
                                 self.progress.best, self.progress.best_speedup,
                                 tokens=sum(c.usage.total_tokens for c in calls),
                                 cost_usd=known_cost(calls)))

    def _repeat_of(self, n: int, candidate: Candidate) -> int | None:
        """The latest earlier round whose candidate is the same text (a repeat is served from the result
        cache and must not count as a new result), or None."""
        for k in sorted((k for k in self.store.round_numbers() if k < n), reverse=True):
            earlier = self.store.candidate(k)
            if earlier is not None and earlier.strip() == candidate.source.strip():
                return k
        return None

    def _kind_for(self, parent: int | None) -> str:
        if self.mode == "manual" or self.coder is None:
            return "manual"
        if parent is None:
            return "seed"
        ev = self.store.get(parent, "eval")
        accepted = bool(ev and EvalResult.from_dict(ev).accepted)
        return "optimize" if accepted else "repair"

    # ---- judge stage --------------------------------------------------------------------------
    async def _judge_stage(self, n: int, parent: int) -> tuple[int, str]:
        k = 1
        while True:
            draft = self.store.judge_draft(n, k)
            if draft is None or draft.subject_round != parent:
                if draft is not None:  # a branch changed the subject: later drafts are numbered on
                    k += 1
                    continue
                draft = await self._judge_draft(n, parent)
                self.store.put_judge_draft(n, k, draft)
                self._flush_calls()
                replayed = False
            else:
                replayed = True
            self._emit(JudgeRecommended(n, parent, draft.mode, draft.text, draft.source, replayed))  # type: ignore[arg-type]
            decision = await self._decide(n, "recommendation", k, draft.text,
                                          ("approve", "edit", "regenerate", "branch", "stop"))
            if decision.action == "regenerate":
                k += 1
                continue
            if decision.action == "branch" and decision.round is not None and decision.round != parent:
                if self.store.round_meta(decision.round) is None or decision.round >= n:
                    self._emit(Notice("error", f"cannot branch from round {decision.round}: no such earlier round"))
                    continue
                if self._held_back(decision.round):
                    self._emit(Notice("error", f"round {decision.round} is held for review: accept it before "
                                               "building on it"))
                    continue
                parent = decision.round
                meta = replace(self.store.round_meta(n) or RoundMeta(round=n), parent=parent,
                               kind=self._kind_for(parent))
                self.store.put_round_meta(meta)
                self._emit(RoundStarted(n, meta.kind, parent))  # type: ignore[arg-type]
                k += 1
                continue
            if decision.action == "edit" and decision.text is not None:
                text, source = decision.text, "person"
            else:
                text, source = draft.text, draft.source
            self.store.put_recommendation(n, Recommendation(text=text, source=source, mode=draft.mode,
                                                            subject_round=parent, draft=k))
            return parent, text

    async def _judge_draft(self, n: int, subject: int) -> JudgeDraft:
        record = self.store.load_round(subject)
        result = record.result
        mode = "optimize" if result is not None and result.accepted else "correct"
        if self.judge is not None:
            self._phase(n, "judging", f"Judge ({self.judge.client.model}) on round {subject}")
            self._check_budget()
            if mode == "optimize":
                kernels = (list(record.profile.kernels) or None) if record.profile is not None else None
                analysis = self._analysis(record)
                findings = analysis.findings if analysis is not None else None
                reply = await self.judge.optimize(self.task.source, candidate_source=record.candidate or "",
                                                  result=result, metrics=kernels, findings=findings,
                                                  analysis=analysis, round=n)
            else:
                reply = await self.judge.correct(self.task.source, candidate_source=record.candidate or "",
                                                 result=result, round=n)
            if reply.error is not None and reply.error.kind == "budget":
                raise _Stop("budget_dollars", reply.error.message)
            if reply.error is not None:
                _stop_if_repeating("Judge", reply.error.to_dict())
            return JudgeDraft(subject_round=subject, mode=mode, text=reply.as_text(),
                              source="fallback" if reply.fallback else "llm", reply=reply.to_dict())
        from cudaforge.engine.agents.offline_judge import NO_PROFILE, OfflineJudge

        analysis = self._analysis(record) or Analysis(
            gpu=getattr(self.gpu_spec, "name", "") or "cpu", profile_ok=False, profile_message=NO_PROFILE)
        reply = OfflineJudge().recommend(analysis, result)
        return JudgeDraft(subject_round=subject, mode=reply.mode, text=reply.as_text(), source="heuristic",
                          reply=reply.to_dict())

    def _analysis(self, record: RoundRecord) -> Analysis | None:
        """The analysis of a stored profile (recomputed: it is cheap and deterministic)."""
        if record.profile is None or self.gpu_spec is None or not record.profile.ok:
            return None
        return analyze(record.profile, self.gpu_spec)

    # ---- candidate stage ----------------------------------------------------------------------
    async def _candidate_stage(self, n: int, parent: int | None, recommendation: str | None) -> Candidate | None:
        stored = self.store.candidate(n)
        if stored is not None:
            meta = self.store.candidate_meta(n) or CandidateMeta()
            cand = Candidate.from_source(stored)
            self._emit(CandidateProposed(n, stored, cand.format, meta.origin or "coder",  # type: ignore[arg-type]
                                         meta.explanation, replayed=True))
            return cand
        parent_record = self.store.load_round(parent) if parent is not None else None
        k = 1
        while True:
            source: str | None
            explanation = ""
            if self.mode == "manual" or self.coder is None:
                self._prewarm()  # the person writes the kernel now: warm the worker meanwhile
                source = None
                draft_text = parent_record.candidate if parent_record and parent_record.candidate else ""
                options: tuple[Any, ...] = ("edit", "branch", "stop")
            else:
                draft = self.store.coder_draft(n, k)
                replayed = draft is not None
                if draft is None:
                    draft = await self._coder_draft(n, parent_record, recommendation)
                    # Not stored when it would repeat: a session resumed after the fix asks again.
                    _stop_if_repeating("Coder", draft.error)
                    self.store.put_coder_draft(n, k, draft)
                    self._flush_calls()
                source, explanation = draft.source, draft.explanation
                if source is None:
                    err = draft.error_message or "no usable module"
                    self._emit(CoderFailed(n, err, replayed))
                    if draft.error_kind == "budget":
                        raise _Stop("budget_dollars", err)
                    if self._effective_mode() == "auto":
                        return None  # a failed round; the loop goes on (and may revert)
                    draft_text = ""
                    options = ("regenerate", "edit", "stop")
                else:
                    fmt = Candidate.from_source(source).format
                    self._emit(CandidateProposed(n, source, fmt, "coder", explanation, replayed))
                    draft_text = source
                    options = ("approve", "edit", "regenerate", "stop")
            decision = await self._decide(n, "candidate", k, draft_text, options)
            if decision.action == "regenerate" and self.coder is not None:
                k += 1
                continue
            if decision.action == "branch":
                self._emit(Notice("warning", "branch from the recommendation step or between rounds"))
                continue
            if decision.action == "edit" and decision.text is not None:
                try:
                    check_candidate_source(decision.text, f"round {n} candidate")
                except CandidateError as exc:
                    self._emit(Notice("error", exc.message))
                    continue
                origin = "person" if source is None else "edited"
                final = decision.text
            elif source is not None:
                origin, final = "coder", source
            else:
                self._emit(Notice("error", "there is no candidate to approve: edit one in, or stop"))
                continue
            cand = Candidate.from_source(final)
            self.store.put_candidate(n, final, format=cand.format, origin=origin, explanation=explanation)
            if origin != "coder":
                self._emit(CandidateProposed(n, final, cand.format, origin, explanation))  # type: ignore[arg-type]
            return cand

    async def _coder_draft(self, n: int, parent: Any, recommendation: str | None) -> CoderDraft:
        assert self.coder is not None
        self._check_budget()
        self._phase(n, "thinking", f"Coder ({self.coder.client.model})")
        self._prewarm()
        history = self._history(n)
        if parent is None or parent.candidate is None:
            reply = await self.coder.seed(self.task.source, round=n)
        elif parent.result is not None and parent.result.accepted:
            reply = await self.coder.optimize(self.task.source, candidate_source=parent.candidate,
                                              result=parent.result, recommendation=recommendation,
                                              history=history, round=n)
        else:
            reply = await self.coder.repair(self.task.source, candidate_source=parent.candidate,
                                            result=parent.result, recommendation=recommendation,
                                            history=history, round=n)
        return CoderDraft.from_dict(reply.to_dict())

    def _history(self, n: int) -> list[RoundNote]:
        notes = []
        for rec in self.store.rounds():
            if rec.round >= n or not rec.finished:
                continue
            action = rec.kind if rec.recommendation is None else (rec.recommendation.splitlines() or [rec.kind])[0]
            repeat_of = meta.repeat_of if (meta := self.store.round_meta(rec.round)) else None
            notes.append(RoundNote.from_result(rec.round, action[:80], rec.result,
                                               best=rec.round == self.progress.best, repeat_of=repeat_of))
        return notes

    # ---- evaluation and profiling ---------------------------------------------------------------
    async def _evaluate(self, n: int, candidate: Candidate) -> EvalResult:
        stored = self.store.get(n, "eval")
        if stored is not None:
            result = EvalResult.from_dict(stored)
            self._emit(CandidateEvaluated(n, result, replayed=True))
            return result
        self._phase(n, "compiling", f"{candidate.format} candidate")
        result = await self.evaluator.evaluate(self.task, candidate, **self._phase_kwargs(n))
        self.store.put(n, "eval", result.to_dict())
        self._emit(CandidateEvaluated(n, result, cached=bool(getattr(result, "cached", False))))
        return result

    def _phase_kwargs(self, n: int) -> dict[str, Any]:
        """Pass a progress callback when the evaluator takes one: the worker's phases become PhaseChanged
        (the status bar) and its build's lines BuildOutput (the Compiler pane), as they come."""
        import inspect

        try:
            params = inspect.signature(self.evaluator.evaluate).parameters
        except (TypeError, ValueError):
            return {}
        if "on_progress" not in params:
            return {}
        seen: list[tuple[str, float]] = []
        build_began: list[float] = []  # the build phase's start: the lines' build, whatever phase they come in

        def on_progress(progress: EvalProgress) -> None:
            if (progress.phase, progress.since) not in seen:
                seen.append((progress.phase, progress.since))
                if progress.phase == "build":
                    build_began[:] = [progress.since]
                self._phase(n, _PHASE_NAMES.get(progress.phase, "verifying"), progress.phase, progress.since)
            if progress.build_lines:
                self._emit(BuildOutput(n, progress.build_lines, build_began[0] if build_began else progress.since))

        return {"on_progress": on_progress}

    def _start_profile(self, n: int, candidate: Candidate) -> asyncio.Task[ProfileResult] | None:
        """The round's profile, started beside its evaluation (None where there is nothing to start: no
        profiler, or a profile already stored). Profiling waits for nothing the evaluation decides: ncu's
        replay holds the GPU alone like a timed window (engine/gpu/rwlock.py), and everything before it runs
        side by side with the evaluation's checks, so the round pays for the profile's exclusive part only
        (the two one after the other were 1.9-2.3 s on the H200, of which the profile 0.8 s). The profile
        of a candidate that is not accepted is cancelled (its worker tree killed) and never shown."""
        if self.profiler is None or self.store.profile(n) is not None:
            return None
        return asyncio.create_task(self.profiler.profile(self.task, candidate))

    async def _profile(self, n: int, candidate: Candidate,
                       started: asyncio.Task[ProfileResult] | None = None) -> None:
        if self.profiler is None:
            return
        stored = self.store.profile(n)
        if stored is not None:
            if stored[0] is not None:
                self._emit(ProfileReady(n, stored[0], stored[1], replayed=True))
            return
        self._phase(n, "profiling", "Nsight Compute")
        profile = await (started if started is not None else self.profiler.profile(self.task, candidate))
        analysis: Analysis | None = None
        if profile.ok and self.gpu_spec is not None:
            analysis = analyze(profile, self.gpu_spec)
        elif not profile.ok:
            self._emit(Notice("warning", f"profile of round {n}: {profile.message}"))
        self.store.put(n, "profile", {"profile": profile.to_dict(),
                                      "analysis": analysis.to_dict() if analysis is not None else None})
        self._emit(ProfileReady(n, profile, analysis))

    # ---- held for review (engine/hold.py) ---------------------------------------------------------
    async def _hold_stage(self, n: int, candidate: Candidate, result: EvalResult) -> None:
        """Hold a passing result that looks too good, and re-run it at once in a fresh worker process."""
        reasons = self.store.hold(n)
        if not reasons and self.store.get(n, "hold") is None:
            best = self.progress.best_speedup
            new_best = best is None or (result.speedup is not None and result.speedup > best)
            reasons = hold_reasons(result, self.hold, new_best=new_best)
            self.store.put_hold(n, reasons)
        if not reasons:
            return
        self._emit(RoundHeld(n, reasons))
        rerun = self.store.rerun(n)
        if rerun is None:
            self._phase(n, "verifying", "re-run of the held candidate in a fresh worker")
            rerun = await self.evaluator.evaluate(self.task, candidate, use_cache=False)
            self.store.put(n, "rerun", rerun.to_dict())
        self._emit(RerunFinished(n, rerun))

    def _held_back(self, n: int) -> bool:
        """Held and not accepted (no ruling yet, or rejected)."""
        if not self.store.hold(n):
            return False
        ruling = self.store.rulings().get(n)
        return ruling is None or ruling.ruling != "accept"

    def rule(self, n: int, ruling: RulingKind, reason: str = "", who: str | None = None) -> Ruling | None:
        """A person's ruling on held round n (call it on the Session's loop). Accepting makes the round
        count: the best when it is faster than the best, the head the next round builds on."""
        try:
            made = self.store.add_ruling(n, ruling, reason, who)
        except UsageError as exc:
            self._emit(Notice("error", str(exc)))
            return None
        meta = self.store.round_meta(n)
        if meta is not None and meta.finished:
            self._apply_ruling(made)
            self.store.save_state(best_round=self.progress.best, best_speedup=self.progress.best_speedup)
        self._emit(RulingMade(made, self.progress.best, self.progress.best_speedup))
        return made

    def _apply_ruling(self, ruling: Ruling) -> None:
        """An accepted held round takes its place as if it had never been held (idempotent)."""
        if ruling.ruling != "accept":
            return
        stored = self.store.get(ruling.round, "eval")
        result = EvalResult.from_dict(stored) if stored else None
        if result is None or not result.accepted:
            return
        prog = self.progress
        if result.speedup is None:
            if prog.best_speedup is None and prog.best is None:
                prog.best, prog.head = ruling.round, ruling.round
        elif prog.best_speedup is None or result.speedup > prog.best_speedup:
            prog.best, prog.best_speedup, prog.since_best, prog.head = ruling.round, result.speedup, 0, ruling.round

    # ---- bookkeeping ------------------------------------------------------------------------------
    def _after_round(self, n: int, parent: int | None, result: EvalResult | None,
                     repeat_of: int | None = None) -> None:
        prog, p = self.progress, self.policy
        if repeat_of is not None and result is not None and result.accepted:
            prog.since_best += 1  # the same candidate again: never a new best, the head stays
            return
        if result is not None and result.accepted and result.noisy:
            # A noisy timing is no result: never the best, never what an optimize round builds on. The next
            # round starts from the best (or from where this one started).
            prog.failures = 0
            prog.since_best += 1
            prog.head = prog.best if prog.best is not None else parent
        if result is not None and result.accepted and self._held_back(n):
            # held for review: not best, and the next round builds on what this one built on
            prog.failures = 0
            prog.head = parent
            return
        if result is not None and result.accepted and result.speedup is None:
            # accepted, timed by Triton's interpreter: no speed claim, so the newest such round is the best
            prog.failures, prog.since_best, prog.head = 0, 0, n
            if prog.best_speedup is None:
                prog.best = n
            return
        if result is not None and result.accepted and result.speedup is not None:
            prog.failures = 0
            if prog.best_speedup is None or result.speedup > prog.best_speedup:
                prog.best, prog.best_speedup, prog.since_best = n, result.speedup, 0
                prog.head = n
                return
            prog.since_best += 1
            assert prog.best is not None
            if p.revert_on_regression and result.speedup < prog.best_speedup * (1 - p.regression_tolerance):
                prog.head = prog.best
                self._emit(Reverted(n, prog.best, f"round {n} ({result.speedup:.2f}x) is slower than the best, "
                                                   f"round {prog.best} ({prog.best_speedup:.2f}x)"))
            else:
                prog.head = n
            return
        prog.failures += 1
        prog.since_best += 1
        prog.head = n if result is not None else parent
        if prog.failures >= p.revert_after_failures and prog.best is not None:
            prog.head = prog.best
            prog.failures = 0
            self._emit(Reverted(n, prog.best, f"{p.revert_after_failures} failed rounds in a row"))

    def _replay_round(self, n: int, meta: RoundMeta) -> None:
        """Re-emit a finished round's stored steps (replayed=True) and restore the bookkeeping."""
        rec = self.store.load_round(n)
        self._emit(RoundStarted(n, rec.kind, rec.parent, replayed=True))  # type: ignore[arg-type]
        if rec.recommendation is not None and rec.subject_round is not None:
            self._emit(JudgeRecommended(n, rec.subject_round, rec.judge_mode or "optimize",  # type: ignore[arg-type]
                                        rec.recommendation, rec.judge_source or "llm", True))  # type: ignore[arg-type]
        for d in rec.decisions:
            self._emit(DecisionMade(n, d.point, d.action, d.by, True))  # type: ignore[arg-type]
        if rec.candidate is not None:
            self._emit(CandidateProposed(n, rec.candidate, rec.format or "", rec.origin or "coder",  # type: ignore[arg-type]
                                         rec.explanation, True))
        elif rec.coder_error:
            self._emit(CoderFailed(n, rec.coder_error, True))
        if rec.result is not None:
            self._emit(CandidateEvaluated(n, rec.result, replayed=True))
        if rec.profile is not None:
            self._emit(ProfileReady(n, rec.profile, rec.analysis, True))
        if rec.hold:
            self._emit(RoundHeld(n, rec.hold, True))
        if rec.rerun is not None:
            self._emit(RerunFinished(n, rec.rerun, True))
        saved = meta.progress
        if isinstance(saved, dict):
            for key, value in saved.items():
                if hasattr(self.progress, key):
                    setattr(self.progress, key, value)
        else:
            self._after_round(n, rec.parent, rec.result, meta.repeat_of)
        rulings = self.store.rulings()
        for k in sorted(rulings):  # rulings made after a round's snapshot was saved
            if k <= n:
                self._apply_ruling(rulings[k])
        self._emit(RoundFinished(n, rec.kind, rec.outcome, rec.speedup, self.progress.best,  # type: ignore[arg-type]
                                 self.progress.best_speedup, True, tokens=rec.tokens, cost_usd=rec.cost_usd))
        if n in rulings:
            self._emit(RulingMade(rulings[n], self.progress.best, self.progress.best_speedup, True))

    # ---- decisions ----------------------------------------------------------------------------
    def _effective_mode(self) -> str:
        if self._pause and self.mode == "auto":
            self._pause = False
            self.mode = "review"
            self.store.save_state(mode=self.mode)
            self._emit(ModeChanged("review", "paused by the person"))
        return self.mode

    async def _decide(self, n: int, point: DecisionPoint, k: int, text: str, options: tuple[Any, ...]) -> Decision:
        # Stored decisions are replayed in the order they were made: re-walking the same steps with
        # the same answers reproduces the same path (regenerations, rejected edits, branches).
        stored = [e for e in self.store.decisions(n) if e.point == point and e.action != "stop"]
        used = self._replayed.get((n, point), 0)
        if used < len(stored):
            entry = stored[used]
            self._replayed[(n, point)] = used + 1
            decision = entry.decision
            self._emit(DecisionMade(n, point, decision.action, entry.by, replayed=True))  # type: ignore[arg-type]
            return decision
        if self._stop_requested:
            raise _Stop("stopped_by_user", "stopped on request")
        mode = self._effective_mode()
        if mode == "auto" and "approve" in options:
            decision, by = APPROVE, "auto"
        else:
            if self.driver is None:
                raise _Stop("stopped_by_user", f"round {n} needs a decision ({point}) and no one is there to decide")
            self._phase(n, "waiting", point)
            self._emit(DecisionNeeded(n, point, text, options))
            decision, by = await self.driver.decide(DecisionNeeded(n, point, text, options)), "person"
            if decision.action not in options:
                self._emit(Notice("error", f"'{decision.action}' is not possible here; choose one of "
                                           + ", ".join(options)))
                return await self._decide(n, point, k, text, options)
        self.store.add_decision(n, DecisionEntry(point=point, n=k, by=by, action=decision.action, text=decision.text,
                                                 round=decision.round))
        self._replayed[(n, point)] = self._replayed.get((n, point), 0) + 1
        self._emit(DecisionMade(n, point, decision.action, by))  # type: ignore[arg-type]
        if decision.action == "stop":
            raise _Stop("stopped_by_user", f"stopped by the person at round {n} ({point})")
        return decision

    # ---- events -------------------------------------------------------------------------------------
    def _emit(self, event: Event) -> None:
        with contextlib.suppress(OSError):  # the log is a record, never a reason to stop
            self._log(event)
        if self.on_event is not None:
            self.on_event(event)

    def _phase(self, n: int, phase: Any, detail: str = "", started_at: float | None = None) -> None:
        self._emit(PhaseChanged(n, phase, time.time() if started_at is None else started_at, detail))

    def _record_call(self, record: CallRecord) -> None:
        """Held until the agent's draft is stored (_flush_calls): calls.jsonl then never lists a call whose
        reply a resumed session cannot find, so no completed call is made twice; the draft carries its
        records too, and RunStore.reconcile_calls restores any a crash kept out of calls.jsonl."""
        self._pending_calls.append(record)
        self._emit_usage()

    def _flush_calls(self) -> None:
        pending, self._pending_calls = self._pending_calls, []
        for record in pending:
            self.store.append_call(record)

    def _emit_usage(self) -> None:
        total = self.ledger.total()
        self._emit(UsageUpdated(total.usage.total_tokens, total.cost_usd, total.cost_known, total.calls))

    def _finish(self, reason: StopReason, message: str) -> SessionStopped:
        self._flush_calls()  # calls whose draft was not stored (a stop for a failure that repeats)
        status = "finished" if reason in ("max_rounds", "target_speedup", "plateau") else "stopped"
        numbers = self.store.round_numbers()
        rounds_done = sum(1 for n in numbers if (meta := self.store.round_meta(n)) and meta.finished)
        # a round started but not finished (stopped mid-round) is cancelled: resume redoes its missing steps
        cancelled = next((n for n in reversed(numbers) if not ((meta := self.store.round_meta(n)) and meta.finished)), None)
        self.store.save_state(status=status, stop_reason=reason, stop_message=message,
                              best_round=self.progress.best, best_speedup=self.progress.best_speedup,
                              rounds_done=rounds_done, active_s=self.active_seconds, mode=self.mode,
                              max_rounds=self.policy.rounds, cancelled_round=cancelled)
        event = SessionStopped(reason, message, self.progress.best, self.progress.best_speedup, rounds_done)
        self._emit(event)
        return event


_REPEAT_FIX = {
    "auth": "check the API key in the provider's environment variable and that it may use this model",
    "not_found": "check the model name and base_url of this agent in cudaforge.toml",
}


def _stop_if_repeating(agent: str, error: dict[str, Any] | None) -> None:
    """End the session at an LLM failure that every later call would meet too (a missing SDK
    module, a refused key, an unknown model), with the message and the fix, instead of failing
    round after round."""
    kind = (error or {}).get("kind")
    if kind not in REPEATING_ERRORS:
        return
    assert error is not None
    status = f" {error['status']}" if error.get("status") else ""
    message = (error.get("message") or "").strip().splitlines()
    where = f"{agent} ({error.get('provider') or '?'} {error.get('model') or '?'})"
    fix = f"; {_REPEAT_FIX[kind]}" if kind in _REPEAT_FIX else ""
    text = f"{where}: {kind}{status}: {message[0] if message else ''}{fix}"
    raise _Stop("unavailable" if REPEATING_ERRORS[kind] == EXIT_UNAVAILABLE else "bad_config", text)


_PHASE_NAMES = {"start": "compiling", "idle": "compiling", "warm": "compiling", "load_task": "compiling",
                "build": "compiling", "init": "compiling", "correctness": "verifying", "kernels": "verifying",
                "timing": "timing", "compile_baseline": "timing", "gpu_wait": "verifying",
                "context_wait": "compiling", "context": "compiling", "done": "verifying"}


__all__ = ["EventHook", "Session", "SessionPolicy"]
