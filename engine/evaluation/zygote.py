"""A fork server for spares: one process imports torch and the evaluation code once, and every spare is forked
from it instead of starting Python and importing torch again.

Why: a spare's import took 3.4-4.6 s on the H200 under a round's load (1.0-1.2 s on an idle machine), and
rounds whose LLM replies come at once now come 1.1-2.2 s apart, so the third round waited for its spare;
in the 250-problem sweep the spares' imports were 1,008 CPU-seconds beside the evaluations. A forked spare
starts with everything imported: what is left of its warm-up is the GPU part (the CUDA context, under the
GPU lock), which no fork can carry.

The process tree, per spare: app -> zygote -> supervisor -> worker. The zygote (this module's `main`, started
by `Zygote`) never touches a GPU (a CUDA context does not survive a fork: `entry.preload` imports only), and
forks for each request a *supervisor*: a new session, the child subreaper of its worker's tree, running
`sandbox.supervise` with the same limits, output files and sweeps as an exec'd one; it forks the *worker*,
which enters the sandbox as Popen would have (sandbox.enter_sandbox: new session, rlimits, files, cwd,
environment) and runs the worker's command line in-process (entry.run). Forking after torch's import and
before any CUDA call is what PyTorch's own DataLoader workers do.

Containment that differs from an exec'd spare, and how it is kept:
- A process's /proc environ is the one it was exec'd with, so a forked worker shows the zygote's: the zygote
  runs with its own sandbox marker (MARKER_VAR), so every process forked from it is still told apart as ours
  (lock.is_cudaforge_process), and the worker's own children (builds, anything the candidate starts) are
  exec'd with the worker's per-sandbox marker, which the caller's marker sweep finds.
- The supervisor is not the app's child: the app watches it through a pidfd (sandbox.ForeignProcess).
- The zygote is a child subreaper too: a worker whose supervisor was killed is re-parented to the zygote,
  which kills every child that is not one of its live supervisors. The zygote exits when the app is gone or
  closes its pipe, killing its whole tree; each supervisor then sees its parent gone and kills its own.

The app side never waits for the zygote's import: until it says it is ready, spares start as before
(`Zygote.fork` returns None and start_spare execs one). `[eval] zygote = false` (or CUDAFORGE_ZYGOTE=0)
turns it off.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from cudaforge.engine.evaluation.sandbox import scrub_env
from cudaforge.engine.evaluation.workdirs import make_workdir
from cudaforge.engine.gpu.lock import MARKER_VAR

WORKER_MODULE = "cudaforge.engine.worker"
REPLY_TIMEOUT_S = 5.0  # a fork is milliseconds: a zygote that does not answer within this is broken
ENV_SWITCH = "CUDAFORGE_ZYGOTE"  # "0": spares are exec'd (the [eval] zygote key's override)


# --------------------------------------------------------------------------- app side


class Zygote:
    """One started fork server for one (python, device, environment); see the module docstring."""

    def __init__(self, python: str, device: str, env: Mapping[str, str]) -> None:
        self.workdir = make_workdir("zygote")
        self.marker = f"zygote-{uuid.uuid4().hex}"
        child_env = {**scrub_env(env), MARKER_VAR: self.marker, "TMPDIR": str(self.workdir), "PYTHONUNBUFFERED": "1"}
        self.info: dict[str, Any] | None = None  # its ready line: pid, import seconds
        self.error = ""  # why it cannot serve (then every spare is exec'd)
        self._buffer = b""
        self._lock = threading.Lock()
        self._close_lock = threading.Lock()
        with open(self.workdir / "zygote.err", "wb") as err:
            self.proc = subprocess.Popen([python, "-m", __name__, device], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err, env=child_env, cwd=self.workdir,
                                         start_new_session=True)

    def _line(self, timeout_s: float) -> dict[str, Any] | None:
        """The zygote's next reply line (None when none came within `timeout_s`)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                raise EOFError("the zygote closed its pipe")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return dict(json.loads(line))

    def ready(self) -> bool:
        """Whether it has imported everything and serves forks (never waits)."""
        if self.info is not None:
            return self.alive()
        if self.error:
            return False
        with self._lock:
            try:
                reply = self._line(0.0)
            except (EOFError, OSError, ValueError) as exc:
                self.error = f"the zygote ended while importing: {exc}"
                return False
            if reply is None:
                if not self.alive():
                    self.error = f"the zygote exited ({self.proc.returncode}) while importing"
                return False
            if "error" in reply:
                self.error = str(reply["error"])
                return False
            self.info = reply
            return True

    def wait_ready(self, timeout_s: float, poll_s: float = 0.02) -> bool:
        """Block until it serves forks (True), it broke, or `timeout_s` passed (False). For a caller about to
        start many spares at once, off any event loop (Evaluator.zygote_ready)."""
        deadline = time.monotonic() + timeout_s
        while not self.ready():
            if self.error or time.monotonic() > deadline:
                return False
            time.sleep(poll_s)
        return True

    def alive(self) -> bool:
        return self.proc.poll() is None

    def fork(self, spec_path: Path) -> int | None:
        """Fork a supervisor (and its worker) for the sandbox spec at `spec_path`; its pid, or None where this
        zygote cannot (still importing, broken): the caller then starts one the usual way."""
        if not self.ready():
            return None
        with self._lock:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({"spec": str(spec_path)}).encode() + b"\n")
                self.proc.stdin.flush()
                reply = self._line(REPLY_TIMEOUT_S)
            except (OSError, EOFError, ValueError) as exc:
                reply = {"error": f"the zygote's pipe failed: {exc}"}
            if reply is None or "pid" not in reply:
                self.error = str((reply or {}).get("error") or f"no answer within {REPLY_TIMEOUT_S:g} s")
                self.retire()  # the caller may be the event loop: closing waits up to 20 s, so it goes off it
                threading.Thread(target=self.close, name="cudaforge-zygote-close", daemon=True).start()
                return None
            return int(reply["pid"])

    def retire(self) -> None:
        """No more forks: it ends once the spares it forked have ended (their jobs are not cut short)."""
        with contextlib.suppress(Exception):
            if self.proc.stdin is not None:
                self.proc.stdin.close()

    def close(self) -> None:
        """Stop it and everything forked from it now (it kills its tree on SIGTERM, then exits). Safe to call
        twice (a failed fork closes it in a thread, and exit closes every zygote): a reaped pid is never signalled."""
        self.retire()
        with self._close_lock:
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(self.proc.pid, signal.SIGTERM)  # it kills its tree, then exits
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=15)
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=5)
        from cudaforge.engine.evaluation.sandbox import sweep_marker

        sweep_marker(self.marker)
        shutil.rmtree(self.workdir, ignore_errors=True)


_ZYGOTES: dict[str, Zygote] = {}
_RETIRED: list[Zygote] = []  # no longer forking; closed at exit with the rest
_REGISTRY_LOCK = threading.Lock()


def enabled(configured: bool = True) -> bool:
    """Whether spares are forked from a zygote: the configuration's `[eval] zygote`, unless CUDAFORGE_ZYGOTE
    says otherwise; Linux only (pidfds, /proc, the child subreaper)."""
    switch = os.environ.get(ENV_SWITCH, "").strip().lower()
    if switch in ("0", "false", "no", "off"):
        return False
    if switch in ("1", "true", "yes", "on"):
        configured = True
    return configured and sys.platform.startswith("linux") and _pidfds_work()


def _pidfds_work() -> bool:
    """Whether this kernel has pidfds (Linux 5.3+): the app watches a forked supervisor through one."""
    if not _PIDFDS:
        try:
            os.close(os.pidfd_open(os.getpid()))
            _PIDFDS.append(True)
        except (AttributeError, OSError):
            _PIDFDS.append(False)
    return _PIDFDS[0]


_PIDFDS: list[bool] = []


MAX_ZYGOTES = 4  # evaluators with other options (a batch's sessions, say) each have one; the least recent goes


def zygote_for(python: str, device: str, env: Mapping[str, str]) -> Zygote:
    """The zygote for these spares (the environment is part of the key: torch reads some of it at import),
    started in the background on first use; one that broke is replaced."""
    key = json.dumps([python, device, sorted(env.items())])
    with _REGISTRY_LOCK:
        for ended in [z for z in _RETIRED if not z.alive()]:  # reaped (no zombie) and its folder gone
            _RETIRED.remove(ended)
            shutil.rmtree(ended.workdir, ignore_errors=True)
        current = _ZYGOTES.pop(key, None)
        if current is not None and (current.error or not current.alive()):
            current.retire()
            _RETIRED.append(current)
            current = None
        if current is None:
            while len(_ZYGOTES) >= MAX_ZYGOTES:
                oldest = _ZYGOTES.pop(next(iter(_ZYGOTES)))
                oldest.retire()
                _RETIRED.append(oldest)
            current = Zygote(python, device, env)
        _ZYGOTES[key] = current  # the most recent last
        return current


def close_all() -> None:
    """At exit: every zygote and everything forked from it (spare.py's own kill at exit then finds those
    spares gone and sweeps their markers)."""
    with _REGISTRY_LOCK:
        zygotes = [*_ZYGOTES.values(), *_RETIRED]
        _ZYGOTES.clear()
        _RETIRED.clear()
    for zygote in zygotes:
        with contextlib.suppress(Exception):
            zygote.close()


atexit.register(close_all)


# --------------------------------------------------------------------------- the zygote process


def _reply(payload: dict[str, Any]) -> None:
    os.write(1, json.dumps(payload).encode() + b"\n")


def _restore_signals() -> None:
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)


def _fork() -> int:
    """os.fork() in the zygote, without Python's warning about its threads: numpy's BLAS pool thread stops
    itself around a fork (pthread_atfork), and nothing else runs beside the zygote's main thread."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()


def _fork_worker(spec: Any) -> int:
    """In a supervisor: fork the worker, which enters the sandbox and runs the worker's command line."""
    pid = os.fork()
    if pid:
        return pid
    rc = 1
    try:
        from cudaforge.engine.evaluation.sandbox import enter_sandbox

        _restore_signals()
        enter_sandbox(spec)
        if list(spec.argv[1:3]) != ["-m", WORKER_MODULE]:
            raise ValueError(f"the zygote forks only {WORKER_MODULE}, not {spec.argv[1:3]}")
        from cudaforge.engine.worker import entry

        entry.FORKED[0] = True
        rc = entry.run(list(spec.argv[3:]))
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(rc)


def _fork_supervisor(spec_path: str) -> int:
    """Fork a supervisor for one sandbox spec (the file start_sandboxed wrote); its pid."""
    from cudaforge.engine.evaluation.sandbox import read_spec, redirect_std, supervise_and_report

    spec = replace(read_spec(spec_path), parent_pid=os.getpid())  # its parent: this zygote, gone with the app
    pid = _fork()
    if pid:
        return pid
    try:
        os.setsid()
        _restore_signals()
        redirect_std(None, str(Path(spec_path).parent / "supervisor.txt"))
        supervise_and_report(spec, fork_worker=_fork_worker)
        code = 0
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    os._exit(code)


def _forked_child_refuses_cuda() -> str:
    """Fork once and ask the child whether torch would refuse CUDA there (an import made a CUDA runtime call
    that registered torch's fork poisoning); "" when it would not, else why."""
    pid = _fork()
    if pid == 0:
        code = 1
        with contextlib.suppress(BaseException):
            import torch

            code = 3 if torch.cuda._is_in_bad_fork() else 0
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code == 0:
        return ""
    if code == 3:
        return "an import made a CUDA runtime call: a forked child could not use CUDA"
    return f"the fork test's child failed ({code})"


def main(argv: list[str]) -> int:
    """The zygote: import (never a GPU call), say ready, then fork a supervisor per request line."""
    from cudaforge.engine.evaluation.sandbox import _children_of, _set_subreaper, _sweep_descendants
    from cudaforge.engine.evaluation.workdirs import PREFIX, remove_job_folder_of_dead_app

    device = argv[0] if argv else "cuda"
    parent = os.getppid()
    _set_subreaper()
    start = time.perf_counter()
    # torch.utils.cpp_extension asks torch.cuda.is_available() at import (for CUDA_HOME), and the CUDA runtime's
    # device count registers torch's fork poisoning: every forked child then refuses CUDA ("Cannot re-initialize
    # CUDA in forked subprocess", H200). NVML's count does not (torch's own switch for this). The spares' own
    # environment is theirs again after the fork (sandbox.enter_sandbox).
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    try:
        from cudaforge.engine.worker.entry import freeze_warm_objects, preload, preload_counting

        preload(device)
        preload_counting()
        freeze_warm_objects()
        import torch

        if torch.cuda.is_initialized():
            raise RuntimeError("CUDA was initialised during the imports: a forked child could not use it")
        poisoned = _forked_child_refuses_cuda()
        if poisoned:
            raise RuntimeError(poisoned)
    except Exception as exc:
        _reply({"error": f"the zygote's imports failed: {type(exc).__name__}: {exc}"})
        return 1
    _reply({"ready": True, "pid": os.getpid(), "import_s": round(time.perf_counter() - start, 3)})
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    supervisors: set[int] = set()
    sandboxes: list[str] = []  # the sandbox folder of every spare forked: removed if the app dies
    buffer = b""
    last_scan = 0.0
    accepting = True  # until the app closes the pipe (retire): then it ends once its supervisors have
    while os.getppid() == parent and not stopping and (accepting or supervisors):
        readable = select.select([0] if accepting else [], [], [], 0.2)[0]
        with contextlib.suppress(ChildProcessError):
            while True:
                pid, _ = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                supervisors.discard(pid)
        now = time.monotonic()
        if now - last_scan > 0.5:  # orphans of killed supervisors (re-parented here): never left running
            last_scan = now
            for pid in _children_of(os.getpid()):
                if pid not in supervisors:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
        if not readable:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            accepting = False  # retired: the spares it forked finish their jobs
            continue
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            try:
                spec_path = str(json.loads(line)["spec"])
                pid = _fork_supervisor(spec_path)
            except Exception as exc:
                _reply({"error": f"{type(exc).__name__}: {exc}"})
                continue
            supervisors.add(pid)
            sandboxes.append(str(Path(spec_path).parent))
            _reply({"pid": pid})
    _sweep_descendants()  # every supervisor, worker and what they started: this tree ends with the zygote
    if os.getppid() != parent:  # the app died: nobody else removes its spares' folders or this one's
        for sandbox_dir in sandboxes:
            remove_job_folder_of_dead_app(sandbox_dir)
        if Path.cwd().name.startswith(f"{PREFIX}zygote-"):
            shutil.rmtree(Path.cwd(), ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
