"""The card's free memory beside what our other processes hold, read as of one moment (engine/gpu/lock.py
card_share, engine/gpu/nvml.py): the memory admission's budget (engine/worker/pipeline.py `_budget`) and the
fit checks add the two, and an allocation made between the two readings must not be counted twice.

On the H200 sweep of session 33 the budget read the free memory and then listed our processes with
nvidia-smi (a tenth of a second or more later); a worker then ran out of memory inside its own
reservation with 2.9 GiB left on the card. The CPU tests script nvidia-smi's listings (CI has no GPU);
the GPU tests make the allocation happen between the readings in a real second process, through NVML."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from cudaforge.engine.evaluation.sandbox import MARKER_VAR
from cudaforge.engine.gpu import nvml
from cudaforge.engine.gpu.lock import card_share, process_usage

MIB = 1 << 20
GIB = 1 << 30
SLEEPER = "import time; time.sleep(60)"


@pytest.fixture
def processes():  # -> Iterator[tuple[subprocess.Popen, subprocess.Popen]]
    """One process of ours (it carries the sandbox marker) and one foreign one, both idle."""
    ours = subprocess.Popen([sys.executable, "-c", SLEEPER], env={**os.environ, MARKER_VAR: "test-card-share"})
    foreign = subprocess.Popen([sys.executable, "-c", SLEEPER],
                               env={k: v for k, v in os.environ.items() if k != MARKER_VAR})
    try:
        yield ours, foreign
    finally:
        for proc in (ours, foreign):
            proc.kill()
            proc.wait()


def scripted_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, listings: list[str]) -> None:
    """nvidia-smi on PATH answering `--query-compute-apps` with the next of `listings` on each call (the
    last one again once they are used up)."""
    for k, text in enumerate(listings):
        (tmp_path / f"listing{k}").write_text(text)
    counter = tmp_path / "calls"
    counter.write_text("0")
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n"
                   f"n=$(cat {counter}); echo $((n + 1)) > {counter}\n"
                   f"[ \"$n\" -ge {len(listings)} ] && n={len(listings) - 1}\n"
                   f"cat {tmp_path}/listing$n\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def test_an_allocation_between_the_readings_counts_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        no_nvml: None, processes: tuple) -> None:
    """Our process allocates 6,000 MiB after the free memory was read and before the second listing: the
    free memory still has those bytes, so its usage counts as before the allocation. Read free-then-list
    (the budget before session 33) it counted them twice: 6,000 MiB more than the card had."""
    ours, foreign = processes
    scripted_smi(tmp_path, monkeypatch, [f"{ours.pid}, 1000, python\n{foreign.pid}, 500, other\n",
                                         f"{ours.pid}, 7000, python\n{foreign.pid}, 500, other\n"])
    share = card_share(0, lambda: 20000 * MIB)
    assert share is not None
    assert share.held_by(ours.pid) == 1000 * MIB
    assert share.held_by(foreign.pid) is None  # not ours: its memory is not ours to count as free
    assert share.free_with_ours == (20000 + 1000) * MIB
    assert share.our_processes == 1
    # What the old order read: the free memory first, then a listing made after the allocation.
    assert 20000 * MIB + process_usage(0)[ours.pid] == (20000 + 7000) * MIB


def test_memory_freed_between_the_readings_counts_as_still_held_by_nobody(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_nvml: None, processes: tuple) -> None:
    """Our process frees 6,000 MiB between the readings: the free memory was read while it held them, so
    counting the smaller reading leaves them out (stricter than the card, never more generous)."""
    ours, _ = processes
    scripted_smi(tmp_path, monkeypatch, [f"{ours.pid}, 7000, python\n", f"{ours.pid}, 1000, python\n"])
    share = card_share(0, lambda: 20000 * MIB)
    assert share is not None and share.held_by(ours.pid) == 1000 * MIB
    assert share.free_with_ours == 21000 * MIB


def test_a_process_in_one_listing_only_counts_its_context_not_its_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_nvml: None, processes: tuple) -> None:
    """A spare that starts between the readings (or a worker that exits): no usage is added back for it, but
    it is one of our processes, whose context the budget sets aside."""
    ours, _ = processes
    late = subprocess.Popen([sys.executable, "-c", SLEEPER], env={**os.environ, MARKER_VAR: "test-card-share"})
    try:
        scripted_smi(tmp_path, monkeypatch, [f"{ours.pid}, 3000, python\n",
                                             f"{ours.pid}, 3000, python\n{late.pid}, 600, python\n"])
        share = card_share(0, lambda: 10000 * MIB)
        assert share is not None
        assert share.held_by(late.pid) is None and share.held_by(ours.pid) == 3000 * MIB
        assert share.our_processes == 2
    finally:
        late.kill()
        late.wait()


def test_no_free_reading_no_share(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_nvml: None) -> None:
    scripted_smi(tmp_path, monkeypatch, ["No running processes found\n"])
    assert card_share(0, lambda: None) is None
    share = card_share(0, lambda: 5 * GIB)
    assert share is not None and share.ours == () and share.our_processes == 0 and share.free_with_ours == 5 * GIB


def test_nvml_process_record_has_the_c_layout() -> None:
    """nvmlProcessInfo_t (the _v2/_v3 calls): pid, 4 bytes of padding, usedGpuMemory, two instance ids;
    nvmlProcessInfo_v1_t: pid, padding, usedGpuMemory. A wrong layout would read every pid after the
    first from the wrong bytes."""
    assert ctypes.sizeof(nvml._ProcessInfo) == 24
    assert nvml._ProcessInfo.usedGpuMemory.offset == 8
    assert nvml._ProcessInfo.computeInstanceId.offset == 20
    assert ctypes.sizeof(nvml._ProcessInfoV1) == 16


def test_nvml_answers_none_without_a_gpu() -> None:
    """Where no GPU is (CI), NVML says nothing rather than raising: callers fall back to nvidia-smi."""
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the GPU tests below cover NVML")
    assert nvml.compute_processes(0) is None
    assert nvml.free_bytes(0) is None
    assert nvml.process_bytes(0) is None


# ------------------------------------------------------------------ on the GPU, through NVML

ALLOCATOR = """
import sys, torch
torch.cuda.init(); torch.zeros(1, device="cuda"); torch.cuda.synchronize()
held = []
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "alloc":
        held.append(torch.empty(2 << 30, dtype=torch.uint8, device="cuda")); torch.cuda.synchronize()
    elif line.strip() == "free":
        held.clear(); torch.cuda.synchronize(); torch.cuda.empty_cache()
    print("done", flush=True)
"""


@pytest.fixture
def allocator():  # -> Iterator[subprocess.Popen]
    """A process of ours with a CUDA context that allocates or frees 2 GiB when told (one line each)."""
    proc = subprocess.Popen([sys.executable, "-c", ALLOCATOR], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env={**os.environ, MARKER_VAR: "test-card-share"})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _tell(proc: subprocess.Popen, what: str) -> None:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(what + "\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "done"


@pytest.mark.gpu
def test_gpu_an_allocation_between_the_readings_counts_once(allocator: subprocess.Popen) -> None:
    """Real NVML, a real second process: it allocates 2 GiB right after this process read the free memory.
    Its usage counts as before the allocation, which is what the free memory was read beside."""
    gpu = torch.cuda.current_device()
    assert nvml.compute_processes(gpu) is not None, "NVML lists no processes on this GPU machine"
    before = nvml.process_bytes(gpu, allocator.pid)
    assert before is not None

    def free_then(what: str) -> Callable[[], int]:
        def read() -> int:  # the free memory, then the other process's change, before the second listing
            free = int(torch.cuda.mem_get_info(gpu)[0])
            _tell(allocator, what)
            return free
        return read

    share = card_share(gpu, free_then("alloc"))
    after = nvml.process_bytes(gpu, allocator.pid)
    assert after is not None and after - before >= 2 * GIB  # the allocation happened between the readings
    assert share is not None and share.held_by(allocator.pid) == before

    share = card_share(gpu, free_then("free"))
    released = nvml.process_bytes(gpu, allocator.pid)
    assert released is not None and after - released >= 2 * GIB
    assert share is not None and share.held_by(allocator.pid) == released  # never more than it held at the reading


@pytest.mark.gpu
def test_gpu_nvml_reads_this_process_and_the_card() -> None:
    """NVML sees this process's context and a free figure within the card's size."""
    gpu = torch.cuda.current_device()
    torch.zeros(1, device="cuda")
    mine = nvml.process_bytes(gpu)
    assert mine is not None and mine > 64 * MIB
    free = nvml.free_bytes(gpu)
    assert free is not None and 0 < free <= int(torch.cuda.mem_get_info(gpu)[1])


# ------------------------------------------------------------------ a new context is admitted by memory first


def test_the_budget_sets_aside_a_context_for_each_of_our_processes() -> None:
    from cudaforge.engine.gpu.lock import CONTEXT_BYTES, CardShare

    share = CardShare(free_bytes=40 * GIB, ours=((11, 20 * GIB), (12, 600 * MIB)), our_processes=3)
    assert share.free_with_ours == 40 * GIB + 20 * GIB + 600 * MIB
    assert share.budget() == share.free_with_ours - 3 * CONTEXT_BYTES


def test_no_context_admission_where_nvml_cannot_say(tmp_path: Path, no_nvml: None) -> None:
    """Without NVML (a process with no context cannot ask CUDA) the context is made as before, at once."""
    from cudaforge.engine.gpu.context import _admit_context
    from cudaforge.engine.gpu.ledger import live_entries

    assert _admit_context(0, str(tmp_path / "gpu0.lock")) is None
    assert live_entries(tmp_path / "gpu0.lock") == []


CONTEXT_MAKER = """
import sys, time
from cudaforge.engine.gpu.context import open_context
import torch
print("asking", flush=True)
start = time.monotonic()
open_context(0, sys.argv[1])
print(f"made {time.monotonic() - start:.3f}", flush=True)
sys.stdin.readline()
"""


@pytest.mark.gpu
def test_gpu_a_context_waits_for_memory_the_ledger_promised(tmp_path: Path) -> None:
    """Another process's reservation takes the whole budget (admitted alone, as the first evaluation is):
    a new process's context is not made until it goes, and the reservation the context took is gone once
    the context exists (the budget sees the context itself from then on)."""
    from cudaforge.engine.gpu.ledger import live_entries, reserve

    lock = tmp_path / "gpu0.lock"
    filler = reserve(lock, 1 << 40, 0)  # alone: admitted whatever the budget
    assert filler is not None
    proc = subprocess.Popen([sys.executable, "-c", CONTEXT_MAKER, str(lock)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env={**os.environ, MARKER_VAR: "test-card-share"})
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "asking"
        time.sleep(2.0)
        gpu = torch.cuda.current_device()
        assert proc.pid not in (nvml.compute_processes(gpu) or {}), "the context was made beside a full ledger"
        assert [e.pid for e in live_entries(lock)] == [os.getpid()]  # the context's admission still waits
        filler.release()
        line = proc.stdout.readline().split()
        assert line[0] == "made" and float(line[1]) >= 2.0
        assert proc.pid in (nvml.compute_processes(gpu) or {})
        assert live_entries(lock) == []  # the context's reservation went once the context existed
        proc.stdin.write("\n")
        proc.stdin.flush()
    finally:
        proc.kill()
        proc.wait()
