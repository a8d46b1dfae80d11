"""The optimization session: the loop, its events and decision points, run folders, batches."""

from cudaforge.engine.session.decisions import (
    APPROVE,
    STOP,
    AutoApprove,
    Decision,
    Driver,
    QueueDriver,
    ScriptedDriver,
)
from cudaforge.engine.session.events import (
    BuildOutput,
    CandidateEvaluated,
    CandidateProposed,
    CoderFailed,
    DecisionMade,
    DecisionNeeded,
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
    UsageUpdated,
)
from cudaforge.engine.session.factory import NO_LLM_NOTICE, build_parts, create_session, resume_session
from cudaforge.engine.session.records import (
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
from cudaforge.engine.session.session import Session, SessionPolicy
from cudaforge.engine.session.store import (
    RoundRecord,
    RunStore,
    RunSummary,
    list_runs,
    prune_cache,
    prune_runs,
)

__all__ = [
    "APPROVE", "NO_LLM_NOTICE", "STOP", "AutoApprove", "BuildOutput", "CandidateEvaluated", "CandidateProposed", "CoderFailed",
    "Decision", "DecisionMade", "DecisionNeeded", "Driver", "Event", "JudgeRecommended", "ModeChanged", "Notice",
    "PhaseChanged", "ProfileReady", "QueueDriver", "RerunFinished", "Reverted", "RoundFinished", "RoundHeld",
    "RoundRecord", "RoundStarted", "RulingMade",
    "RunStore", "RunSummary", "ScriptedDriver", "Session", "SessionPolicy", "SessionStarted", "SessionStopped",
    "UsageUpdated", "build_parts", "create_session", "list_runs", "prune_cache", "prune_runs", "resume_session",
    "CandidateMeta", "CoderDraft", "DecisionEntry", "GpuInfo", "JudgeDraft", "Manifest", "Recommendation", "RoundMeta", "State",
    "round_status",
]
