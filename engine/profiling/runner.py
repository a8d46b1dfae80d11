"""Running Nsight Compute on a target program and turning what it printed into a ProfileResult.

Three layers, so async callers can use their own process runner:
- `build_ncu_command` and `prepare_profile` (which metrics, after the chip's availability check);
- `interpret_output`: pure, from ncu's stdout/stderr text + exit status to a `ProfileResult`;
- `run_profile`: the synchronous whole, with an injectable `run_process`.
The default process runner writes stdout/stderr to files (a pipe can fill and block ncu), starts a
new session and kills the whole process group on timeout. engine/evaluation/sandbox.py replaces it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from cudaforge.engine.observe import NCU_WARM_KERNEL, PROFILED_RANGE
from cudaforge.engine.profiling.metrics import (
    MetricPlan,
    default_cache_dir,
    finalize_plan,
    parse_query_metrics,
    plan_metrics,
    query_cache_path,
    read_cached_query,
    write_cached_query,
)
from cudaforge.engine.profiling.parser import (
    CsvParseError,
    ParsedOutput,
    application_exit_code,
    ncu_errors,
    parse_raw_csv,
    says_no_kernels,
    says_permission_denied,
    target_lines,
    tool_lines,
)
from cudaforge.engine.profiling.result import ErrorKind, ProfileResult
from cudaforge.engine.profiling.settings import NcuSettings

NVTX_RANGE = PROFILED_RANGE
PERMISSION_FIX = (
    "GPU performance counters are restricted to admin users (ERR_NVGPUCTRPERM): have an admin add "
    "'options nvidia NVreg_RestrictProfilingToAdminUsers=0' to a file in /etc/modprobe.d/ and reboot "
    "(or reload the nvidia module), or run as root; see https://developer.nvidia.com/ERR_NVGPUCTRPERM"
)
_MAX_READ = 64 << 20


class ProcessResult(Protocol):
    """What a process runner reports: an exit code (None if killed/unknown) and whether it timed out."""

    returncode: int | None
    timed_out: bool


ProcessRunner = Callable[..., ProcessResult]
"""`run(argv, *, cwd, env, timeout_s, stdout_path, stderr_path) -> ProcessResult`; raises
FileNotFoundError when argv[0] cannot be executed."""


@dataclass(frozen=True)
class ProcessOutcome:
    """Result of the built-in runner."""

    returncode: int | None
    timed_out: bool
    seconds: float = 0.0


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def run_process(
    argv: Sequence[str],
    *,
    cwd: str | Path | None,
    env: Mapping[str, str] | None,
    timeout_s: float,
    stdout_path: str | Path,
    stderr_path: str | Path,
) -> ProcessOutcome:
    """Run `argv` in its own session with output to files; on timeout TERM then KILL its group.

    Any process left in the group after the leader exits is killed too. (A descendant that called
    setsid escapes a process group; engine/evaluation/sandbox.py's subreaper sweep covers that case.)
    """
    start = time.monotonic()
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        proc = subprocess.Popen(
            list(argv),
            cwd=str(cwd) if cwd is not None else None,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=3.0)
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid, signal.SIGKILL)
                proc.wait()
        finally:
            _kill_group(proc.pid, signal.SIGKILL)
    return ProcessOutcome(
        returncode=None if timed_out else proc.returncode,
        timed_out=timed_out,
        seconds=time.monotonic() - start,
    )


def build_ncu_command(
    target_argv: Sequence[str],
    *,
    metrics: Sequence[str],
    ncu_path: str = "ncu",
    launch_count: int = 20,
    nvtx_range: str = NVTX_RANGE,
) -> list[str]:
    """The ncu command line. Clocks are left alone (`--clock-control none`: never lock or change the
    card's clocks); only kernels launched inside `torch.cuda.nvtx.range(nvtx_range)` are profiled;
    at most `launch_count` of them; raw page as CSV with the given metrics."""
    if not target_argv:
        raise ValueError("target_argv is empty")
    if launch_count < 1:
        raise ValueError("launch_count must be >= 1")
    return [
        ncu_path,
        "--clock-control",
        "none",
        "--nvtx",
        "--nvtx-include",
        f"{nvtx_range}/",
        "--launch-count",
        str(int(launch_count) + 1),  # + a profile spare's warm-up kernel (NCU_WARM_KERNEL), dropped from the report
        "--csv",
        "--page",
        "raw",
        "--metrics",
        ",".join(metrics),
        *target_argv,
    ]


def resolve_ncu(path: str, which: Callable[[str], str | None] = shutil.which) -> str | None:
    """Absolute path of the ncu executable, or None when it cannot be found."""
    if os.sep in path:
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    return which(path)


def query_available_metrics(
    ncu_path: str,
    chip: str = "",
    *,
    cache_dir: str | Path | None = None,
    run: ProcessRunner = run_process,
    timeout_s: float = 60.0,
) -> frozenset[str] | None:
    """Base metric names the chip offers, from `ncu --query-metrics --chip <chip>` (no GPU needed),
    cached on disk per ncu binary and chip. Without a chip, the local device is queried. None when
    the query fails: the run then requests every candidate and decides from the CSV columns."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    cache_file = query_cache_path(cache, ncu_path, chip)
    cached = read_cached_query(cache_file)
    if cached is not None:
        return cached
    argv = [ncu_path, "--query-metrics"] + (["--chip", chip] if chip else [])
    with tempfile.TemporaryDirectory(prefix="cf-ncu-query-") as tmp:
        out = Path(tmp) / "stdout.txt"
        err = Path(tmp) / "stderr.txt"
        try:
            outcome = run(argv, cwd=tmp, env=None, timeout_s=timeout_s, stdout_path=out, stderr_path=err)
        except OSError:
            return None
        if outcome.timed_out or outcome.returncode != 0:
            return None
        text = _read(out)
    names = parse_query_metrics(text)
    if not names:
        return None
    with contextlib.suppress(OSError):  # a read-only cache dir costs one query per run, nothing more
        write_cached_query(cache_file, text)
    return names


@dataclass(frozen=True)
class PreparedProfile:
    """A ready-to-run ncu command and the metric plan it implements."""

    command: tuple[str, ...]
    plan: MetricPlan
    chip: str
    timeout_s: float


def prepare_profile(
    target_argv: Sequence[str],
    *,
    settings: NcuSettings,
    ncu_path: str,
    chip: str = "",
    cache_dir: str | Path | None = None,
    run: ProcessRunner = run_process,
    nvtx_range: str = NVTX_RANGE,
) -> PreparedProfile:
    """Check the configured metrics against the chip (cached query), substitute, build the command."""
    available = query_available_metrics(ncu_path, chip, cache_dir=cache_dir, run=run)
    plan = plan_metrics(settings.metrics(), available)
    command = build_ncu_command(
        target_argv,
        metrics=plan.collect,
        ncu_path=ncu_path,
        launch_count=settings.launch_count,
        nvtx_range=nvtx_range,
    )
    return PreparedProfile(command=tuple(command), plan=plan, chip=chip, timeout_s=settings.timeout_s)


def _read(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            data = fh.read(_MAX_READ)
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")


TARGET_STDERR_LINES = 20  # of a failed target's own stderr, kept in its ProfileResult


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def interpret_output(
    stdout: str,
    stderr: str,
    *,
    returncode: int | None,
    timed_out: bool,
    plan: MetricPlan,
    command: Sequence[str] = (),
    wall_s: float = 0.0,
    chip: str = "",
    timeout_s: float | None = None,
    launch_count: int | None = None,
    nvtx_range: str = NVTX_RANGE,
) -> ProfileResult:
    """Classify an ncu run from what it printed. Pure: the tests feed it the H200 fixtures.

    Order: timeout, counter permission, unreadable CSV, failed target (partial kernels kept), no
    CSV at all, no kernels in the range, success.
    """
    text = f"{stdout}\n{stderr}"
    messages = tool_lines(text)
    common: dict[str, Any] = {
        "requested_metrics": plan.requested,
        "collected_metrics": plan.collect,
        "command": tuple(command),
        "wall_s": wall_s,
        "returncode": returncode,
        "chip": chip,
        "log_tail": "\n".join(messages[-12:]),
    }

    def fail(
        kind: ErrorKind, message: str, parsed: ParsedOutput | None = None, p: MetricPlan = plan
    ) -> ProfileResult:
        return ProfileResult(
            ok=False,
            error_kind=kind,
            message=message,
            kernels=parsed.kernels if parsed else (),
            device=parsed.device if parsed else {},
            substitutions=dict(p.substitutions),
            absent_metrics=p.absent,
            absent_reasons=dict(p.absent_reasons),
            **common,
        )

    if timed_out:
        limit = f" within {timeout_s:g} s" if timeout_s else ""
        lc = f" (now {launch_count})" if launch_count else ""
        return fail(
            "timeout",
            f"ncu did not finish{limit} and was killed; raise [ncu] timeout_s or lower [ncu] launch_count{lc}",
        )
    if says_permission_denied(text):
        return fail("permission_denied", PERMISSION_FIX)
    try:
        parsed = parse_raw_csv(stdout)
        if not parsed.found_header and stderr:
            parsed = parse_raw_csv(stderr)
    except CsvParseError as exc:
        return fail(
            "parse_error", f"could not read ncu's CSV output ({exc}); run the command by hand to see it"
        )
    # A profile spare's warm-up kernel (observe.NCU_WARM_KERNEL) set up ncu's session before the job: not the
    # candidate's.
    # ncu was asked for one launch more than `launch_count` for it: a run without the warm-up keeps launch_count.
    kernels = tuple(k for k in parsed.kernels if k.name != NCU_WARM_KERNEL)
    parsed = dataclasses.replace(parsed, kernels=kernels[:launch_count] if launch_count else kernels)
    final = finalize_plan(plan, parsed.columns) if parsed.found_header else plan
    app_rc = application_exit_code(text)
    said = ncu_errors(text)  # ncu's own errors, its report of the target's exit code aside
    if app_rc is not None or (returncode not in (0, None) and not parsed.kernels):
        if app_rc is not None:
            what = f"the profiled program exited with code {app_rc} under ncu"
        else:
            what = f"ncu exited with code {returncode}"
            if said:
                what += f": {said[0]}"
        own = target_lines(stderr)
        if own:
            hint = f"; its last words: {own[-1]}"
        else:
            hint = "; it printed nothing (killed from outside, or it crashed before it could say why)"
        if parsed.kernels:
            hint += f"; {len(parsed.kernels)} kernel(s) were profiled before it failed"
        if app_rc is not None and said:  # ncu stopped it (a driver resource taken, say), and said why
            hint += f"; ncu said: {' '.join(said)}"
        failed = fail("target_failed", _one_line(what + hint, 600), parsed, final)
        return dataclasses.replace(failed, target_stderr="\n".join(own[-TARGET_STDERR_LINES:]))
    if not parsed.found_header:
        if says_no_kernels(text) or returncode == 0:
            return fail("no_kernels", _no_kernels_message(nvtx_range))
        return fail("parse_error", "ncu printed no CSV report; run the command by hand to see its output")
    if not parsed.kernels:
        return fail("no_kernels", _no_kernels_message(nvtx_range), parsed, final)
    note = ""
    if final.substitutions:
        note += f"; {len(final.substitutions)} metric(s) substituted"
    if final.absent:
        note += f"; {len(final.absent)} absent: {', '.join(final.absent)}"
    if said:  # the target exited cleanly here: none of them is its exit code
        note += f"; ncu reported: {said[0]}"
    return ProfileResult(
        ok=True,
        error_kind="none",
        message=_one_line(f"profiled {len(parsed.kernels)} kernel launch(es){note}", 600),
        kernels=parsed.kernels,
        device=parsed.device,
        substitutions=dict(final.substitutions),
        absent_metrics=final.absent,
        absent_reasons=dict(final.absent_reasons),
        **common,
    )


def _no_kernels_message(nvtx_range: str) -> str:
    return (
        f"no kernel was profiled inside torch.cuda.nvtx.range({nvtx_range!r}): the candidate launched no CUDA "
        "kernel there (PyTorch fallback, cached result?) or ncu could not see the NVTX range"
    )


def run_profile(
    target_argv: Sequence[str],
    *,
    settings: NcuSettings | None = None,
    chip: str = "",
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    cache_dir: str | Path | None = None,
    work_dir: str | Path | None = None,
    nvtx_range: str = NVTX_RANGE,
    run: ProcessRunner = run_process,
    which: Callable[[str], str | None] = shutil.which,
) -> ProfileResult:
    """Profile `target_argv` (the worker in profile mode) under ncu and return the result.

    `chip` (e.g. "gh100", from the GPU spec) selects the metric availability list; empty means
    "ask the local device". ncu's output files go to `work_dir` (a temp dir when None). The caller
    decides whether profiling is enabled; this function always tries.
    """
    settings = settings or NcuSettings()
    ncu = resolve_ncu(settings.path, which)
    if ncu is None:
        return ProfileResult(
            ok=False,
            error_kind="ncu_missing",
            message=(
                f"ncu not found ('{settings.path}'); install Nsight Compute (it ships with the CUDA toolkit) "
                "and put it on PATH, or set [ncu] path in cudaforge.toml"
            ),
            requested_metrics=settings.metrics(),
        )
    prepared = prepare_profile(
        target_argv,
        settings=settings,
        ncu_path=ncu,
        chip=chip,
        cache_dir=cache_dir,
        run=run,
        nvtx_range=nvtx_range,
    )
    with tempfile.TemporaryDirectory(prefix="cf-ncu-") as tmp:
        folder = Path(work_dir) if work_dir is not None else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        out, err = folder / "ncu_stdout.txt", folder / "ncu_stderr.txt"
        start = time.monotonic()
        try:
            outcome = run(
                list(prepared.command),
                cwd=cwd,
                env=env,
                timeout_s=settings.timeout_s,
                stdout_path=out,
                stderr_path=err,
            )
        except OSError as exc:
            return ProfileResult(
                ok=False,
                error_kind="ncu_missing",
                message=_one_line(f"could not start ncu at {ncu}: {exc}; check [ncu] path in cudaforge.toml"),
                requested_metrics=prepared.plan.requested,
                command=prepared.command,
            )
        wall = time.monotonic() - start
        stdout, stderr = _read(out), _read(err)
    return interpret_output(
        stdout,
        stderr,
        returncode=outcome.returncode,
        timed_out=outcome.timed_out,
        plan=prepared.plan,
        command=prepared.command,
        wall_s=wall,
        chip=chip,
        timeout_s=settings.timeout_s,
        launch_count=settings.launch_count,
        nvtx_range=nvtx_range,
    )
