"""The Ray actor that evaluates and profiles candidates on one GPU (or, on the CPU device, one CPU
slot) of a cluster node. The driver (engine/session/ray_backend.py) creates one per GPU and calls
its methods; everything here runs on the worker node.

The actor wraps this node's own `Evaluator` and `Profiler` (built by `local_parts`, exactly as a
local session builds them): sandboxed workers, a spare worker kept warm between jobs, and this
node's build, result and profile caches. A job carries the task's and the candidate's source, so no
filesystem is shared with the driver: the task is written into this node's cache (by content hash)
and the candidate is built here. Results go back as `to_dict()` documents; the driver stores them.
This module imports no Ray at import time and nothing of the session (no LLM SDKs).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from cudaforge.engine import __version__
from cudaforge.engine.candidate import Candidate
from cudaforge.engine.config import Config, config_from_data
from cudaforge.engine.evaluation.backend import device_gpu_spec, local_parts
from cudaforge.engine.evaluation.evaluator import default_cache_dir
from cudaforge.engine.fsutil import atomic_write_text
from cudaforge.engine.gpu.lock import gpu_lock_dir
from cudaforge.engine.task import Task


class EvalActor:
    """One GPU (num_gpus=1) or one CPU slot (num_cpus=1) of a node: evaluations and profiles are its
    method calls. Ray makes it an async actor (its methods are coroutines)."""

    def __init__(self, config_data: dict[str, Any]) -> None:
        import ray

        self.device = str(config_data.get("eval", {}).get("device", "cuda"))
        self.node_id = ray.get_runtime_context().get_node_id()
        self.node_ip = ray.util.get_node_ip_address()
        self.hostname = socket.gethostname()
        gpu_ids = ray.get_gpu_ids() if self.device == "cuda" else []
        self.gpu = str(gpu_ids[0]) if gpu_ids else None  # the node's own numbering of its GPUs
        # Ray hides the other GPUs (CUDA_VISIBLE_DEVICES), so ours is device 0 in this process and
        # in its workers; the per-GPU lock is named by the node's GPU id so actors of one node do
        # not wait for each other.
        self.local_index = 0 if os.environ.get("CUDA_VISIBLE_DEVICES") or self.gpu is None else int(self.gpu)
        if self.gpu is not None:
            os.environ["CUDAFORGE_LOCK_DIR"] = str(gpu_lock_dir() / f"ray-gpu{self.gpu}")
        self.gpu_spec = (device_gpu_spec(config_from_data(config_data), gpu=self.local_index)
                            if self.device == "cuda" else None)
        self._parts: dict[str, tuple[Any, Any]] = {}
        self._parts_for(config_data)

    # ---- what the driver asks --------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        """Where this actor runs (and the card's profile): the driver shows and records it."""
        return {"node_id": self.node_id, "node_ip": self.node_ip, "hostname": self.hostname, "gpu": self.gpu,
                "device": self.device, "pid": os.getpid(), "version": __version__, "python": sys.version.split()[0],
                "gpu_spec": self.gpu_spec}

    async def evaluate(self, job: dict[str, Any]) -> dict[str, Any]:
        evaluator, _ = self._parts_for(job["config"])
        return await self._run(evaluator, evaluator, evaluator.evaluate, job)

    async def profile(self, job: dict[str, Any]) -> dict[str, Any]:
        evaluator, profiler = self._parts_for(job["config"])
        if profiler is None:
            raise RuntimeError("profile asked of an actor whose configuration has no profiler (ncu off or CPU)")
        return await self._run(evaluator, profiler, profiler.profile, job)

    async def _run(self, evaluator: Any, part: Any, method: Any, job: dict[str, Any]) -> dict[str, Any]:
        """One job on this node; the answer is the result's `to_dict()` and where it ran. Then the
        next job's spare worker is started."""
        start = time.perf_counter()
        result = await method(self._task(job["task"], evaluator), Candidate.from_source(job["candidate"]),
                              use_cache=bool(job.get("use_cache", True)))
        out = {"result": result.to_dict(), "placement": self._placement(time.perf_counter() - start)}
        self._prewarm(part)
        return out

    def prewarm(self, config_data: dict[str, Any]) -> bool:
        """Start this node's spare workers for `config_data` unless they are waiting already."""
        evaluator, profiler = self._parts_for(config_data)
        return all(self._prewarm(part) for part in (evaluator, profiler) if part is not None)

    async def shutdown(self) -> None:
        """Stop the spare workers before the driver kills this actor (a killed actor cannot)."""
        for parts in self._parts.values():
            for part in parts:
                if part is not None:
                    with contextlib.suppress(Exception):
                        await part.aclose()

    # ---- helpers ------------------------------------------------------------------------------------
    def _parts_for(self, config_data: dict[str, Any]) -> tuple[Any, Any]:
        """This node's evaluator and profiler for a configuration (one pair per distinct config)."""
        key = json.dumps(config_data, sort_keys=True, default=str)
        parts = self._parts.get(key)
        if parts is None:
            parts = local_parts(self._node_config(config_data), self.gpu_spec)
            self._parts[key] = parts
            for part in parts:
                if part is not None:
                    self._prewarm(part)
        return parts

    def _node_config(self, config_data: dict[str, Any]) -> Config:
        """The batch's configuration as it applies on this node: our GPU index, and a cache folder that
        this node can write (the driver's path, if it can be created here, else this node's default)."""
        overrides: dict[str, Any] = {"eval.gpu": self.local_index}
        cache = (config_data.get("run") or {}).get("cache_dir")
        if cache:
            try:
                Path(cache).expanduser().mkdir(parents=True, exist_ok=True)
            except OSError:
                overrides["run.cache_dir"] = str(default_cache_dir())
        return config_from_data(config_data, overrides, source="the batch's configuration")

    @staticmethod
    def _task(data: dict[str, Any], evaluator: Any) -> Task:
        """The task file, written into this node's cache by content (the worker loads it by path)."""
        source = str(data["source"])
        digest = hashlib.sha256(source.encode()).hexdigest()[:16]
        path = evaluator.options.cache_dir / "ray-tasks" / digest / str(data["file_name"])
        if not path.is_file() or path.read_text(encoding="utf-8") != source:
            atomic_write_text(path, source)
        return Task(path=path, source=source, name=str(data["name"]), constants=tuple(data.get("constants") or ()))

    def _placement(self, wall_s: float) -> dict[str, Any]:
        return {"node_id": self.node_id, "node_ip": self.node_ip, "hostname": self.hostname, "gpu": self.gpu,
                "device": self.device, "pid": os.getpid(), "wall_s": round(wall_s, 3)}

    @staticmethod
    def _prewarm(part: Any) -> bool:
        try:
            return bool(part.prewarm())
        except Exception:  # a spare is an optimisation: the next job starts a fresh worker instead
            return False
