"""On-disk caches of evaluation and profile results of identical candidates.

A result is reused only when everything that decides it is the same: the candidate's and the task's
source, the evaluation settings that change what is measured, the device (GPU name, driver), the
software (Python, torch, CUDA, cudaforge and a hash of the evaluation code itself). The key is a pure
function of those values (`eval_cache_key`), so it can be tested without running anything.

What is cached, and why only that: outcomes that a re-run would reproduce. `ok` (accepted),
`compile_error` and `wrong_result` are stored; timeouts, crashes, CUDA errors, OOM, runtime errors,
task errors, unavailable devices and integrity failures are not (they can depend on load, on
timing noise or on the machine's state, and a re-run is the user's way to check them). A result that
carries a `gpu_shared` finding is never stored either: other processes were on the GPU, so its
timings may be disturbed. Profiles are stored only when ncu succeeded.

Seeds: a random base seed (the default, `[eval] seed` unset) is part of the key as `None`, so an
identical candidate reuses a result measured on another random draw (one it could not predict
either); a fixed seed is keyed by its value, so reproducing a run never gets a random draw's result.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from cudaforge.engine.fsutil import atomic_write_json
from cudaforge.engine.results import EvalResult, to_dict

CACHEABLE_OUTCOMES = frozenset({"ok", "compile_error", "wrong_result"})
KEY_VERSION = 1
# The evaluation settings that change what a result says (timeouts, paths and limits do not).
EVAL_RELEVANT = ("device", "precision", "trials", "seed", "atol", "rtol", "second_distribution", "timing",
                 "integrity_policy", "speed_of_light_margin", "peak_bandwidth_gbs", "peaks", "gpu_memory_gb")
_ENGINE = Path(__file__).resolve().parent.parent  # engine/
_CODE_FILES = ("worker/harness.py", "worker/pipeline.py", "worker/entry.py", "worker/failures.py", "worker/job.py",
               "worker/timing.py", "worker/compare.py", "integrity/registry.py", "integrity/static.py",
               "integrity/runtime.py", "integrity/outputs.py", "integrity/evidence.py", "results.py", "observe.py", "speed_of_light.py", "nvrtc.py", "evaluation/evaluator.py", "worker/triton_support.py", "worker/memory.py")


def _canonical(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def eval_cache_key(candidate_source: str, task_source: str, settings: Mapping[str, Any],
                   environment: Mapping[str, Any]) -> str:
    """The cache key of one evaluation: sha256 over the sources' hashes, settings and environment."""
    material = {
        "v": KEY_VERSION,
        "candidate": hashlib.sha256(candidate_source.encode()).hexdigest(),
        "task": hashlib.sha256(task_source.encode()).hexdigest(),
        "settings": _canonical(settings),
        "environment": _canonical(environment),
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()


def profile_cache_key(eval_key: str, ncu: Mapping[str, Any]) -> str:
    """The profile's key: the evaluation key plus the ncu settings, chip and binary identity."""
    material = {"v": KEY_VERSION, "eval": eval_key, "ncu": _canonical(ncu)}
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()


def eval_settings(options: Any) -> dict[str, Any]:
    """The evaluation-relevant part of an EvalOptions."""
    return {name: to_dict(getattr(options, name, None)) for name in EVAL_RELEVANT}


# ------------------------------------------------------------------ environment (cheap, no torch import)


@lru_cache(maxsize=1)
def code_hash() -> str:
    """Hash of the evaluation code, so an edited worker never serves results of the old one."""
    h = hashlib.sha256()
    for rel in _CODE_FILES:
        with contextlib.suppress(OSError):
            h.update(rel.encode() + b"\0" + (_ENGINE / rel).read_bytes())
    return h.hexdigest()[:24]


@lru_cache(maxsize=1)
def software_versions() -> dict[str, str]:
    """Python, torch, torch's CUDA, triton and cudaforge versions, read without importing torch."""
    out = {"python": platform.python_version()}
    for dist, name in (("torch", "torch"), ("triton", "triton"), ("cudaforge-tui", "cudaforge")):
        try:
            out[name] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "unknown"
    with contextlib.suppress(Exception):
        spec = importlib.util.find_spec("torch")
        if spec is not None and spec.origin:
            text = (Path(spec.origin).parent / "version.py").read_text()
            m = re.search(r"^cuda\s*(?::\s*[^=]+)?=\s*['\"]?([^'\"\n]+)", text, re.M)
            out["torch_cuda"] = m.group(1).strip() if m else "none"
            m = re.search(r"^__version__\s*(?::\s*[^=]+)?=\s*['\"]([^'\"]+)", text, re.M)
            if m:
                out["torch"] = m.group(1)
    out["code"] = code_hash()
    return out


@lru_cache(maxsize=16)
def device_identity(device: str, gpu: int) -> dict[str, str]:
    """GPU name and driver (nvidia-smi) for cuda; the CPU model for cpu."""
    if device != "cuda":
        model = platform.machine()
        with contextlib.suppress(OSError):
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
        return {"device": "cpu", "name": model}
    exe = shutil.which("nvidia-smi")
    name, driver = "unknown", "unknown"
    if exe is not None:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired, ValueError):
            out = subprocess.run([exe, "--query-gpu=name,driver_version", "--format=csv,noheader", "-i", str(gpu)],
                                 capture_output=True, text=True, timeout=10, check=False).stdout.strip()
            if out:
                name, driver = (x.strip() for x in out.splitlines()[0].split(",", 1))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return {"device": "cuda", "name": name, "driver": driver, "visible": visible}


def environment(device: str, gpu: int) -> dict[str, Any]:
    return {"device": device_identity(device, gpu), "software": software_versions()}


# ------------------------------------------------------------------ storage


def _path(root: Path, key: str) -> Path:
    return root / key[:2] / f"{key}.json"


def is_cacheable(result: EvalResult) -> bool:
    """Only deterministic outcomes from undisturbed runs are stored (see the module docstring)."""
    if result.cached or result.outcome not in CACHEABLE_OUTCOMES:
        return False
    if result.exit is not None and result.exit.reason != "ok":
        return False
    return not any(f.name == "gpu_shared" for f in result.findings)


def load_result(root: Path, key: str, candidate_hash: str) -> EvalResult | None:
    """The stored result for `key`, marked cached; None when absent or unreadable."""
    try:
        data = json.loads(_path(root, key).read_text(encoding="utf-8"))
        result = EvalResult.from_dict(data["result"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if data.get("key") != key or result.candidate_hash != candidate_hash:
        return None
    return replace(result, cached=True)


def store_result(root: Path, key: str, result: EvalResult) -> bool:
    if not is_cacheable(result):
        return False
    with contextlib.suppress(OSError):
        atomic_write_json(_path(root, key), {"key": key, "result": result.to_dict()})
        return True
    return False


def load_json(root: Path, key: str) -> dict[str, Any] | None:
    try:
        data = json.loads(_path(root, key).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data.get("value") if isinstance(data, dict) and data.get("key") == key else None


def store_json(root: Path, key: str, value: dict[str, Any]) -> bool:
    with contextlib.suppress(OSError):
        atomic_write_json(_path(root, key), {"key": key, "value": value})
        return True
    return False


class PendingWrites:
    """Cache writes run off the round's path (an fsync'd write each): `start` queues one in the loop's
    executor, `wait` awaits those of the running loop (a closed loop's are forgotten)."""

    def __init__(self) -> None:
        self._futures: set[asyncio.Future[Any]] = set()

    def start(self, write: Callable[..., Any], *args: Any) -> None:
        future = asyncio.get_running_loop().run_in_executor(None, write, *args)
        self._futures = {f for f in self._futures if not f.get_loop().is_closed()} | {future}
        future.add_done_callback(self._futures.discard)

    async def wait(self) -> None:
        mine = [f for f in self._futures if f.get_loop() is asyncio.get_running_loop()]
        if mine:
            await asyncio.gather(*mine, return_exceptions=True)
