"""Run untrusted candidate code in a contained child process.

The app starts a small *supervisor* (`python -m cudaforge.engine.evaluation.sandbox SPEC`) which makes itself a
child subreaper, starts the worker in a new session with a scrubbed environment, its own cwd, output
in files (never pipes), and rlimits on open files, file size and core dumps (never on address space:
CUDA reserves huge ranges). It enforces a wall-clock limit per phase (the worker reports its phase in
a progress file) and an output-size limit, and after the worker ends, for any reason, it kills every
descendant: orphans that called setsid() are re-parented to the subreaper, so they are found too.
If the supervisor itself is killed, the caller sweeps by the marker variable each sandboxed process
inherits.

A caller whose worker writes a complete report before it exits (the evaluator) need not wait for the exit:
`wait_sandboxed(..., reported=ReportFile(path))` returns as soon as the report is there, and a background
reaper (`BackgroundReap`) waits for the process's teardown, kills the tree when it outlives `EXIT_GRACE_S`,
sweeps by the marker and only then runs the caller's clean-up. Pending reapers are killed at interpreter exit.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import re
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cudaforge.engine.evaluation.workdirs import remove_job_folder_of_dead_app
from cudaforge.engine.gpu.lock import MARKER_VAR

_SECRET = re.compile(r"(API_?KEY|TOKEN|SECRET|PASSW|CREDENTIAL|PRIVATE_KEY|_AUTH)", re.I)
_ALLOWED_SECRETISH = {MARKER_VAR}
PR_SET_CHILD_SUBREAPER = 36
# How long a worker may take to exit once its report is written (freeing its device memory, its CUDA context's
# teardown): its phases "done" and "exit" get this limit in the supervisor, and the app's background reaper
# kills the tree after it. A worker that reported and then hangs is killed, not waited for.
EXIT_GRACE_S = 30.0


def scrub_env(env: Mapping[str, str]) -> dict[str, str]:
    """Drop every variable that looks like a credential (API keys, tokens, secrets, passwords)."""
    return {k: v for k, v in env.items() if k in _ALLOWED_SECRETISH or not _SECRET.search(k)}


@dataclass(frozen=True)
class ProcessOutcome:
    # "exited", "timeout", "signal", "output_limit", "cancelled", "supervisor_failed"; or "reported": the
    # worker wrote its report and is left to exit in the background (returncode unknown then)
    reason: str
    returncode: int | None = None
    signal: str | None = None
    seconds: float = 0.0
    phase: str = ""
    limit_s: float | None = None
    swept: int = 0  # descendants killed after the worker ended
    ended_at: float = 0.0  # wall clock (time.time()) when the worker ended: where its exit's seconds went

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SandboxSpec:
    argv: list[str]
    cwd: str
    env: dict[str, str]
    stdout_path: str
    stderr_path: str
    progress_path: str
    outcome_path: str
    phase_limits: dict[str, float] = field(default_factory=dict)
    default_limit_s: float = 600.0
    output_limit_bytes: int = 64 << 20
    open_files: int = 1024
    file_size_bytes: int = 4 << 30
    parent_pid: int = 0  # the app; the supervisor kills the tree and exits when it is gone (0: no check)


# --------------------------------------------------------------------------- supervisor side


def _set_subreaper() -> bool:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _children_of(pid: int) -> list[int]:
    kids: list[int] = []
    task_dir = Path(f"/proc/{pid}/task")
    try:
        tids = list(task_dir.iterdir())
    except OSError:
        return kids
    for tid in tids:
        with contextlib.suppress(OSError, ValueError):
            kids.extend(int(x) for x in (tid / "children").read_text().split())
    return kids


def _descendants(pid: int) -> list[int]:
    out: list[int] = []
    stack = _children_of(pid)
    while stack:
        p = stack.pop()
        if p in out:
            continue
        out.append(p)
        stack.extend(_children_of(p))
    return out


def _kill_all(pids: Sequence[int]) -> None:
    for p in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGKILL)


def _sweep_descendants() -> int:
    """Kill and reap every descendant of this (subreaper) process until none is left."""
    killed = 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pids = _descendants(os.getpid())
        if not pids:
            break
        killed += len(pids)
        _kill_all(pids)
        _reap_all(0.2)
    _reap_all(0)
    return killed


def _reap_all(wait_s: float) -> None:
    end = time.monotonic() + wait_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if time.monotonic() >= end:
                return
            time.sleep(0.01)


def _read_phase(progress_path: Path) -> tuple[str, float | None]:
    try:
        data = json.loads(progress_path.read_text())
        return str(data.get("phase", "")), float(data["since"])
    except (OSError, ValueError, KeyError, TypeError):
        return "", None


def _limits(spec: SandboxSpec) -> None:
    import resource

    for res, value in (
        (resource.RLIMIT_NOFILE, spec.open_files),
        (resource.RLIMIT_FSIZE, spec.file_size_bytes),
        (resource.RLIMIT_CORE, 0),
    ):
        with contextlib.suppress(ValueError, OSError):
            soft, hard = resource.getrlimit(res)
            new = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(res, (new, hard))


class ForkedChild:
    """The worker as a forked child of the supervisor (the zygote's spares): what supervise() asks of a Popen."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            with contextlib.suppress(ChildProcessError):
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid == self.pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int | None:
        while self.poll() is None:
            time.sleep(0.01)
        return self.returncode


def redirect_std(stdout_path: str | None, stderr_path: str) -> None:
    """In a forked process: stdin from /dev/null, stdout to its file (None: /dev/null too), stderr to its file."""
    opened = [os.open(os.devnull, os.O_RDWR)]
    for path in (stdout_path, stderr_path):
        if path is not None:
            opened.append(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
    null, err = opened[0], opened[-1]
    out = opened[1] if stdout_path is not None else null
    for fd, target in ((null, 0), (out, 1), (err, 2)):
        os.dup2(fd, target)
    for fd in opened:
        os.close(fd)


def enter_sandbox(spec: SandboxSpec) -> None:
    """In a forked worker, before any of its own code runs: what Popen does for an exec'd one (a new session,
    the rlimits, stdin from /dev/null, stdout and stderr to their files, its cwd, its environment; TMPDIR is
    read again by tempfile)."""
    import tempfile

    os.setsid()
    _limits(spec)
    redirect_std(spec.stdout_path, spec.stderr_path)
    os.chdir(spec.cwd)
    os.environ.clear()
    os.environ.update(spec.env)
    tempfile.tempdir = None
    sys.argv = list(spec.argv)


def supervise(spec: SandboxSpec, fork_worker: Callable[[SandboxSpec], int] | None = None) -> ProcessOutcome:
    """Supervisor body: start the worker, enforce limits, sweep descendants, report. `fork_worker(spec)` (the
    zygote's): the worker is forked from this process rather than exec'd, and its pid returned."""
    import subprocess

    _set_subreaper()
    progress = Path(spec.progress_path)
    cancelled = False

    def on_term(signum: int, frame: Any) -> None:
        nonlocal cancelled
        cancelled = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    start = time.monotonic()
    child: Any
    if fork_worker is not None:
        child = ForkedChild(fork_worker(spec))
    else:
        with open(spec.stdout_path, "wb") as out, open(spec.stderr_path, "wb") as err:
            child = subprocess.Popen(
                spec.argv,
                cwd=spec.cwd,
                env=spec.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                preexec_fn=lambda: _limits(spec),
            )
    reason, limit = "", None
    phase = ""
    while True:
        rc = child.poll()
        if rc is not None:
            break
        phase, since = _read_phase(progress)
        now = time.monotonic()
        limit = spec.phase_limits.get(phase, spec.default_limit_s)
        elapsed_in_phase = (time.time() - since) if since is not None else (now - start)
        if elapsed_in_phase > limit:
            reason = "timeout"
        elif _output_size(spec) > spec.output_limit_bytes:
            reason = "output_limit"
        elif cancelled or (spec.parent_pid and os.getppid() != spec.parent_pid):
            reason = "cancelled"
        if reason:
            _kill_all([child.pid, *_descendants(os.getpid())])
            child.wait()
            break
        time.sleep(0.02)
    seconds = time.monotonic() - start
    ended_at = time.time()
    rc = child.returncode
    if reason != "timeout" and _output_size(spec) > spec.output_limit_bytes:
        reason = "output_limit"  # also when the file-size rlimit (SIGXFSZ) stopped it first
    final_phase, _ = _read_phase(progress)
    swept = _sweep_descendants()
    if not reason:
        reason = "signal" if rc is not None and rc < 0 else "exited"
    sig = signal.Signals(-rc).name if rc is not None and rc < 0 and -rc in signal.valid_signals() else None
    return ProcessOutcome(
        reason=reason,
        returncode=rc,
        signal=sig,
        seconds=round(seconds, 3),
        phase=final_phase or phase,
        limit_s=limit if reason == "timeout" else None,
        swept=swept,
        ended_at=round(ended_at, 4),
    )


def _output_size(spec: SandboxSpec) -> int:
    total = 0
    for p in (spec.stdout_path, spec.stderr_path):
        with contextlib.suppress(OSError):
            total += os.stat(p).st_size
    return total


def read_spec(spec_path: str | os.PathLike[str]) -> SandboxSpec:
    """The sandbox spec that start_sandboxed wrote."""
    return SandboxSpec(**json.loads(Path(spec_path).read_text()))


def supervise_and_report(spec: SandboxSpec, fork_worker: Callable[[SandboxSpec], int] | None = None) -> None:
    """supervise(), then its outcome written where the caller reads it (renamed into place: never half a file)."""
    outcome = supervise(spec, fork_worker)
    tmp = spec.outcome_path + ".tmp"
    Path(tmp).write_text(json.dumps(outcome.to_dict()))
    os.replace(tmp, spec.outcome_path)
    if fork_worker is None and spec.parent_pid and os.getppid() != spec.parent_pid:
        # the app died: nobody reads this job's folder (a zygote removes those of the jobs it forked)
        remove_job_folder_of_dead_app(spec.cwd)


def _supervisor_main(spec_path: str) -> int:
    supervise_and_report(read_spec(spec_path))
    return 0


# --------------------------------------------------------------------------- caller side


def sweep_marker(marker: str) -> int:
    """Kill every process whose environment carries this sandbox's marker (supervisor-lost fallback)."""
    killed = 0
    needle = f"{MARKER_VAR}={marker}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
    return killed


class ForeignProcess:
    """A supervisor that is not this process's child (the zygote forked it), watched through a pidfd: what
    SandboxHandle asks of a Popen. Its exit status is not ours to read; its outcome file says what happened."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        try:
            self._fd: int | None = os.pidfd_open(pid)
        except OSError:  # already gone
            self._fd, self.returncode = None, 0

    def poll(self) -> int | None:
        if self.returncode is None and self._fd is not None:
            import select

            if select.select([self._fd], [], [], 0)[0]:
                self._ended()
        return self.returncode

    def _ended(self) -> None:
        self.returncode = 0
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def wait(self, timeout: float | None = None) -> int:
        import select
        import subprocess

        if self.poll() is None and self._fd is not None:
            if not select.select([self._fd], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
            self._ended()
        return int(self.returncode or 0)

    def send_signal(self, sig: int) -> None:
        if self.poll() is not None or self._fd is None:
            raise ProcessLookupError(self.pid)
        signal.pidfd_send_signal(self._fd, sig)


@dataclass
class SandboxHandle:
    """A started supervisor: awaited with `wait_sandboxed`, killed with `kill_sandboxed`.

    It is a plain `subprocess.Popen`, not an asyncio subprocess, so it can outlive the event loop
    that started it (a pre-warmed spare is started in one `asyncio.run` and used in another).
    """

    proc: Any
    marker: str
    spec: SandboxSpec
    limit_s: float
    started: float = field(default_factory=time.monotonic)
    reap: BackgroundReap | None = None  # set when `wait_sandboxed` returned on the report, before the exit

    def alive(self) -> bool:
        return self.proc.poll() is None


def start_sandboxed(
    argv: Sequence[str],
    *,
    workdir: Path,
    env: Mapping[str, str] | None = None,
    phase_limits: Mapping[str, float] | None = None,
    default_limit_s: float = 600.0,
    output_limit_bytes: int = 64 << 20,
    open_files: int = 1024,
    fork: Callable[[Path], int | None] | None = None,
) -> SandboxHandle:
    """Start `argv` under a supervisor and return at once (see `run_sandboxed` for the containment). `fork`
    (a zygote's, engine/evaluation/zygote.py): given the spec file, forks the supervisor and its worker and
    returns the supervisor's pid, or None, and the supervisor is started the usual way."""
    import subprocess

    workdir.mkdir(parents=True, exist_ok=True)
    marker = uuid.uuid4().hex
    child_env = scrub_env(dict(os.environ if env is None else env))
    child_env[MARKER_VAR] = marker
    child_env["TMPDIR"] = str(workdir)
    child_env["PYTHONUNBUFFERED"] = "1"
    spec = SandboxSpec(
        argv=list(argv),
        cwd=str(workdir),
        env=child_env,
        stdout_path=str(workdir / "stdout.txt"),
        stderr_path=str(workdir / "stderr.txt"),
        progress_path=str(workdir / "progress.json"),
        outcome_path=str(workdir / "outcome.json"),
        phase_limits=dict(phase_limits or {}),
        default_limit_s=default_limit_s,
        output_limit_bytes=output_limit_bytes,
        open_files=open_files,
        file_size_bytes=max(4 * output_limit_bytes, 256 << 20),
        parent_pid=os.getpid(),
    )
    spec_path = workdir / "sandbox.json"
    spec_path.write_text(json.dumps(asdict(spec)))
    forked = fork(spec_path) if fork is not None else None
    proc: Any
    if forked is not None:
        proc = ForeignProcess(forked)
    else:
        sup_env = {k: v for k, v in child_env.items() if k != MARKER_VAR}
        with open(workdir / "supervisor.txt", "wb") as sup_err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "cudaforge.engine.evaluation.sandbox", str(spec_path)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=sup_err, env=sup_env,
                start_new_session=True,
            )
    outer_limit = sum((phase_limits or {}).values()) + default_limit_s + 60
    handle = SandboxHandle(proc=proc, marker=marker, spec=spec, limit_s=outer_limit)
    _LIVE_HANDLES[proc.pid] = handle
    return handle


_LIVE_HANDLES: dict[int, SandboxHandle] = {}


def live_sandbox_pids() -> set[int]:
    """Our own sandboxed processes (supervisors and everything under them), e.g. to tell our own
    workers apart from other programs on the GPU."""
    pids: set[int] = set()
    for pid, handle in list(_LIVE_HANDLES.items()):
        if handle.proc.poll() is not None:
            _LIVE_HANDLES.pop(pid, None)
            continue
        pids.add(pid)
        pids.update(_descendants(pid))
    return pids


def kill_sandboxed(handle: SandboxHandle, grace_s: float = 5.0) -> None:
    """Stop the supervisor (it kills and sweeps its tree), then make sure nothing with the marker lives."""
    with contextlib.suppress(ProcessLookupError):
        handle.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while handle.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    if handle.proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(handle.proc.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            handle.proc.wait(timeout=5)
    sweep_marker(handle.marker)
    _LIVE_HANDLES.pop(handle.proc.pid, None)


class ReportFile:
    """A worker's report file, taken once it holds a whole JSON object. The worker writes it atomically (a temp
    file renamed into place), so a reader never sees half of it; a file that does not parse (written by other
    means) is not taken and the wait goes on. Read again only when its inode, size or mtime changed."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.data: dict[str, Any] | None = None
        self.written_at = 0.0  # its mtime (wall clock): when the worker wrote it
        self.seen_at = 0.0  # wall clock when this process had read it
        self._stamp: tuple[int, int, int] | None = None

    def __call__(self) -> bool:
        if self.data is not None:
            return True
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return False
        if not isinstance(data, dict) or not data:
            return False
        self.data, self.written_at, self.seen_at = data, st.st_mtime, time.time()
        return True


_REAPING: set[BackgroundReap] = set()


class BackgroundReap:
    """The rest of a sandboxed process's life after its report was taken: a thread waits for the supervisor
    (the worker's exit, the subreaper sweep), kills the tree once `grace_s` has passed since the report (a
    worker that reported and then hangs), sweeps by the marker, and then runs what `then` was given (the
    caller's clean-up of the files it read). Never tied to an event loop: it outlives the `asyncio.run` that
    started it, like a spare does."""

    def __init__(self, handle: SandboxHandle, grace_s: float = EXIT_GRACE_S) -> None:
        self.handle = handle
        self.grace_s = grace_s
        self.started = time.monotonic()
        self.outcome: ProcessOutcome | None = None  # the supervisor's, once it has ended
        self.killed = False  # outlived the grace
        self.seconds = 0.0  # from the report taken to the process tree gone
        self._then: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        _REAPING.add(self)
        self._thread = threading.Thread(target=self._run, name=f"cudaforge-reap-{handle.proc.pid}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import subprocess

        try:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.handle.proc.wait(timeout=self.grace_s)
            if self.handle.proc.poll() is None:
                self.killed = True
                kill_sandboxed(self.handle)
            else:
                sweep_marker(self.handle.marker)
                _LIVE_HANDLES.pop(self.handle.proc.pid, None)
            self.outcome = read_outcome(self.handle)
        finally:
            self.seconds = time.monotonic() - self.started
            with self._lock:
                self._done.set()
                then, self._then = self._then, []
            _REAPING.discard(self)
            for fn in then:
                with contextlib.suppress(Exception):
                    fn()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def then(self, fn: Callable[[], None]) -> None:
        """Run `fn` once the process tree is gone (at once, in the caller's thread, when it already is)."""
        with self._lock:
            if not self._done.is_set():
                self._then.append(fn)
                return
        fn()

    def join(self, timeout: float | None = None) -> bool:
        """Wait until the tree is gone and the clean-ups ran (True) or `timeout` passed (False)."""
        if not self._done.wait(timeout):
            return False
        self._thread.join(timeout)
        return True


@atexit.register
def _kill_reaping_at_exit() -> None:
    """At exit, the workers still exiting after their reports are killed, and their reaps' clean-ups (the
    job folders) run before the interpreter goes: left to the daemon threads, they never ran, and each
    evaluation an app made just before it exited left its folder in the temp folder."""
    reaps = list(_REAPING)
    for reap in reaps:
        with contextlib.suppress(Exception):
            kill_sandboxed(reap.handle)
    deadline = time.monotonic() + 5.0
    for reap in reaps:
        reap.join(max(0.0, deadline - time.monotonic()))


def read_outcome(handle: SandboxHandle) -> ProcessOutcome:
    """What the (ended) supervisor wrote, or `supervisor_failed` when it wrote nothing."""
    with contextlib.suppress(OSError, ValueError, TypeError):
        return ProcessOutcome(**json.loads(Path(handle.spec.outcome_path).read_text()))
    return ProcessOutcome(reason="supervisor_failed", returncode=handle.proc.returncode)


async def wait_sandboxed(handle: SandboxHandle, poll_s: float = 0.01, *, reported: Callable[[], bool] | None = None,
                         exit_grace_s: float = EXIT_GRACE_S) -> tuple[ProcessOutcome, Path, Path]:
    """Await the supervisor's end; cancelling (or its outer limit) kills the whole tree first.

    With `reported` (a ReportFile, say), return as soon as it says the worker's report is complete, with the
    outcome "reported" and the rest of the process's life left to a BackgroundReap (`handle.reap`): the
    worker's exit (its CUDA context's teardown) is not waited for. Its files stay until the caller's clean-up
    runs through `handle.reap.then`.
    """
    try:
        while handle.proc.poll() is None:
            if reported is not None and reported():
                handle.reap = BackgroundReap(handle, exit_grace_s)
                outcome = ProcessOutcome(reason="reported", seconds=round(time.monotonic() - handle.started, 3),
                                         phase="done")
                return outcome, Path(handle.spec.stdout_path), Path(handle.spec.stderr_path)
            if time.monotonic() - handle.started > handle.limit_s:
                raise TimeoutError
            await asyncio.sleep(poll_s)
    except (asyncio.CancelledError, TimeoutError):
        await asyncio.to_thread(kill_sandboxed, handle)
        raise
    _LIVE_HANDLES.pop(handle.proc.pid, None)
    outcome = read_outcome(handle)
    if sweep_marker(handle.marker):
        outcome = ProcessOutcome(**{**outcome.to_dict(), "swept": outcome.swept + 1})
    return outcome, Path(handle.spec.stdout_path), Path(handle.spec.stderr_path)


async def run_sandboxed(
    argv: Sequence[str],
    *,
    workdir: Path,
    env: Mapping[str, str] | None = None,
    phase_limits: Mapping[str, float] | None = None,
    default_limit_s: float = 600.0,
    output_limit_bytes: int = 64 << 20,
    open_files: int = 1024,
) -> tuple[ProcessOutcome, Path, Path]:
    """Run `argv` contained; return its outcome and the paths of its stdout and stderr files.

    `workdir` becomes the child's cwd and holds its files. Cancelling the awaiting task kills the
    whole tree before the cancellation propagates.
    """
    handle = start_sandboxed(argv, workdir=workdir, env=env, phase_limits=phase_limits,
                             default_limit_s=default_limit_s, output_limit_bytes=output_limit_bytes,
                             open_files=open_files)
    return await wait_sandboxed(handle)


def tail(path: Path, limit: int = 4000) -> str:
    """The last `limit` characters of a file, for showing logs without loading floods."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            data = fh.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return ("…" + text) if size > limit else text


if __name__ == "__main__":
    sys.exit(_supervisor_main(sys.argv[1]))
