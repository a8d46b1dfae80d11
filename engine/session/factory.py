"""Build a Session from a task and the configuration, or from a run folder to resume it.

This is where the configuration turns into parts: the evaluator and (on CUDA, with ncu enabled)
the profiler, the GPU spec, the Coder and Judge clients (or manual mode and the heuristic
Judge when no LLM is configured), the ledger with its dollar cap, and the run folder.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cudaforge.engine.config import Config, config_from_data, config_to_data
from cudaforge.engine.errors import ConfigError, UsageError
from cudaforge.engine.evaluation.backend import (
    EvalBackend,
    ProfileBackend,
    SessionBackend,
    device_gpu_spec,
    local_parts,
)
from cudaforge.engine.hold import HoldSettings
from cudaforge.engine.llm.types import UsageLedger
from cudaforge.engine.session.decisions import Driver
from cudaforge.engine.session.records import GpuInfo, Manifest
from cudaforge.engine.session.session import EventHook, Session, SessionPolicy
from cudaforge.engine.session.store import RunStore
from cudaforge.engine.task import Task, load_task, task_name_of

NO_LLM_NOTICE = (
    "No Coder LLM is configured, so this session runs in manual mode (you write each candidate) with the "
    "offline heuristic Judge. To add one, set [coder] provider and model in cudaforge.toml (e.g. provider = "
    '"anthropic", model = "claude-sonnet-4-6") and export its API key (ANTHROPIC_API_KEY or OPENAI_API_KEY).'
)


@dataclass(frozen=True)
class Parts:
    """What a session is made of, before it is given a run folder."""

    evaluator: EvalBackend
    profiler: ProfileBackend | None
    gpu_spec: Any
    coder: Any
    judge: Any
    mode: str
    format: str
    notice: str


def llm_configured(config: Config, role: str) -> bool:
    table = config.section(role)
    return bool(table) and table.get("provider") not in (None, "", "heuristic")


def build_parts(config: Config, *, mode: str | None = None, env: dict[str, str] | None = None,
                backend: SessionBackend | None = None) -> Parts:
    """Evaluator, profiler, GPU spec and agents for a configuration. Missing API keys raise
    ConfigError here, before anything runs. `backend` (a batch's Ray cluster) supplies the evaluator,
    profiler and GPU spec instead of this host."""
    mode = mode or config.get("session", "mode")
    device = config.get("eval", "device")
    if backend is not None:
        gpu_spec = backend.gpu_spec
        evaluator, profiler = backend.session_parts(config)
    else:
        gpu_spec = device_gpu_spec(config)
        evaluator, profiler = local_parts(config, gpu_spec)
    fmt = config.get("session", "format")
    if device == "cpu" and fmt not in ("cpu", "triton"):
        fmt = "cpu"  # a CPU device runs C++ candidates, and Triton ones in Triton's interpreter
    gpu_summary = _gpu_summary(gpu_spec, device)
    notices: list[str] = []
    coder = judge = None
    if mode != "manual" and llm_configured(config, "coder"):
        from cudaforge.engine.agents import Coder
        from cudaforge.engine.llm import LLMSettings, make_client, provider_notice
        from cudaforge.engine.llm.prices import deprecation_notice

        settings = LLMSettings.from_table(dict(config.section("coder")), section="coder", source="config")
        coder = Coder(make_client(settings, env=env), format=fmt, gpu_summary=gpu_summary)
        notices.append(provider_notice(settings, role="Coder"))
        notices.append(deprecation_notice(settings.model, role="Coder") or "")
    elif mode != "manual":
        mode = "manual"
        notices.append(NO_LLM_NOTICE)
    if llm_configured(config, "judge"):
        from cudaforge.engine.agents import Judge
        from cudaforge.engine.llm import LLMSettings, make_client, provider_notice
        from cudaforge.engine.llm.prices import deprecation_notice

        settings = LLMSettings.from_table(dict(config.section("judge")), section="judge", source="config")
        judge = Judge(make_client(settings, env=env), gpu_summary=gpu_summary)
        notices.append(provider_notice(settings, role="Judge"))
        notices.append(deprecation_notice(settings.model, role="Judge") or "")
    return Parts(evaluator, profiler, gpu_spec, coder, judge, mode, fmt, " ".join(n for n in notices if n))


def _gpu_summary(gpu_spec: Any, device: str) -> str:
    if device == "cpu":
        return "CPU device: candidates are C++ extensions (cpp_sources only) run on the host."
    if gpu_spec is None:
        return ""
    summary = getattr(gpu_spec, "summary", None)
    return summary() if callable(summary) else str(getattr(gpu_spec, "name", ""))


def _gpu_info(parts: Parts, config: Config) -> GpuInfo:
    if config.get("eval", "device") != "cuda":
        return GpuInfo(device="cpu")
    p = parts.gpu_spec
    return GpuInfo(device="cuda", index=config.get("eval", "gpu"), name=getattr(p, "name", None),
                   chip=getattr(p, "chip", None))


def create_session(
    task_path: str | Path,
    config: Config,
    *,
    driver: Driver | None = None,
    on_event: EventHook | None = None,
    mode: str | None = None,
    run_root: str | Path | None = None,
    run_id: str | None = None,
    env: dict[str, str] | None = None,
    ledger: UsageLedger | None = None,
    backend: SessionBackend | None = None,
) -> Session:
    """A new session with a new run folder under `run_root` (default: `[run] folder`)."""
    task = load_task(task_path)
    parts = build_parts(config, mode=mode, env=env, backend=backend)
    data = config_to_data(config)
    data.setdefault("session", {})["mode"] = parts.mode
    store = RunStore.create(run_root or config.get("run", "folder"), task, config=data, mode=parts.mode,
                            gpu=_gpu_info(parts, config), run_id=run_id)
    return _session(task, store, config, parts, driver, on_event, ledger)


def resume_session(
    run_dir: str | Path,
    *,
    overrides: dict[str, Any] | None = None,
    driver: Driver | None = None,
    on_event: EventHook | None = None,
    mode: str | None = None,
    env: dict[str, str] | None = None,
    ledger: UsageLedger | None = None,
    backend: SessionBackend | None = None,
) -> Session:
    """Continue a stopped or crashed run from its last completed step, with the config it started with
    (plus `overrides`, e.g. more rounds or another mode)."""
    store = RunStore.open(run_dir)
    try:
        manifest = store.manifest
        config = config_from_data(manifest.config, overrides, source=f"{store.path}/manifest.json")
        task, task_notice = _stored_task(store, manifest)
        state_mode = store.state.mode
        parts = build_parts(config, mode=mode or state_mode or config.get("session", "mode"), env=env,
                            backend=backend)
        if task_notice:
            parts = replace(parts, notice=" ".join(n for n in (task_notice, parts.notice) if n))
    except BaseException:
        store.close()
        raise
    return _session(task, store, config, parts, driver, on_event, ledger)


def _stored_task(store: RunStore, manifest: Manifest) -> tuple[Task, str]:
    """The run folder's own copy of the task, checked against the hash the run started with, and a notice
    when the file the run was started from has changed or gone since (the copy is evaluated either way)."""
    copy = store.task_copy()
    if not copy.is_file():
        raise UsageError(f"{store.path}: the run folder has no task.py")
    task = load_task(copy)
    if task.sha256 != manifest.task_sha256:
        raise UsageError(f"{copy}: the task copy was changed since the run started (hash mismatch)")
    origin = Path(manifest.task_path) if manifest.task_path else None
    name = manifest.task_name or (task_name_of(origin) if origin is not None else task.name)
    notice = ""
    if origin is not None and not origin.is_file():
        notice = f"{origin} no longer exists; the run evaluates its own copy of the task ({copy})."
    elif origin is not None:
        try:
            changed = origin.read_text(encoding="utf-8") != task.source
        except (OSError, UnicodeDecodeError):
            changed = True
        if changed:
            notice = (f"{origin} changed since the run started; the run evaluates its own copy of the task "
                      f"({copy}), as it started.")
    return replace(task, name=name, origin=origin), notice


def _session(task: Task, store: RunStore, config: Config, parts: Parts, driver: Driver | None,
             on_event: EventHook | None, ledger: UsageLedger | None) -> Session:
    policy = SessionPolicy.from_config(config)
    if parts.mode == "manual" and driver is None:
        store.close()
        raise ConfigError("manual mode needs a person at the keyboard: use cudaforge-tui, or --mode review "
                          "in a terminal, or configure a [coder] LLM for --auto")
    return Session(task, store=store, evaluator=parts.evaluator, profiler=parts.profiler, coder=parts.coder,
                   judge=parts.judge, gpu_spec=parts.gpu_spec, policy=policy, mode=parts.mode,
                   format=parts.format, driver=driver, on_event=on_event,
                   ledger=ledger or UsageLedger(policy.dollars), notice=parts.notice,
                   hold=HoldSettings.from_config(config))
