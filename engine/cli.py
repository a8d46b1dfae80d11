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
from cudaforge.engine.config import BASELINES, choices, load_config
from cudaforge.engine.errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_NOT_ACCEPTED,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    CudaforgeError,
    UsageError,
)
from cudaforge.engine.flags import add_device_flags, add_gpu_memory_flag, add_mode_flag, flag_overrides
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
    add_device_flags(p, help_device="where candidates run (default from config: cuda)", help_gpu="CUDA device index")
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
    ev.add_argument("--precision", choices=choices("eval", "precision"))
    ev.add_argument("--atol", type=float)
    ev.add_argument("--rtol", type=float)
    ev.add_argument("--baseline", action="append", choices=BASELINES,
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
    rule = sub.add_parser("rule", help="list a run's rounds held for review and accept or reject them")
    rule.add_argument("run_dir", metavar="RUN")
    act = rule.add_mutually_exclusive_group()
    act.add_argument("--accept", type=int, metavar="ROUND", help="accept this held round (no prompt)")
    act.add_argument("--reject", type=int, metavar="ROUND", help="reject this held round (no prompt)")
    rule.add_argument("--reason", default="", help="a one-line reason recorded with the ruling")
    rule.add_argument("--who", help="who rules (default: the system user name)")
    rule.add_argument("--json", action="store_true", help="list the held rounds as JSON")
    rule.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
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


def _session_flags(p: argparse.ArgumentParser) -> None:
    add_mode_flag(p, help="review: ask at each decision point")
    p.add_argument("--auto", action="store_true", help="short for --mode auto")
    p.add_argument("--rounds", type=int, help="maximum rounds (default [session] rounds: 10)")
    p.add_argument("--target-speedup", type=float, help="stop once the best speedup reaches this")
    p.add_argument("--format", dest="cand_format", choices=choices("session", "format"),
                   help="candidate format the Coder writes (triton runs in Triton's interpreter on --device cpu)")


def _ray_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ray", action="store_true",
                   help="batch: evaluate on a Ray cluster, one actor per GPU (needs the [ray] extra)")
    p.add_argument("--ray-address", metavar="ADDR",
                   help="batch: the Ray cluster to use (host:port of its head); implies --ray")


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    o = flag_overrides(args)
    if getattr(args, "baseline", None):
        o["timing.baselines"] = sorted({"eager", *args.baseline})
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
    from cudaforge.engine.hold import HoldSettings, hold_lines, hold_reasons
    from cudaforge.engine.result_text import format_result
    from cudaforge.engine.speed_of_light import peaks_from_spec

    config = load_config(args.config, _overrides(args))
    task = load_task(args.task)
    candidate = load_candidate(args.candidate)
    spec = _gpu_spec(config)
    options = EvalOptions.from_config(config, peak_bandwidth_gbs=getattr(spec, "dram_bandwidth_gbs", None),
                                      peaks=peaks_from_spec(spec))
    _eprint(f"evaluating {candidate.format} candidate {args.candidate} on {options.device}"
            + (f":{options.gpu}" if options.device == "cuda" else "") + " …")
    result = await _with_phase_line(Evaluator(options, keep_workdirs=args.keep), task, candidate)
    held = hold_reasons(result, HoldSettings.from_config(config), new_best=False)  # every_best: sessions only
    if args.json:
        print(json.dumps({**result.to_dict(), "hold": [{"kind": h.kind, "message": h.message} for h in held]},
                         indent=2))
        _eprint(result.message)
    else:
        print("\n".join([format_result(result, debug=bool(getattr(args, "debug", False))), *hold_lines(held)]))
    return exit_code_for(result)  # a hold is for a person to rule on, not a different verdict


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


def _gpu_spec(config: Any) -> Any:
    """The configured GPU's spec, for the speed of light (None on the CPU device or when unknown)."""
    from cudaforge.engine.evaluation.backend import device_gpu_spec

    return device_gpu_spec(config)


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
        endpoints.append((role, s.resolved_base_url, s.resolved_key_env, s.provider, s.model))
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
        return await _resume_batch(args, Batch.open(args.run_dir), overrides)
    mode = overrides.get("session.mode")
    if mode is None and Path(args.run_dir, "state.json").is_file():
        mode = RunStore(Path(args.run_dir), read_only=True).state.mode or None
    session = resume_session(args.run_dir, overrides=overrides,
                             driver=_driver_for(mode or "review") if mode != "auto" else None,
                             on_event=ProgressDisplay(), mode=mode)
    return await _drive(session, args)


async def _resume_batch(args: argparse.Namespace, batch: Any, overrides: dict[str, Any]) -> int:
    """Resume a batch: its unfinished tasks, and with --rounds N every run with fewer rounds; when nothing
    is left to run, say why for each task (and with --rounds, that is bad input: exit 2)."""
    from cudaforge.engine.session.batch import rows_to_run

    rounds = overrides.get("session.rounds")
    todo, why_not = rows_to_run(batch, rounds)
    if not todo:
        _eprint(f"cudaforge: nothing to resume in {batch.path}:")
        for line in why_not:
            _eprint(f"  {line}")
        if rounds is not None:
            return EXIT_BAD_INPUT
    else:
        extended = [r for r in todo if r.status == "done"]
        if extended:
            _eprint(f"extending {len(extended)} finished run(s) to {rounds} rounds")
    return await _finish_batch(args, batch, overrides)


async def _cmd_export(args: argparse.Namespace) -> int:
    from cudaforge.engine.session.run_report import export_best

    out, report = await asyncio.to_thread(export_best, args.run_dir, args.out, format=args.format,
                                          report=args.report, round=args.round)
    _eprint(f"wrote {out} and {report}")
    return EXIT_OK


async def _cmd_rule(args: argparse.Namespace) -> int:
    """Rulings on held rounds: one from the flags (scripts), else a prompt per held round in a terminal."""
    from cudaforge.engine.session.review import case_lines, rule_offline
    from cudaforge.engine.session.store import RunStore

    if args.accept is not None or args.reject is not None:
        n, kind = (args.accept, "accept") if args.accept is not None else (args.reject, "reject")
        made = rule_offline(args.run_dir, n, kind, args.reason, args.who)
        _eprint(f"round {made.round}: {made.ruling}ed by {made.who}")
        return EXIT_OK
    pending = [r for r in RunStore.open(args.run_dir, read_only=True).rounds() if r.pending]
    if args.json:
        print(json.dumps([{"round": r.round, "speedup": r.result.speedup if r.result else None,
                           "sol_fraction": r.result.sol_fraction if r.result else None,
                           "reasons": [h.message for h in r.hold]} for r in pending], indent=2))
        return EXIT_OK
    if not pending:
        print("no round is held for review")
        return EXIT_OK
    interactive = sys.stdin.isatty()
    for r in pending:
        print(f"== round {r.round} ==")
        print("\n".join(case_lines(r)))
        if not interactive:
            continue
        answer = input(f"round {r.round}: [a]ccept, [r]eject, [s]kip? ").strip().lower()[:1]
        if answer not in ("a", "r"):
            continue
        reason = input("reason (one line, optional): ").strip()
        made = rule_offline(args.run_dir, r.round, "accept" if answer == "a" else "reject", reason, args.who)
        print(f"round {made.round}: {made.ruling}ed by {made.who}")
    if not interactive:
        print(f"rule with: cudaforge rule {args.run_dir} --accept N | --reject N [--reason TEXT]")
    return EXIT_OK


async def _cmd_runs(args: argparse.Namespace) -> int:
    from cudaforge.engine.evaluation.evaluator import default_cache_dir
    from cudaforge.engine.llm.prices import format_cost
    from cudaforge.engine.session.batch import list_batches, prune_batches
    from cudaforge.engine.session.store import list_runs, prune_cache, prune_runs

    config = load_config(args.config, {"run.folder": args.runs})
    root = Path(config.get("run", "folder"))
    removed: list[str] = []
    if args.prune:
        if args.keep is None and args.older_than is None:
            raise UsageError("--prune needs --keep N or --older-than DAYS")
        for prune in (prune_runs, prune_batches):  # a batch is pruned whole, by the same rule as a run
            removed += [str(p) for p in prune(root, keep=args.keep, older_than_days=args.older_than,
                                              dry_run=args.dry_run)]
    cache_freed = None
    if args.prune_cache is not None:
        cache = config.get("run", "cache_dir")
        cache_dir = Path(cache).expanduser() if cache else default_cache_dir()
        cache_freed = prune_cache(cache_dir, older_than_days=args.prune_cache, dry_run=args.dry_run)
    runs = list_runs(root)
    batches = list_batches(root)
    if args.json:
        print(json.dumps({"runs": [_run_json(r) for r in runs],
                          "batches": [{"path": str(b.path), "created": b.created, "tasks": b.tasks, "done": b.done,
                                       "cost_usd": b.dollars, "runs": [_run_json(r) for r in b.runs]}
                                      for b in batches],
                          "removed": removed, "cache_pruned": list(cache_freed) if cache_freed else None}, indent=2))
        return EXIT_OK
    verb = "would remove" if args.dry_run else "removed"
    for p in removed:
        print(f"{verb} {p}")
    if cache_freed is not None:
        print(f"cache: {verb} {cache_freed[0]} entries, {cache_freed[1] / 2**20:.1f} MiB")
    if not runs and not batches:
        print(f"no runs in {root}")
        return EXIT_OK
    print(f"{'run':<44} {'task':<20} {'status':<12} {'rounds':>6} {'best':>7} {'cost':>8} {'size':>8}")
    for r in runs:
        print(_run_line(r))
    for b in batches:
        print(f"{b.path.name}/  batch: {b.done}/{b.tasks} tasks done, {len(b.runs)} runs, cost {format_cost(b.dollars)}")
        for r in b.runs:
            print(_run_line(r, indent="  "))
    return EXIT_OK


def _run_json(r: Any) -> dict[str, Any]:
    return {"run_id": r.run_id, "path": str(r.path), "task": r.task_name, "status": r.status, "rounds": r.rounds,
            "best_speedup": r.best_speedup, "cost_usd": r.cost_usd, "created": r.created,
            "stop_reason": r.stop_reason, "bytes": r.size_bytes}


def _run_line(r: Any, indent: str = "") -> str:
    """One row of the `cudaforge runs` table (a cost nobody priced is "?", never $0)."""
    from cudaforge.engine.llm.prices import format_cost

    best = f"{r.best_speedup:.2f}x" if r.best_speedup is not None else "-"
    return (f"{indent + r.run_id:<44.44} {r.task_name:<20.20} {r.status:<12} {r.rounds:>6} {best:>7} "
            f"{format_cost(r.cost_usd):>8} {r.size_bytes / 2**20:>6.1f}MB")


COMMANDS = {"eval": _cmd_eval, "profile": _cmd_profile, "doctor": _cmd_doctor, "run": _cmd_run,
            "resume": _cmd_resume, "export": _cmd_export, "rule": _cmd_rule, "runs": _cmd_runs}


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
