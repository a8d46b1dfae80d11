"""The `cudaforge` command: eval, profile, doctor, run, resume, export, runs."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cudaforge.engine import __version__
from cudaforge.engine.candidate import load_candidate
from cudaforge.engine.config import load_config
from cudaforge.engine.errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_NOT_ACCEPTED,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    CudaforgeError,
    UsageError,
)
from cudaforge.engine.results import EvalResult
from cudaforge.engine.task import load_task


def exit_code_for(result: EvalResult) -> int:
    if result.accepted:
        return EXIT_OK
    if result.outcome == "task_error":
        return EXIT_BAD_INPUT
    if result.outcome == "unavailable":
        return EXIT_UNAVAILABLE
    return EXIT_NOT_ACCEPTED


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="config file (layered over ./cudaforge.toml)")
    p.add_argument("--device", choices=("cuda", "cpu"), help="where candidates run (default from config: cuda)")
    p.add_argument("--gpu", type=int, metavar="N", help="CUDA device index")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout; messages go to stderr")
    p.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cudaforge", description="Optimize a PyTorch module's CUDA kernels.")
    parser.add_argument("--version", action="version", version=f"cudaforge {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    ev = sub.add_parser("eval", help="compile, check and time one candidate against its task")
    ev.add_argument("task", help="KernelBench-format task file")
    ev.add_argument("candidate", help="file defining ModelNew")
    _common(ev)
    ev.add_argument("--trials", type=int, help="correctness trials (default 5)")
    ev.add_argument("--timing-trials", type=int, help="timed calls per side")
    ev.add_argument("--precision", choices=("fp32", "fp16", "bf16"))
    ev.add_argument("--atol", type=float)
    ev.add_argument("--rtol", type=float)
    ev.add_argument("--baseline", action="append", choices=("eager", "compile"),
                    help="add a timing baseline (eager is always timed)")
    ev.add_argument("--keep", action="store_true", help="keep the worker's folder (logs, spec) for inspection")
    add_gpu_memory_flag(ev)
    pr = sub.add_parser("profile", help="profile a candidate's kernels with Nsight Compute and analyze them")
    pr.add_argument("task")
    pr.add_argument("candidate")
    _common(pr)
    pr.add_argument("--keep", action="store_true", help=argparse.SUPPRESS)
    doc = sub.add_parser("doctor", help="check GPU, driver, torch, nvcc, ncu, counters and LLM endpoints")
    _common(doc)
    run = sub.add_parser("run", help="optimize one task (a file) or a batch (a folder or several files)")
    run.add_argument("targets", nargs="+", metavar="TASK", help="task file(s) or folder(s) of tasks")
    _common(run)
    _session_flags(run)
    run.add_argument("--runs", metavar="DIR", help="where run folders go (default [run] folder: runs)")
    run.add_argument("--jobs", type=int, default=4, help="batch: sessions in flight at once (default 4)")
    _ray_flags(run)
    add_gpu_memory_flag(run)
    res = sub.add_parser("resume", help="continue a stopped or crashed run (or batch) from its last completed step")
    res.add_argument("run_dir", metavar="RUN")
    _common(res)
    _session_flags(res)
    res.add_argument("--jobs", type=int, default=4, help=argparse.SUPPRESS)
    _ray_flags(res)
    exp = sub.add_parser("export", help="write a run's best candidate as a module needing only torch, plus a report")
    exp.add_argument("run_dir", metavar="RUN")
    exp.add_argument("--out", required=True, help="the .py file to write (the report goes beside it as .md)")
    exp.add_argument("--format", choices=("standalone", "inline"), default="standalone",
                     help="standalone: the candidate's format with our NVRTC helper inlined; inline: KernelBench "
                          "load_inline format")
    exp.add_argument("--round", type=int, help="export this round instead of the best")
    exp.add_argument("--report", help="where to write the markdown report")
    exp.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    runs = sub.add_parser("runs", help="list runs; prune old runs and build caches")
    runs.add_argument("--runs", metavar="DIR", help="run folder root (default [run] folder)")
    runs.add_argument("--config", metavar="FILE")
    runs.add_argument("--json", action="store_true")
    runs.add_argument("--prune", action="store_true", help="delete old runs (see --keep, --older-than)")
    runs.add_argument("--keep", type=int, help="with --prune: keep the newest N runs")
    runs.add_argument("--older-than", type=float, metavar="DAYS", help="with --prune: delete runs older than DAYS")
    runs.add_argument("--prune-cache", type=float, metavar="DAYS",
                      help="delete build, NVRTC and result cache entries unused for DAYS")
    runs.add_argument("--dry-run", action="store_true", help="say what would be deleted")
    runs.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    return parser


def add_gpu_memory_flag(p: argparse.ArgumentParser) -> None:
    """`--gpu-memory-gb N` ([run] gpu_memory_gb): shared by `eval`, `run` and `cudaforge-tui`."""
    p.add_argument("--gpu-memory-gb", type=float, metavar="N",
                   help="cap each worker's device memory at N GiB (emulates a smaller card; CUDA only)")


def _session_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mode", choices=("review", "auto", "manual"), help="review: ask at each decision point")
    p.add_argument("--auto", action="store_true", help="short for --mode auto")
    p.add_argument("--rounds", type=int, help="maximum rounds (default [session] rounds: 10)")
    p.add_argument("--target-speedup", type=float, help="stop once the best speedup reaches this")
    p.add_argument("--format", dest="cand_format", choices=("nvrtc", "inline", "cpu", "triton"),
                   help="candidate format the Coder writes (triton runs in Triton's interpreter on --device cpu)")


def _ray_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ray", action="store_true",
                   help="batch: evaluate on a Ray cluster, one actor per GPU (needs the [ray] extra)")
    p.add_argument("--ray-address", metavar="ADDR",
                   help="batch: the Ray cluster to use (host:port of its head); implies --ray")


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    o: dict[str, Any] = {"eval.device": args.device, "eval.gpu": args.gpu}
    for name, key in (("trials", "eval.trials"), ("timing_trials", "timing.trials"), ("precision", "eval.precision"),
                      ("atol", "eval.atol"), ("rtol", "eval.rtol")):
        if getattr(args, name, None) is not None:
            o[key] = getattr(args, name)
    if getattr(args, "gpu_memory_gb", None) is not None:
        o["run.gpu_memory_gb"] = args.gpu_memory_gb
    if getattr(args, "baseline", None):
        o["timing.baselines"] = sorted({"eager", *args.baseline})
    for name, key in (("rounds", "session.rounds"), ("target_speedup", "session.target_speedup"),
                      ("cand_format", "session.format"), ("runs", "run.folder")):
        if getattr(args, name, None) is not None:
            o[key] = getattr(args, name)
    mode = "auto" if getattr(args, "auto", False) else getattr(args, "mode", None)
    if mode:
        o["session.mode"] = mode
    if getattr(args, "ray", False) or getattr(args, "ray_address", None):
        o["batch.backend"] = "ray"
        o["batch.address"] = getattr(args, "ray_address", None)
    return o


def _eprint(*a: Any) -> None:
    print(*a, file=sys.stderr)


async def _cmd_eval(args: argparse.Namespace) -> int:
    from cudaforge.engine.evaluation.evaluator import EvalOptions, Evaluator
    from cudaforge.engine.result_text import format_result

    config = load_config(args.config, _overrides(args))
    task = load_task(args.task)
    candidate = load_candidate(args.candidate)
    options = EvalOptions.from_config(config, peak_bandwidth_gbs=_peak_bandwidth(config))
    _eprint(f"evaluating {candidate.format} candidate {args.candidate} on {options.device}"
            + (f":{options.gpu}" if options.device == "cuda" else "") + " …")
    result = await _with_phase_line(Evaluator(options, keep_workdirs=args.keep), task, candidate)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        _eprint(result.message)
    else:
        print(format_result(result))
    return exit_code_for(result)


async def _with_phase_line(evaluator: Any, task: Any, candidate: Any) -> Any:
    """Evaluate with the phase in progress and its time so far on stderr (a build can take minutes)."""
    from cudaforge.engine.evaluation.progress import PhaseLine

    line = PhaseLine()

    async def ticking() -> None:
        while True:
            await asyncio.sleep(1.0)
            line.tick()

    ticker = asyncio.ensure_future(ticking())
    try:
        return await evaluator.evaluate(task, candidate, on_progress=line.update)
    finally:
        ticker.cancel()
        line.close()


def _peak_bandwidth(config: Any) -> float | None:
    """DRAM bandwidth of the configured GPU's profile, for the speed-of-light check (None if unknown)."""
    if config.get("eval", "device") != "cuda":
        return None
    try:
        from cudaforge.engine.gpu.specs import gpu_spec_for_device

        profile = gpu_spec_for_device(config.get("eval", "gpu"))
        return getattr(profile, "dram_bandwidth_gbs", None) if profile else None
    except Exception:
        return None


def _ncu_settings(config: Any) -> Any:
    from cudaforge.engine.profiling import NcuSettings

    table = dict(config.section("ncu"))
    return NcuSettings.from_table(table, source=str(config.files[-1]) if config.files else "config") if table \
        else NcuSettings()


async def _cmd_profile(args: argparse.Namespace) -> int:
    from cudaforge.engine.errors import ToolUnavailable
    from cudaforge.engine.evaluation.evaluator import EvalOptions, Evaluator
    from cudaforge.engine.evaluation.profiler import Profiler
    from cudaforge.engine.gpu.specs import gpu_spec_for_device
    from cudaforge.engine.profiling.analysis import analyze
    from cudaforge.engine.profiling.render import format_profile

    config = load_config(args.config, _overrides(args))
    if config.get("eval", "device") != "cuda":
        raise ToolUnavailable("profiling needs a CUDA device (--device cuda)")
    task = load_task(args.task)
    candidate = load_candidate(args.candidate)
    gpu = gpu_spec_for_device(config.get("eval", "gpu"))
    evaluator = Evaluator(EvalOptions.from_config(config), keep_workdirs=args.keep)
    _eprint(f"profiling {args.candidate} with ncu …")
    result = await Profiler(evaluator, _ncu_settings(config), chip=getattr(gpu, "chip", "") or "").profile(
        task, candidate)
    analysis = analyze(result, gpu) if (result.ok and gpu is not None) else None
    if args.json:
        print(json.dumps({"profile": result.to_dict(), "analysis": analysis.to_dict() if analysis else None,
                          "gpu": gpu.to_dict() if gpu else None}, indent=2, default=str))
        _eprint(result.message)
    else:
        print(format_profile(result, analysis))
    if result.ok:
        return EXIT_OK
    return EXIT_UNAVAILABLE if result.error_kind in ("ncu_missing", "permission_denied") else EXIT_NOT_ACCEPTED


async def _cmd_doctor(args: argparse.Namespace) -> int:
    from cudaforge.engine.doctor import doctor_exit_code, format_checks, run_doctor

    config = load_config(args.config, _overrides(args))
    endpoints = []
    for role in ("coder", "judge"):
        table = dict(config.section(role))
        if not table or table.get("provider") == "heuristic":
            continue
        from cudaforge.engine.llm import LLMSettings

        s = LLMSettings.from_table(table, section=role, source="config")
        endpoints.append((role, s.resolved_base_url, s.resolved_key_env, s.provider))
    checks = await asyncio.to_thread(run_doctor, device=config.get("eval", "device"),
                                     gpu_index=config.get("eval", "gpu"), ncu_settings=_ncu_settings(config),
                                     endpoints=endpoints)
    if args.json:
        print(json.dumps([c.__dict__ if hasattr(c, "__dict__") else str(c) for c in checks], indent=2, default=str))
    else:
        print(format_checks(checks))
    return doctor_exit_code(checks)


# Stops for a failure that would repeat: the process exits as for bad input or a missing tool.
_STOP_EXIT = {"bad_config": EXIT_BAD_INPUT, "unavailable": EXIT_UNAVAILABLE}


def _session_exit(best_round: int | None, reason: str) -> int:
    if reason == "cancelled":
        return EXIT_INTERRUPTED
    if reason in _STOP_EXIT:
        return _STOP_EXIT[reason]
    return EXIT_OK if best_round is not None else EXIT_NOT_ACCEPTED


async def _cmd_run(args: argparse.Namespace) -> int:
    from cudaforge.engine.session.batch import find_tasks

    config = load_config(args.config, _overrides(args))
    tasks = find_tasks(args.targets)
    single = len(tasks) == 1 and not any(Path(t).is_dir() for t in args.targets)
    if single and config.get("batch", "backend") != "ray":  # on Ray, one task runs as a batch of one
        return await _run_single(args, config, tasks[0])
    return await _run_batch(args, config, tasks)


def _driver_for(mode: str) -> Any:
    from cudaforge.engine.session.console import TerminalDriver
    from cudaforge.engine.session.decisions import AutoApprove

    if mode == "auto":
        return AutoApprove()
    if not sys.stdin.isatty():
        raise UsageError(f"{mode} mode asks at each decision point, but stdin is not a terminal: "
                         "use --auto, or cudaforge-tui")
    return TerminalDriver()


async def _drive(session: Any, args: argparse.Namespace) -> int:
    from cudaforge.engine.session.run_report import format_rounds

    stopped = await session.run()
    rounds_table = format_rounds(session.store)
    if args.json:
        from cudaforge.engine.session.store import RunStore

        store = RunStore(session.store.path, read_only=True)
        print(json.dumps({"run_dir": str(store.path), "stop_reason": stopped.reason, "message": stopped.message,
                          "best_round": stopped.best_round, "best_speedup": stopped.best_speedup,
                          "rounds": [{"round": r.round, "kind": r.kind, "parent": r.parent, "outcome": r.outcome,
                                      "speedup": r.speedup, "tokens": r.tokens, "cost_usd": r.cost_usd}
                                     for r in store.rounds()]}, indent=2))
        _eprint(rounds_table)
    else:
        print(rounds_table)
    return _session_exit(stopped.best_round, stopped.reason)


async def _run_single(args: argparse.Namespace, config: Any, task_path: Path) -> int:
    from cudaforge.engine.session.console import ProgressDisplay
    from cudaforge.engine.session.factory import create_session

    mode = config.get("session", "mode")
    session = create_session(task_path, config, driver=_driver_for(mode) if mode != "auto" else None,
                             on_event=ProgressDisplay(), mode=mode)
    return await _drive(session, args)


async def _run_batch(args: argparse.Namespace, config: Any, tasks: list[Path]) -> int:
    from cudaforge.engine.session.batch import Batch, estimate_cost

    if config.get("session", "mode") != "auto":
        _eprint("cudaforge: a batch runs in auto mode (no questions asked)")
    from cudaforge.engine.session.factory import llm_configured

    if not llm_configured(config, "coder"):
        raise UsageError("a batch needs a Coder LLM: set [coder] provider and model in cudaforge.toml")
    if config.get("batch", "backend") == "ray":
        from cudaforge.engine.session.ray_backend import require_ray

        require_ray()  # before the batch folder is made
    _, text = estimate_cost(config, len(tasks))
    _eprint(f"{len(tasks)} tasks; {text}")
    batch = Batch.create(config.get("run", "folder"), tasks, config)
    _eprint(f"batch folder: {batch.path} (resume: cudaforge resume {batch.path})")
    return await _finish_batch(args, batch, {})


async def _finish_batch(args: argparse.Namespace, batch: Any, overrides: dict[str, Any]) -> int:
    from cudaforge.engine.session.batch import format_summary, run_batch
    from cudaforge.engine.session.console import ProgressDisplay

    displays: dict[str, ProgressDisplay] = {}

    def on_event(task: str, event: Any) -> None:
        if task not in displays:
            displays[task] = ProgressDisplay(prefix=f"[{Path(task).parent.name if Path(task).name == 'task.py' else Path(task).stem}] ",
                                             live=False)
        displays[task](event)

    summary = await run_batch(batch, overrides=overrides, on_event=on_event, jobs=args.jobs)
    if args.json:
        print(json.dumps(summary.to_dict() | {"batch_dir": str(batch.path)}, indent=2))
        _eprint(format_summary(summary))
    else:
        print(format_summary(summary))
        print(f"batch folder: {batch.path}")
    halted = next((r.stop_reason for r in summary.rows if r.stop_reason in _STOP_EXIT), None)
    if halted is not None:
        return _STOP_EXIT[halted]
    return EXIT_OK if summary.correct == summary.tasks else EXIT_NOT_ACCEPTED


async def _cmd_resume(args: argparse.Namespace) -> int:
    from cudaforge.engine.session.batch import Batch
    from cudaforge.engine.session.console import ProgressDisplay
    from cudaforge.engine.session.factory import resume_session
    from cudaforge.engine.session.store import RunStore

    # Flags given now override the run's stored config; everything else stays as the run started.
    overrides = {k: v for k, v in _overrides(args).items() if v is not None}
    if Batch.is_batch(args.run_dir):
        return await _finish_batch(args, Batch.open(args.run_dir), overrides)
    mode = overrides.get("session.mode")
    if mode is None and Path(args.run_dir, "state.json").is_file():
        mode = RunStore(Path(args.run_dir), read_only=True).state.get("mode")
    session = resume_session(args.run_dir, overrides=overrides,
                             driver=_driver_for(mode or "review") if mode != "auto" else None,
                             on_event=ProgressDisplay(), mode=mode)
    return await _drive(session, args)


async def _cmd_export(args: argparse.Namespace) -> int:
    from cudaforge.engine.session.run_report import export_best

    out, report = await asyncio.to_thread(export_best, args.run_dir, args.out, format=args.format,
                                          report=args.report, round=args.round)
    _eprint(f"wrote {out} and {report}")
    return EXIT_OK


async def _cmd_runs(args: argparse.Namespace) -> int:
    from cudaforge.engine.evaluation.evaluator import default_cache_dir
    from cudaforge.engine.session.store import list_runs, prune_cache, prune_runs

    config = load_config(args.config, {"run.folder": args.runs})
    root = Path(config.get("run", "folder"))
    removed: list[str] = []
    if args.prune:
        if args.keep is None and args.older_than is None:
            raise UsageError("--prune needs --keep N or --older-than DAYS")
        removed = [str(p) for p in prune_runs(root, keep=args.keep, older_than_days=args.older_than,
                                              dry_run=args.dry_run)]
    cache_freed = None
    if args.prune_cache is not None:
        cache = config.get("run", "cache_dir")
        cache_dir = Path(cache).expanduser() if cache else default_cache_dir()
        cache_freed = prune_cache(cache_dir, older_than_days=args.prune_cache, dry_run=args.dry_run)
    runs = list_runs(root)
    if args.json:
        print(json.dumps({"runs": [{"run_id": r.run_id, "path": str(r.path), "task": r.task_name, "status": r.status,
                                    "rounds": r.rounds, "best_speedup": r.best_speedup, "cost_usd": r.cost_usd,
                                    "created": r.created, "stop_reason": r.stop_reason, "bytes": r.size_bytes}
                                   for r in runs], "removed": removed,
                          "cache_pruned": list(cache_freed) if cache_freed else None}, indent=2))
        return EXIT_OK
    verb = "would remove" if args.dry_run else "removed"
    for p in removed:
        print(f"{verb} {p}")
    if cache_freed is not None:
        print(f"cache: {verb} {cache_freed[0]} entries, {cache_freed[1] / 2**20:.1f} MiB")
    if not runs:
        print(f"no runs in {root}")
        return EXIT_OK
    print(f"{'run':<44} {'task':<20} {'status':<12} {'rounds':>6} {'best':>7} {'cost':>8} {'size':>8}")
    for r in runs:
        best = f"{r.best_speedup:.2f}x" if r.best_speedup is not None else "-"
        print(f"{r.run_id:<44.44} {r.task_name:<20.20} {r.status:<12} {r.rounds:>6} {best:>7} ${r.cost_usd:>7.3f} "
              f"{r.size_bytes / 2**20:>6.1f}MB")
    return EXIT_OK


COMMANDS = {"eval": _cmd_eval, "profile": _cmd_profile, "doctor": _cmd_doctor, "run": _cmd_run,
            "resume": _cmd_resume, "export": _cmd_export, "runs": _cmd_runs}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_BAD_INPUT if exc.code not in (0, None) else EXIT_OK
    try:
        return asyncio.run(COMMANDS[args.command](args))
    except CudaforgeError as exc:
        _eprint(f"cudaforge: error: {exc.message}")
        if getattr(args, "debug", False):
            raise
        return exc.exit_code
    except KeyboardInterrupt:
        _eprint("cudaforge: interrupted")
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
