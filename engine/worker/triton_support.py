"""Triton candidates inside the worker: their launches, their compile errors, their autotuning.

A Triton candidate's kernels are the Python functions it decorates with `@triton.jit` (autotuned or
not). Triton names a compiled kernel after its function, so on CUDA the profiler's kernel names are
matched against those names; on the CPU (`TRITON_INTERPRET=1`, set by the Evaluator's worker env)
the interpreter launches nothing a profiler sees, so each launch of one of the candidate's jit
functions is counted here, as the extension functions of a C++ candidate are counted by the
BuildRecorder. Triton is imported only when the candidate is a Triton one.
"""

from __future__ import annotations

import ast
import os
import re
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

CANDIDATE_MODULE = "cudaforge_candidate"  # the name the worker imports the candidate under
INTERPRETER_METHOD = "triton_interpreter"  # the timing method of interpreted candidates: no speed claim
INSTALL_HINT = "pip install 'cudaforge-tui[triton]'"

LAUNCH_COUNTS: dict[str, int] = {}  # jit function name -> completed launches of the candidate's kernels
_INSTALLED: list[bool] = []


def jit_function_names(source: str) -> set[str]:
    """Names of the functions the source decorates with triton.jit (directly or under autotune/heuristics)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(_is_jit(d) for d in node.decorator_list):
            names.add(node.name)
    return names


def _is_jit(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    text = ast.unparse(target)
    return text in ("triton.jit", "jit", "tl.jit") or text.endswith(".jit") and "triton" in text


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def preload() -> None:
    """Import triton in a GPU spare while the LLM thinks (when installed), so a Triton round does not
    pay for the import; nothing else is done with it until a Triton candidate arrives."""
    import importlib.util

    if importlib.util.find_spec("triton") is not None:
        import triton.language  # noqa: F401


def install() -> None:
    """Count completed launches of the candidate's jit functions (compiled or interpreted), and give the
    interpreter's autotuner a CPU timer (Triton's own benchmarker needs a GPU driver)."""
    if _INSTALLED:
        return
    _INSTALLED.append(True)
    try:
        from triton.runtime import autotuner, jit
    except ImportError:
        return  # reported when the candidate imports triton itself (missing_triton)
    classes: list[Any] = [jit.JITFunction]
    if interpreting():
        from triton.runtime import interpreter

        classes.append(interpreter.InterpretedFunction)
        autotuner.Autotuner.do_bench = property(lambda self: _cpu_bench)  # type: ignore[assignment]
    for cls in classes:
        cls.run = _counted(cls.run)


def _counted(original: Any) -> Any:
    def run(self: Any, *args: Any, grid: Any, warmup: Any, **kwargs: Any) -> Any:
        out = original(self, *args, grid=grid, warmup=warmup, **kwargs)
        fn = getattr(self, "fn", None)
        if not warmup and getattr(fn, "__module__", None) == CANDIDATE_MODULE:  # counted once it ran
            name = getattr(fn, "__name__", "kernel")
            LAUNCH_COUNTS[name] = LAUNCH_COUNTS.get(name, 0) + 1
        return out

    run.__wrapped__ = original  # type: ignore[attr-defined]
    return run


def _cpu_bench(kernel_call: Any, quantiles: Any = None, **_: Any) -> list[float]:
    """Median, fastest and slowest (ms) of three interpreted calls, in the shape Triton's benchmarker
    returns: enough to pick a configuration."""
    samples = []
    kernel_call()
    for _ in range(3):
        start = time.perf_counter()
        kernel_call()
        samples.append((time.perf_counter() - start) * 1e3)
    samples.sort()
    return [statistics.median(samples), samples[0], samples[-1]]


def launches() -> dict[str, int]:
    return {f"triton:{name}": count for name, count in LAUNCH_COUNTS.items()}


def autotune_choices(module: Any) -> dict[str, Any]:
    """The configuration each of the candidate's autotuned kernels chose, per tuning key."""
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return {}
    out: dict[str, Any] = {}
    for value in vars(module).values() if module is not None else ():
        if not isinstance(value, Autotuner):
            continue
        name = getattr(value.base_fn, "__name__", "kernel")
        chosen = {str(key): _config(cfg) for key, cfg in value.cache.items()}
        best = getattr(value, "best_config", None)
        out[name] = {"best": _config(best) if best is not None else None, "by_key": chosen,
                     "configs": len(value.configs), "bench_s": round(float(getattr(value, "bench_time", 0.0)), 4)}
    return out


def _config(cfg: Any) -> dict[str, Any]:
    return {"kwargs": dict(cfg.kwargs), "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}


def build_info(module: Any) -> dict[str, Any]:
    """What the compile result records for a Triton candidate."""
    triton = sys.modules.get("triton")
    return {"version": getattr(triton, "__version__", ""), "interpreter": interpreting(),
            "kernels": sorted(jit_function_names(Path(module.__file__).read_text(encoding="utf-8")))
            if module is not None and getattr(module, "__file__", None) else [],
            "autotune": autotune_choices(module)}


# ------------------------------------------------------------------ errors


def missing_triton(exc: BaseException) -> str | None:
    """The one-line message for a candidate that needs triton where it is not installed."""
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "triton":
        return f"triton is not installed (the candidate imports it): {INSTALL_HINT}"
    return None


def compile_failure(exc: BaseException, candidate_path: str) -> tuple[str, str] | None:
    """(first line, log) when `exc` is Triton failing to compile (or, interpreted, to run) one of the
    candidate's kernels; the log names the candidate's line the way a C++ compiler does, with the
    source line under it, so the TUI's Compiler and Source panes find it. None for anything else."""
    errors = sys.modules.get("triton.compiler.errors")
    chain = _chain(exc)
    compilation = [e for e in chain if errors is not None and isinstance(e, errors.CompilationError)]
    if compilation:  # the innermost error that names a line of the candidate (a called jit function's)
        located = [(e, _compilation_line(e, candidate_path)) for e in reversed(compilation)]
        inner, line = next(((e, n) for e, n in located if n is not None), (compilation[-1], None))
        message = (getattr(inner, "error_message", None) or str(inner).strip().splitlines()[-1]).strip()
        return _report(candidate_path, line, f"{type(inner).__name__}: {message}")
    interp = sys.modules.get("triton.runtime.interpreter")
    interp_error = getattr(interp, "InterpreterError", None)
    if interp_error is None or not isinstance(exc, interp_error) or exc.__cause__ is None:
        return None
    cause = exc.__cause__
    if isinstance(cause, AssertionError):  # tl.device_assert: a runtime failure on a GPU too
        return None
    line = _traceback_line(cause, candidate_path)
    if line is None:
        return None
    return _report(candidate_path, line, f"{type(cause).__name__}: {cause} (Triton interpreter)")


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in out:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def _compilation_line(exc: Any, candidate_path: str) -> int | None:
    """The candidate's line of a CompilationError: its node's line counts from the `def` of the jit
    function whose source it carries (read from the source, not from Triton internals that move)."""
    node_line = getattr(getattr(exc, "node", None), "lineno", None)
    src = getattr(exc, "src", None)
    match = re.search(r"^\s*def\s+(\w+)", src or "", re.MULTILINE)
    if node_line is None or match is None:
        return None
    try:
        tree = ast.parse(Path(candidate_path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return None
    defs = [n.lineno for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.name == match.group(1)]
    before_def = src[:match.start(1)].count("\n") if src else 0  # 0 where the source starts at its `def`
    return defs[0] + node_line - 1 - before_def if len(defs) == 1 else None


def _traceback_line(exc: BaseException, candidate_path: str) -> int | None:
    target = Path(candidate_path).resolve()
    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename and Path(frame.filename).resolve() == target:
            found = frame.lineno
    return found


def _report(candidate_path: str, line: int | None, message: str) -> tuple[str, str]:
    """A log shaped like a C++ compiler's: `file:line: error: message`, then the line itself (the
    traceback goes with the result separately)."""
    first = message.splitlines()[0][:300]
    name = Path(candidate_path).name
    if line is None:
        return f"compile error: {first}", f"{name}: error: {message}\n"
    src_lines = Path(candidate_path).read_text(encoding="utf-8").splitlines()
    text = src_lines[line - 1] if 0 < line <= len(src_lines) else ""
    return f"compile error: line {line}: {first}", f"{name}:{line}: error: {message}\n{line:>6} | {text}\n"
