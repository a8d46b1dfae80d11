"""The `cudaforge` command: eval, profile, doctor (and, as they land, run, resume, export)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any

from . import __version__
from .candidate import load_candidate
from .config import load_config
from .errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_NOT_ACCEPTED,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    CudaforgeError,
)
from .results import EvalResult
from .task import load_task


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
    pr = sub.add_parser("profile", help="profile a candidate's kernels with Nsight Compute and analyze them")
    pr.add_argument("task")
    pr.add_argument("candidate")
    _common(pr)
    pr.add_argument("--keep", action="store_true", help=argparse.SUPPRESS)
    doc = sub.add_parser("doctor", help="check GPU, driver, torch, nvcc, ncu, counters and LLM endpoints")
    _common(doc)
    return parser


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    o: dict[str, Any] = {"eval.device": args.device, "eval.gpu": args.gpu}
    for name, key in (("trials", "eval.trials"), ("timing_trials", "timing.trials"), ("precision", "eval.precision"),
                      ("atol", "eval.atol"), ("rtol", "eval.rtol")):
        if getattr(args, name, None) is not None:
            o[key] = getattr(args, name)
    if getattr(args, "baseline", None):
        o["timing.baselines"] = sorted({"eager", *args.baseline})
    return o


def _eprint(*a: Any) -> None:
    print(*a, file=sys.stderr)


async def _cmd_eval(args: argparse.Namespace) -> int:
    from .evaluator import EvalOptions, Evaluator
    from .report import format_result

    config = load_config(args.config, _overrides(args))
    task = load_task(args.task)
    candidate = load_candidate(args.candidate)
    options = EvalOptions.from_config(config, peak_bandwidth_gbs=_peak_bandwidth(config))
    _eprint(f"evaluating {candidate.format} candidate {args.candidate} on {options.device}"
            + (f":{options.gpu}" if options.device == "cuda" else "") + " …")
    result = await Evaluator(options, keep_workdirs=args.keep).evaluate(task, candidate)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        _eprint(result.message)
    else:
        print(format_result(result))
    return exit_code_for(result)


def _peak_bandwidth(config: Any) -> float | None:
    """DRAM bandwidth of the configured GPU's profile, for the speed-of-light check (None if unknown)."""
    if config.get("eval", "device") != "cuda":
        return None
    try:
        from .gpus import profile_for_device

        profile = profile_for_device(config.get("eval", "gpu"))
        return getattr(profile, "dram_bandwidth_gbs", None) if profile else None
    except Exception:
        return None


def _ncu_settings(config: Any) -> Any:
    from .profiling import NcuSettings

    table = dict(config.section("ncu"))
    return NcuSettings.from_table(table, source=str(config.files[-1]) if config.files else "config") if table \
        else NcuSettings()


async def _cmd_profile(args: argparse.Namespace) -> int:
    from .analyzer import analyze, format_profile
    from .errors import ToolUnavailable
    from .evaluator import EvalOptions, Evaluator
    from .gpus import profile_for_device
    from .profiler import Profiler

    config = load_config(args.config, _overrides(args))
    if config.get("eval", "device") != "cuda":
        raise ToolUnavailable("profiling needs a CUDA device (--device cuda)")
    task = load_task(args.task)
    candidate = load_candidate(args.candidate)
    gpu = profile_for_device(config.get("eval", "gpu"))
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
    from .doctor import doctor_exit_code, format_checks, run_doctor

    config = load_config(args.config, _overrides(args))
    endpoints = []
    for role in ("coder", "judge"):
        table = dict(config.section(role))
        if not table or table.get("provider") == "heuristic":
            continue
        from .llm import LLMSettings

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


COMMANDS = {"eval": _cmd_eval, "profile": _cmd_profile, "doctor": _cmd_doctor}


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
