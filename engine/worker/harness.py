"""The worker's toolkit: phases and progress, loading files, the build recorder, inputs, numerics.

Runs inside the sandbox (see engine/evaluation/sandbox.py); everything here may be crashed or hung by the
candidate, so progress is written to a file before each phase (phase) and the result is written once,
atomically, at the end (write_result). The process entry points are in entry.py, the timing code in
timing.py, the evaluation flow in pipeline.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import sys
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cudaforge.engine.observe import EXT_RANGE
from cudaforge.engine.worker.failures import TaskFailure

_PROGRESS: Path | None = None
_PHASES: dict[str, float] = {}
_PHASE_START: list[Any] = [None, 0.0]
_SUB_PHASES: list[str] = []  # the sub-phases open now, innermost last


def set_progress(path: Path) -> None:
    """Where phase() writes the progress file (the process entry point sets it before the first phase)."""
    global _PROGRESS
    _PROGRESS = path


def reset_phases() -> None:
    """Forget the phases so far (a spare's warm-up is not its job's)."""
    _PHASES.clear()
    _PHASE_START[0], _PHASE_START[1] = None, 0.0


def current_phase() -> str | None:
    return _PHASE_START[0]


def current_step() -> str | None:
    """The phase and its innermost open sub-phase (`correctness.compare`), or the phase alone."""
    if _PHASE_START[0] is None:
        return None
    return f"{_PHASE_START[0]}.{_SUB_PHASES[-1]}" if _SUB_PHASES else _PHASE_START[0]


def phases() -> dict[str, float]:
    """The phase durations so far (the dict the progress file and the report carry)."""
    return _PHASES


PHASE_END_HOOKS: list[Callable[[str], None]] = []  # called with a phase's name as it ends (memory.py: its peak)


def phase(name: str) -> None:
    """Record the start of a phase (for per-phase time limits and for crash reports)."""
    if _PHASE_START[0] is not None:
        for hook in PHASE_END_HOOKS:
            hook(_PHASE_START[0])
    now = time.perf_counter()
    if _PHASE_START[0] is not None:
        _PHASES[_PHASE_START[0]] = round(_PHASES.get(_PHASE_START[0], 0.0) + now - _PHASE_START[1], 4)
    _PHASE_START[0], _PHASE_START[1] = name, now
    if _PROGRESS is not None:
        tmp = _PROGRESS.with_suffix(".tmp")
        tmp.write_text(json.dumps({"phase": name, "since": time.time(), "phases": _PHASES}))
        os.replace(tmp, _PROGRESS)


@contextlib.contextmanager
def sub_phase(name: str) -> Any:
    """Time a part of the current phase, recorded as `<phase>.<name>` beside it: where a phase's time
    goes, without a new progress phase (the per-phase limits stay those of the phase)."""
    start = time.perf_counter()
    _SUB_PHASES.append(name)
    try:
        yield
    finally:
        _SUB_PHASES.pop()
        add_part(name, time.perf_counter() - start)


def add_part(name: str, seconds: float) -> None:
    """Add `seconds` to `<phase>.<name>` of the current phase: a part timed by its own clock (sub_phase's
    record, for work spread over many short stretches)."""
    key = f"{_PHASE_START[0]}.{name}"
    _PHASES[key] = round(_PHASES.get(key, 0.0) + seconds, 4)


def import_file(path: str, module_name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------ build cache and launch hooks


class BuildRecorder:
    """Wraps load_inline: a content-keyed build directory per extension, build time, call counts."""

    def __init__(self, cache_root: Path | None, log_path: Path | None = None) -> None:
        self.cache_root = cache_root
        self.log_path = log_path  # where ninja's output goes as it comes (the app tails it: build progress)
        self.seconds = 0.0
        self.cached = True
        self.builds = 0
        self.calls: dict[str, int] = {}
        self.extension_functions: set[str] = set()
        self.label_calls = False  # label each call for torch.profiler (the CPU pytorch_fallback check)

    def install(self) -> None:
        import torch.utils.cpp_extension as cpp_ext

        original = cpp_ext.load_inline
        recorder = self

        def load_inline(name: str, cpp_sources: Any, cuda_sources: Any = None, *args: Any, **kwargs: Any) -> Any:
            build_dir = recorder.build_dir_for(name, cpp_sources, cuda_sources, args, kwargs)
            if build_dir is not None:  # None where the call named its own build_directory
                build_dir.mkdir(parents=True, exist_ok=True)
                kwargs["build_directory"] = str(build_dir)
                was_built = any(build_dir.glob("*.so"))
            else:
                was_built = False
            start = time.perf_counter()
            with one_builder(Path(kwargs["build_directory"]) if kwargs.get("build_directory") else None):
                if recorder.log_path is not None and not args:  # keyword style (KernelBench's): streamable
                    kwargs.pop("verbose", None)  # the build's output goes to the log either way
                    module = _streamed_build(recorder.log_path, original, name, cpp_sources, cuda_sources, kwargs)
                else:
                    module = original(name, cpp_sources, cuda_sources, *args, **kwargs)
            recorder.seconds += time.perf_counter() - start
            recorder.builds += 1
            recorder.cached = recorder.cached and was_built
            return recorder.wrap_module(module)

        cpp_ext.load_inline = load_inline

    def build_dir_for(self, name: str, cpp_sources: Any, cuda_sources: Any, args: Any,
                      kwargs: dict[str, Any]) -> Path | None:
        """The content-keyed build directory of one load_inline call (None without a cache root, or where the
        call names its own build_directory): the same sources, options and toolchain share one."""
        import torch

        if self.cache_root is None or kwargs.get("build_directory"):
            return None
        key_material = json.dumps(
            [name, cpp_sources, cuda_sources, list(args), sorted((k, repr(v)) for k, v in kwargs.items()),
             torch.__version__, str(torch.version.cuda), sys.version_info[:2]],
            default=str,
        )
        return self.cache_root / f"{name}-{hashlib.sha256(key_material.encode()).hexdigest()[:24]}"

    def wrap_module(self, module: Any) -> Any:
        """A proxy whose functions count their calls: the CPU/inline 'custom code ran' evidence."""
        recorder = self

        class Counted:
            def __getattr__(self, attr: str) -> Any:
                value = getattr(module, attr)
                if callable(value) and not attr.startswith("__"):
                    qual = f"{getattr(module, '__name__', 'ext')}.{attr}"
                    recorder.extension_functions.add(qual)

                    def counted(*a: Any, **k: Any) -> Any:
                        if recorder.label_calls:
                            import torch

                            with torch.profiler.record_function(EXT_RANGE + qual):
                                out = value(*a, **k)
                        else:
                            out = value(*a, **k)  # a call that raises did no work: count it only after
                        recorder.calls[qual] = recorder.calls.get(qual, 0) + 1
                        return out

                    return counted
                return value

        return Counted()


_BUILD_ERROR = "Error building extension"


BUILD_FLOCK = ".cudaforge-build.flock"  # beside torch's own `lock` in an extension's build directory


@contextlib.contextmanager
def one_builder(build_dir: Path | None) -> Any:
    """One build of an extension directory at a time across our processes, through an flock the kernel drops
    with its holder, and no wait on a dead builder's lock: torch's own lock file (cpp_extension's FileBaton,
    `lock` in the build directory) outlives a builder killed with SIGKILL, and every later load_inline of
    that extension waited for it for ever (a batch driver killed in a build, then its resume: the CI runs
    that never finished). Holding our flock, no live builder of ours is in the directory, so a `lock` there
    is a dead one's and goes. None: nothing to take turns on."""
    if build_dir is None:
        yield
        return
    import fcntl

    build_dir.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(build_dir / BUILD_FLOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:  # a folder we cannot lock in: torch's own lock alone, as before
        yield
        return
    try:
        held = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                held = True
                break
            except InterruptedError:  # a signal while waiting: wait on
                continue
            except OSError:  # a file system without flocks: torch's own lock alone, as before
                break
        if held:
            with contextlib.suppress(FileNotFoundError):
                (build_dir / "lock").unlink()
        yield
    finally:
        os.close(fd)  # the flock goes with it


def _streamed_build(log_path: Path, original: Any, name: str, cpp_sources: Any, cuda_sources: Any,
                    kwargs: dict[str, Any]) -> Any:
    """load_inline with ninja's output streamed into `log_path` as it comes rather than held in a pipe
    until the build ends: torch's verbose mode hands ninja our stdout (fd 1), which points at the log
    for the build's duration. torch then raises its build error without the output, so the error gets
    the output back in the form the quiet mode gives ("Error building extension 'x': <ninja's output>")."""
    sys.stdout.flush()
    with open(log_path, "ab", buffering=0) as log:
        start = log.tell()
        saved = os.dup(1)
        os.dup2(log.fileno(), 1)
        try:
            return original(name, cpp_sources, cuda_sources, **kwargs, verbose=True)
        except RuntimeError as exc:
            if not str(exc).startswith(_BUILD_ERROR) or ":" in str(exc):
                raise
            with open(log_path, "rb") as fh:
                fh.seek(start)
                output = fh.read().decode("utf-8", "replace")
            raise RuntimeError(f"{exc}: {output}" if output.strip() else str(exc)) from exc
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)


# ------------------------------------------------------------------ inputs


def to_device(value: Any, device: Any, float_dtype: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        t = value.to(device)
        if t.is_floating_point() and float_dtype is not None and t.dtype != float_dtype:
            t = t.to(float_dtype)
        return t
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device, float_dtype) for v in value)
    return value


def clone_inputs(inputs: list[Any]) -> list[Any]:
    import torch
    from cudaforge.engine.worker.memory import side

    with side("inputs"):  # an OOM here names the inputs side
        return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def shift_distribution(inputs: list[Any], seed: int) -> list[Any]:
    """A second input distribution: scaled and offset, with a few large values mixed in."""
    import torch

    gens: dict[str, Any] = {}
    out = []
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > 0 and x.is_contiguous() \
                and x.dtype == torch.float32:
            # In place and in slices: the draw is ours, and full-size temporaries cost its size again each.
            key = str(x.device)
            if key not in gens:
                gens[key] = torch.Generator(device=x.device).manual_seed(seed)
            flat = x.view(-1)
            step = 1 << 23
            for start in range(0, flat.numel(), step):
                part = flat[start:start + step]
                part.mul_(2.0).add_(0.5)
                mask = torch.rand(part.shape, generator=gens[key], device=x.device) < 0.001
                part.mul_(torch.where(mask, 8.0, 1.0))  # x8 where masked; no host sync (a boolean index syncs)
                del mask
            out.append(x)
        elif isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > 0:
            y = x.float() * 2.0 + 0.5
            key = str(y.device)
            if key not in gens:  # drawn where the tensor lives: no host-side pass over large inputs
                gens[key] = torch.Generator(device=y.device).manual_seed(seed)
            mask = torch.rand(y.shape, generator=gens[key], device=y.device) < 0.001
            y = torch.where(mask, y * 8.0, y)
            out.append(y.to(x.dtype))
        else:
            out.append(x)
    _settle(out)
    return out


def make_inputs(task: types.ModuleType, seed: int, device: Any, float_dtype: Any) -> list[Any]:
    """The task's inputs for `seed`, on `device`.

    On a GPU, `get_inputs()` runs under that device as the default (seeded the same way): a
    32M-element `randn` takes microseconds there instead of ~0.3 s on the host plus the copy. A task
    whose `get_inputs()` cannot run that way is drawn on the host, as KernelBench does. The draws are
    waited for, so no pending work spills into what is measured next."""
    import torch
    from cudaforge.engine.worker.memory import is_oom, side

    raw = None
    if getattr(device, "type", "cpu") == "cuda":
        torch.manual_seed(seed)
        try:
            with torch.device(device), side("inputs"):
                raw = task.get_inputs()
        except Exception as exc:
            if is_oom(exc):
                raise
            raw = None
    try:
        if raw is None:
            torch.manual_seed(seed)
            raw = task.get_inputs()
    except Exception as exc:
        raise TaskFailure(f"get_inputs() raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(raw, (list, tuple)):
        raise TaskFailure(f"get_inputs() must return a list or tuple of inputs, got {type(raw).__name__}")
    with side("inputs"):
        out = [to_device(x, device, float_dtype) for x in raw]
        _settle(out)
    return out


def _settle(values: list[Any]) -> None:
    """Wait for the device work that produced `values` (nothing to do on the CPU)."""
    import torch

    if any(isinstance(v, torch.Tensor) and v.is_cuda for v in values):
        torch.cuda.synchronize()


# ------------------------------------------------------------------ numerics


def set_reference_numerics() -> dict[str, Any]:
    """IEEE fp32 for the correctness reference: TF32 off for matmul and cuDNN."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    return {"matmul_allow_tf32": False, "cudnn_allow_tf32": False, "float32_matmul_precision": "highest"}


def set_default_numerics(defaults: dict[str, Any]) -> dict[str, Any]:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = defaults["matmul_allow_tf32"]
    torch.backends.cudnn.allow_tf32 = defaults["cudnn_allow_tf32"]
    torch.set_float32_matmul_precision(defaults["float32_matmul_precision"])
    return dict(defaults)


def current_numerics() -> dict[str, Any]:
    import torch

    return {
        "matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


# ------------------------------------------------------------------ results and versions


def write_result(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, default=str))
    os.replace(tmp, path)


def versions() -> dict[str, str]:
    import platform

    import torch

    out = {"python": platform.python_version(), "torch": torch.__version__, "cuda": str(torch.version.cuda)}
    with contextlib.suppress(Exception):
        if torch.cuda.is_available():
            out["compute_capability"] = ".".join(map(str, torch.cuda.get_device_capability()))
    return out


def thread_names() -> set[str]:
    return {t.name for t in threading.enumerate()}
