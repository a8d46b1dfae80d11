"""A batch on a Ray cluster: evaluations and profiles run on the cluster's GPUs (or CPU slots), the
driver keeps everything else.

`RayPool` connects to the cluster (`[batch] address`, else Ray's RAY_ADDRESS, else a local Ray
instance it starts) and creates one long-lived `EvalActor` (engine/session/ray_actor.py) per GPU of every
node that has one, with `num_gpus=1`; on the CPU device, one per node with `num_cpus=1`. Each
session of the batch gets a `RayEvaluator` (and on CUDA with ncu on, a `RayProfiler`): proxies with
the local Evaluator's and Profiler's interface (engine/evaluation/backend.py) that send the job (config, task
source, candidate source) to a free actor and turn the returned document back into the same typed
EvalResult / ProfileResult. Placement is Ray's; the pool only picks the least busy live actor.

When a node dies, Ray fails the calls of its actors (ActorDiedError); the pool drops those actors
and the proxy sends the same job to another actor, at most `[batch] max_retries` times, saying so in
the progress lines. The driver writes every result into the run folder as a local batch does, and
records in the run's manifest (key "ray") the node and GPU of each evaluation and its retries, so a
killed driver is resumed like a local batch (`cudaforge resume BATCH`): finished rounds are loaded,
never sent again. New nodes that join get actors at the next refresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from cudaforge.engine.candidate import Candidate
from cudaforge.engine.config import Config, config_to_data
from cudaforge.engine.errors import ToolUnavailable
from cudaforge.engine.evaluation.backend import ncu_settings
from cudaforge.engine.fsutil import atomic_write_json, read_json
from cudaforge.engine.profiling import ProfileResult
from cudaforge.engine.results import EvalResult, WorkerExit
from cudaforge.engine.session.events import Event, Notice
from cudaforge.engine.session.store import RunStore
from cudaforge.engine.task import Task

INSTALL_HINT = "pip install 'cudaforge-tui[ray]'"
START_TIMEOUT_S = 120.0  # an actor that is not up by then is given up (its node may be full or gone)
NODE_WAIT_S = 300.0  # with no live actor left, how long to wait for a node before giving up
REFRESH_EVERY_S = 10.0  # how often to look for nodes that joined (or lost actors) while work goes on

EVALUATION_SECTIONS = ("eval", "timing", "timeouts", "integrity", "run", "ncu")

Hook = Callable[[Event], None]


def require_ray() -> Any:
    """The ray module, or the one-line install command (exit 3) when it is not installed."""
    try:
        import ray
    except ImportError:
        raise ToolUnavailable(f"--ray needs Ray, which is not installed here: {INSTALL_HINT}") from None
    return ray


@dataclass(frozen=True)
class Placement:
    """Where one actor runs: node, GPU (the node's own GPU id; None on the CPU device)."""

    node_id: str
    node_ip: str
    hostname: str
    gpu: str | None
    device: str

    @property
    def label(self) -> str:
        where = f"gpu {self.gpu}" if self.gpu is not None else "cpu"
        return f"node {self.node_ip} {self.node_id[:8]} {where}"


@dataclass
class _Actor:
    key: tuple[str, int]
    handle: Any
    placement: Placement
    slots: int
    busy: int = 0
    jobs: int = 0
    alive: bool = True


class RayPool:
    """The batch's actors on the cluster; one pool serves every session of the batch."""

    def __init__(self, config: Config, *, on_notice: Hook | None = None) -> None:
        self.device = str(config.get("eval", "device"))
        address = config.get("batch", "address") or os.environ.get("RAY_ADDRESS") or None
        self.address: str | None = address
        self.max_retries = int(config.get("batch", "max_retries"))
        self.config_data = _evaluation_config(config)
        self.on_notice = on_notice
        self.gpu_spec: Any = None
        self.retries = 0
        self.unavailable = False  # set once no node could take work any more (the batch stays resumable)
        self._actors: dict[tuple[str, int], _Actor] = {}
        self._backoff: dict[str, float] = {}  # node id -> monotonic time before which no new actor is tried
        self._changed = asyncio.Condition()
        self._refreshing: asyncio.Task[None] | None = None
        self._last_refresh = 0.0
        self._stdout: contextlib.AbstractContextManager[Any] | None = None
        self._started_ray = False
        self._running = False  # after start: actors that join later are announced

    # ---- life cycle -----------------------------------------------------------------------------------
    @classmethod
    async def start(cls, config: Config, *, on_notice: Hook | None = None) -> RayPool:
        pool = cls(config, on_notice=on_notice)
        try:
            await pool._connect()
            await pool._refresh()
            if not pool._live():
                raise ToolUnavailable(pool._nothing_to_run_on())
        except BaseException:
            await pool.close()
            raise
        pool._running = True
        nodes = {a.placement.node_id for a in pool._live()}
        pool._notice("info", f"ray: {len(pool._live())} actor(s) on {len(nodes)} node(s): "
                             + ", ".join(a.placement.label for a in pool._live()))
        return pool

    async def _connect(self) -> None:
        ray = require_ray()
        # Ray prints node failures from a background thread to stdout; stdout carries only --json output.
        self._stdout = contextlib.redirect_stdout(sys.stderr)
        self._stdout.__enter__()
        if ray.is_initialized():
            return
        kwargs: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING}
        if self.address:
            await asyncio.to_thread(_probe, self.address)  # ray.init waits minutes for a head that is not there
            where = f"connected to the Ray cluster at {self.address}"
            kwargs["address"] = self.address
        else:
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            where = "started a local Ray instance"
            kwargs.update(address="local", include_dashboard=False, object_store_memory=200 << 20)
        try:
            ray.init(**kwargs)  # in this (main) thread: Ray sets signal handlers; a few seconds at start only
        except (ConnectionError, ValueError, RuntimeError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ToolUnavailable(f"cannot reach the Ray cluster at {self.address or 'a local instance'}: {first}") \
                from None
        self._started_ray = True
        self._notice("info", f"ray: {where}")

    async def close(self) -> None:
        """Kill the actors (their spare workers go with them) and leave the cluster."""
        if self.retries:
            self._notice("warning", f"ray: {self.retries} evaluation(s) were retried after losing their node")
        if self._refreshing is not None:
            self._refreshing.cancel()
            with contextlib.suppress(BaseException):
                await self._refreshing
        ray = sys.modules.get("ray")
        if ray is not None:
            actors = list(self._actors.values())
            with contextlib.suppress(Exception):  # spares first, while the actors live; then the actors
                await asyncio.wait_for(asyncio.gather(*(a.handle.shutdown.remote() for a in actors),
                                                      return_exceptions=True), 30.0)
            for actor in actors:
                with contextlib.suppress(Exception):
                    ray.kill(actor.handle)
            self._actors.clear()
            if self._started_ray:
                with contextlib.suppress(Exception):
                    ray.shutdown()
                self._started_ray = False
        if self._stdout is not None:
            self._stdout.__exit__(None, None, None)
            self._stdout = None

    # ---- what the factory and the batch use -------------------------------------------------------
    def session_parts(self, config: Config) -> tuple[RayEvaluator, RayProfiler | None]:
        data = _evaluation_config(config)
        return RayEvaluator(self, data), RayProfiler(self, data) if ncu_settings(config) is not None else None

    def bind(self, session: Any, hook: Hook | None) -> None:
        """Give a session's proxies its run folder (for the manifest records) and its progress hook."""
        for part in (session.evaluator, session.profiler):
            if isinstance(part, _Proxy):
                part.bind(session.store, hook)
        _update_manifest(session.store, lambda ray: ray.setdefault("address", self.address or "local"))

    def prewarm(self, config_data: dict[str, Any]) -> bool:
        """Ask the idle actors to have spare workers waiting (they also do it after every job)."""
        for actor in self._live():
            if actor.busy == 0:
                with contextlib.suppress(Exception):
                    actor.handle.prewarm.remote(config_data)
        return bool(self._live())

    # ---- sending work -----------------------------------------------------------------------------
    async def call(self, method: str, job: dict[str, Any], *,
                   on_dispatch: Callable[[Placement, int], None],
                   on_lost: Callable[[Placement, int, str], None]) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """Run `method(job)` on a free actor; when its actor dies, again on another, up to max_retries.
        Returns (the actor's answer or None when every try lost its node, the lost tries)."""
        ray = require_ray()
        lost: list[dict[str, Any]] = []
        while True:
            actor = await self._acquire()
            on_dispatch(actor.placement, len(lost))
            ref = getattr(actor.handle, method).remote(job)
            try:
                answer = await ref
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    ray.cancel(ref)  # the session was cancelled: stop the job on its actor too
                raise
            except ray.exceptions.RayActorError as exc:
                reason = _lost_reason(exc)
                await self._drop(actor)
                lost.append({"node_id": actor.placement.node_id, "node_ip": actor.placement.node_ip,
                             "gpu": actor.placement.gpu, "reason": reason, "at": time.time()})
                if len(lost) > self.max_retries:
                    return None, lost
                self.retries += 1
                on_lost(actor.placement, len(lost), reason)
                continue
            finally:
                await self._release(actor)
            return answer, lost

    def _live(self) -> list[_Actor]:
        return [a for a in self._actors.values() if a.alive]

    async def _acquire(self) -> _Actor:
        deadline: float | None = None
        while True:
            live = self._live()
            free = [a for a in live if a.busy < a.slots]
            if free:
                actor = min(free, key=lambda a: (a.busy, a.jobs))  # least busy, then least used: spreads work
                actor.busy += 1
                actor.jobs += 1
                if time.monotonic() - self._last_refresh > REFRESH_EVERY_S:
                    self._refresh_soon()
                return actor
            if not live:
                await self._refresh()
                if self._live():
                    continue
                deadline = deadline or time.monotonic() + NODE_WAIT_S
                if time.monotonic() > deadline:
                    self.unavailable = True
                    raise ToolUnavailable(self._nothing_to_run_on() + "; the batch folder is resumable")
                await asyncio.sleep(2.0)
                continue
            if time.monotonic() - self._last_refresh > REFRESH_EVERY_S:
                self._refresh_soon()
            async with self._changed:
                await self._changed.wait()

    async def _release(self, actor: _Actor) -> None:
        actor.busy = max(0, actor.busy - 1)
        async with self._changed:
            self._changed.notify_all()

    async def _drop(self, actor: _Actor) -> None:
        actor.alive = False
        if self._actors.get(actor.key) is actor:
            del self._actors[actor.key]
        ray = sys.modules.get("ray")
        if ray is not None:
            with contextlib.suppress(Exception):
                ray.kill(actor.handle)

    # ---- actors per node --------------------------------------------------------------------------
    def _refresh_soon(self) -> asyncio.Task[None]:
        """The refresh in progress, or a new one (never two at once: they would both create actors)."""
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.ensure_future(self._create_missing_actors())
        return self._refreshing

    async def _refresh(self) -> None:
        await asyncio.shield(self._refresh_soon())

    async def _create_missing_actors(self) -> None:
        """Create the actors that live nodes should have and do not (new nodes, lost actors)."""
        ray = require_ray()
        self._last_refresh = time.monotonic()
        try:
            nodes = await asyncio.to_thread(ray.nodes)
        except Exception as exc:  # the head is unreachable for now: the next refresh asks again
            self._notice("warning", f"ray: cannot list the cluster's nodes: {_first_line(exc)}")
            return
        wanted: list[tuple[tuple[str, int], dict[str, Any]]] = []
        now = time.monotonic()
        for node in nodes:
            node_id = str(node.get("NodeID", ""))
            if not node.get("Alive") or self._backoff.get(node_id, 0.0) > now:
                continue
            resources = node.get("Resources") or {}
            count = int(resources.get("GPU", 0)) if self.device == "cuda" else int(resources.get("CPU", 0) >= 1)
            wanted.extend(((node_id, k), node) for k in range(count) if (node_id, k) not in self._actors)
        if not wanted:
            return
        from cudaforge.engine.session.ray_actor import EvalActor
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        remote = ray.remote(EvalActor)
        slots = 2 if self.device == "cuda" else 1  # on a GPU, one job builds while another is timed
        resources = {"num_gpus": 1, "num_cpus": 0} if self.device == "cuda" else {"num_cpus": 1}
        handles = [(key, remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(key[0], soft=False),
                                        max_restarts=0, max_concurrency=slots + 4, **resources)
                    .remote(self.config_data)) for key, _ in wanted]
        infos = await asyncio.gather(*(self._ready(h) for _, h in handles))
        for (key, handle), info in zip(handles, infos, strict=True):
            if isinstance(info, str):
                self._backoff[key[0]] = time.monotonic() + 60.0
                self._notice("warning", f"ray: no actor on node {key[0][:8]}: {info}")
                with contextlib.suppress(Exception):
                    ray.kill(handle)
                continue
            placement = Placement(info["node_id"], info["node_ip"], info["hostname"], info["gpu"], info["device"])
            if info.get("version") != _version():
                self._notice("warning", f"ray: {placement.label} runs cudaforge {info.get('version')}, this driver "
                                        f"{_version()}: install the same version on every node")
            if self.gpu_spec is None:
                self.gpu_spec = info.get("gpu_spec")
            self._actors[key] = _Actor(key, handle, placement, slots)
            if self._running:
                self._notice("info", f"ray: new actor on {placement.label}")
        async with self._changed:
            self._changed.notify_all()

    @staticmethod
    async def _ready(handle: Any) -> dict[str, Any] | str:
        """The actor's info once it is up, or why it is not (one line)."""
        try:
            return await asyncio.wait_for(handle.info.remote(), START_TIMEOUT_S)
        except TimeoutError:
            return f"not started within {START_TIMEOUT_S:g} s (the node's resources are taken?)"
        except Exception as exc:
            return _first_line(exc)

    def _nothing_to_run_on(self) -> str:
        ray = sys.modules.get("ray")
        total: dict[str, float] = {}
        with contextlib.suppress(Exception):
            total = ray.cluster_resources() if ray is not None else {}
        need = "a GPU" if self.device == "cuda" else "a CPU"
        have = ", ".join(f"{k} {v:g}" for k, v in sorted(total.items()) if k in ("CPU", "GPU")) or "nothing"
        hint = "; use --device cpu, or add GPU nodes (ray start --address ... --num-gpus N)" \
            if self.device == "cuda" else ""
        return f"no node of the Ray cluster offers {need} for an evaluation actor (the cluster has {have}){hint}"

    def _notice(self, level: str, text: str) -> None:
        if self.on_notice is not None:
            self.on_notice(Notice(level, text))  # type: ignore[arg-type]


class _Proxy:
    """What the two proxies share: the job they send, the progress lines, the manifest records."""

    kind = ""  # words for the progress lines
    method = ""  # the actor's method
    kind_file = ""  # the round's file this result goes to (eval, profile)

    def __init__(self, pool: RayPool, config_data: dict[str, Any]) -> None:
        self.pool = pool
        self.config_data = config_data
        self.store: RunStore | None = None
        self.hook: Hook | None = None
        self.last_wall_s = 0.0

    def bind(self, store: RunStore, hook: Hook | None) -> None:
        self.store, self.hook = store, hook

    def prewarm(self) -> bool:
        return self.pool.prewarm(self.config_data)

    async def aclose(self) -> None:
        """Nothing per session: the actors belong to the batch's pool, which the batch closes."""

    async def _send(self, task: Task, candidate: Candidate, use_cache: bool) -> tuple[dict[str, Any] | None,
                                                                                       list[dict[str, Any]]]:
        start = time.perf_counter()
        n = self._round(candidate)
        what = f"round {n}: {self.kind}" if n is not None else self.kind

        def dispatched(where: Placement, retry: int) -> None:
            again = f" (retry {retry} of {self.pool.max_retries})" if retry else ""
            self._emit("info", f"{what} on {where.label}{again}")

        def lost(where: Placement, count: int, reason: str) -> None:
            self._emit("warning", f"{what} on {where.label}: {reason}; retrying on another node "
                                  f"(retry {count} of {self.pool.max_retries})")

        job = {"config": self.config_data, "candidate": candidate.source, "use_cache": use_cache,
               "task": {"file_name": task.path.name, "name": task.name, "source": task.source,
                        "constants": list(task.constants)}}
        answer, lost_tries = await self.pool.call(self.method, job, on_dispatch=dispatched, on_lost=lost)
        self.last_wall_s = time.perf_counter() - start
        self._record(n, answer, lost_tries)
        return answer, lost_tries

    def _round(self, candidate: Candidate) -> int | None:
        """The round this candidate belongs to: the latest one that holds it and lacks this result."""
        if self.store is None:
            return None
        for n in reversed(self.store.round_numbers()):
            if self.store.get(n, self.kind_file) is None and self.store.candidate(n) == candidate.source:
                return n
        return None

    def _record(self, n: int | None, answer: dict[str, Any] | None, lost: list[dict[str, Any]]) -> None:
        if self.store is None:
            return
        placement = dict((answer or {}).get("placement") or {})
        entry = {"round": n, "kind": self.kind_file, "node_id": placement.get("node_id"),
                 "node_ip": placement.get("node_ip"), "hostname": placement.get("hostname"),
                 "gpu": placement.get("gpu"), "device": placement.get("device"), "wall_s": placement.get("wall_s"),
                 "retries": min(len(lost), self.pool.max_retries), "lost": lost, "at": time.time()}

        def add(ray: dict[str, Any]) -> None:
            ray.setdefault("evaluations", []).append(entry)
            ray["retries"] = sum(int(e.get("retries", 0)) for e in ray["evaluations"])

        _update_manifest(self.store, add)

    def _emit(self, level: str, text: str) -> None:
        if self.hook is not None:
            self.hook(Notice(level, text))  # type: ignore[arg-type]

    @staticmethod
    def _lost_message(lost: list[dict[str, Any]]) -> str:
        nodes = ", ".join(f"{t['node_ip']} {str(t['node_id'])[:8]}" for t in lost)
        return f"the node was lost on each of {len(lost)} tries ({nodes}); not retried further"


class RayEvaluator(_Proxy):
    """The evaluator of one session of a Ray batch (the EvalBackend interface)."""

    kind, method, kind_file = "evaluation", "evaluate", "eval"

    async def evaluate(self, task: Task, candidate: Candidate, *, use_cache: bool = True) -> EvalResult:
        answer, lost = await self._send(task, candidate, use_cache)
        if answer is None:
            return EvalResult(outcome="crash", accepted=False, message=self._lost_message(lost),
                              task_path=str(task.path), candidate_hash=candidate.sha256, format=candidate.format,
                              device=self.pool.device, exit=WorkerExit(reason="killed"))
        return replace(EvalResult.from_dict(answer["result"]), task_path=str(task.path))


class RayProfiler(_Proxy):
    """The profiler of one session of a Ray batch (the ProfileBackend interface)."""

    kind, method, kind_file = "profile", "profile", "profile"

    async def profile(self, task: Task, candidate: Candidate, *, use_cache: bool = True) -> ProfileResult:
        answer, lost = await self._send(task, candidate, use_cache)
        if answer is None:
            return ProfileResult(ok=False, error_kind="target_failed", message=self._lost_message(lost))
        return ProfileResult.from_dict(answer["result"])


def _evaluation_config(config: Config) -> dict[str, Any]:
    """The sections an actor builds its evaluator and profiler from; the rest (LLMs, budgets, run
    folders) stays on the driver, and sessions that differ only there share an actor's evaluator."""
    data = config_to_data(config)
    return {name: data[name] for name in EVALUATION_SECTIONS if name in data}


def _update_manifest(store: RunStore, change: Callable[[dict[str, Any]], Any]) -> None:
    """Apply `change` to the manifest's "ray" section (atomically rewritten; only this driver writes it)."""
    path = store.path / "manifest.json"
    data = read_json(path)
    change(data.setdefault("ray", {}))
    atomic_write_json(path, data)


def _probe(address: str, timeout_s: float = 10.0) -> None:
    """Fail at once, in one line, when nothing listens at the cluster's address (host:port or ray://)."""
    rest = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        return  # e.g. "auto": Ray resolves it
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise ToolUnavailable(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc} (is `ray start "
                              "--head` running there, and the port open?)") from None


def _lost_reason(exc: BaseException) -> str:
    """Why an actor call failed, in words: Ray says "unavailable" when the connection to the actor
    broke before it knew whether the node is gone (its health checks take a few seconds more)."""
    text = str(exc)
    if "node has died" in text or "node died" in text:
        return "node lost"
    if type(exc).__name__ == "ActorUnavailableError":
        return "node unreachable (connection to its actor lost)"
    return f"actor died ({_first_line(exc)})"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]


def _version() -> str:
    from cudaforge.engine import __version__

    return __version__
