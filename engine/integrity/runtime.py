"""Runtime integrity checks, run in the worker (engine/worker/pipeline.py) on what actually happened.

- `fallback_finding`: the candidate's own kernels ran, but PyTorch's kernels (or aten ops on the CPU)
  cover every kernel the reference launches, at comparable time, while the candidate's own code
  takes a small share: a token kernel as decoration, PyTorch as the engine (`pytorch_fallback`).
- `TimedOutputCheck`: outputs of a random sample of the timed calls (always the last one) are
  compared with the reference's for the same inputs, outside the timed window, one output held at a
  time (`timing_output_mismatch`); the timed calls rotate two input draws (`Rotation`).
- `shape_findings`: correctness again at a second set of sizes, from the task's module-level size
  constants (`shape_specialized`, or a `shape_check_skipped` note).
- `FixedValueProbe`: `weak_task_check` only when one fixed value per output, the same for every
  trial, would pass the task's check.
- `clock_findings`: the CPU timer's clock against an independent one (a timer patched in place,
  e.g. through ctypes, keeps its identity but not its agreement with the other clock).

Every function here gets the models and callables from the worker's pipeline; nothing here is
imported by the app (torch is imported lazily).
"""

from __future__ import annotations

import ast
import contextlib
import math
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cudaforge.engine import check_kernels
from cudaforge.engine.integrity.registry import finding
from cudaforge.engine.observe import (
    EXT_RANGE,
    checkpoint,
    custom_launches,
    device_profile,
    fingerprints,
    flat_view,
    host_profile,
    signature,
    slice_elements,
    storage_address,
    storage_addresses,
    tensor_bytes,
    untimed_part,
)
from cudaforge.engine.results import Finding, KernelLaunch

# ------------------------------------------------------------------ pytorch_fallback

COMPARABLE_WORK = 0.5  # the candidate's work in the reference's kernels, as a fraction of the reference's
SMALL_SHARE = 0.5  # the candidate's own kernels' share of its time below which they "take a small share"


def fallback_rule(reference: Mapping[str, tuple[int, float]], library: Mapping[str, tuple[int, float]],
                  custom_us: float | None) -> dict[str, Any] | None:
    """The `pytorch_fallback` rule on per-name (launches, work) of the reference's kernels and of the
    candidate's non-custom kernels, and the time in the candidate's own kernels. Evidence when it fires.
    Work is device µs on CUDA and input elements on the CPU (see _cpu_op_totals).

    It fires when (1) every kernel name the reference launches is launched by the candidate as a
    PyTorch/library kernel at least as many times, (2) the candidate's work in those kernels is at least
    COMPARABLE_WORK of the reference's total, and (3) its own kernels take less than SMALL_SHARE of its
    time. A candidate that replaced any one of the reference's kernels with its own (e.g. keeps cuBLAS
    for the GEMM and fuses the epilogue) fails (1) and is not flagged. `custom_us=None` (the CPU, where
    the time of a tiny extension call is mostly call overhead) leaves (3) out.
    """
    if not reference:
        return None
    ref_total = sum(work for _, work in reference.values())
    missing = [n for n, (count, _) in reference.items() if library.get(n, (0, 0.0))[0] < count]
    if missing:
        return None
    covered = sum(library[n][1] for n in reference)
    lib_total = sum(work for _, work in library.values())
    if ref_total > 0 and covered < COMPARABLE_WORK * ref_total:
        return None
    own_share = None
    if custom_us is not None:
        own_share = custom_us / (custom_us + lib_total) if custom_us + lib_total > 0 else 0.0
        if own_share >= SMALL_SHARE:
            return None
    return {"reference_kernels": len(reference), "covered": round(covered, 3), "reference_total": round(ref_total, 3),
            "own_share": round(own_share, 4) if own_share is not None else None, "kernels": sorted(reference)[:10]}


def cuda_kernel_totals(prof: Any) -> dict[str, tuple[int, float]]:
    """name -> (launches, device µs) of the CUDA kernels in a profiler session (observe.device_profile) (the same filter as the
    candidate's kernel list in the worker's kernel check, which reads it from here)."""
    totals: dict[str, tuple[int, float]] = {}
    for evt in prof.key_averages():
        dev_time = getattr(evt, "device_time_total", None)
        if dev_time is None:
            dev_time = getattr(evt, "cuda_time_total", 0.0)
        if not dev_time or evt.key.startswith("cudaforge") or evt.key in ("Memcpy DtoD (Device -> Device)",):
            continue
        if getattr(evt, "device_type", None) is not None and "CUDA" not in str(evt.device_type):
            continue
        count, us = totals.get(evt.key, (0, 0.0))
        totals[evt.key] = (count + int(evt.count), us + float(dev_time))
    return totals


def _inside_extension(evt: Any) -> bool:
    parent = evt.cpu_parent
    while parent is not None:
        if parent.name.startswith(EXT_RANGE):
            return True
        parent = parent.cpu_parent
    return False


def _cpu_op_totals(prof: Any) -> tuple[dict[str, tuple[int, float]], float]:
    """(name -> (calls, input elements) of the aten ops outside extension-function calls, µs inside those
    calls). Elements, not time: CPU times of small ops are mostly overhead and thread wake-ups (they vary
    8x from call to call), while the sizes an op reads say deterministically whether it did the work."""
    ops: dict[str, tuple[int, float]] = {}
    custom_us = 0.0
    for evt in prof.function_events:
        name = evt.name
        if name.startswith(EXT_RANGE):
            if not _inside_extension(evt):
                custom_us += float(evt.cpu_time_total)
            continue
        if not name.startswith("aten::") or _inside_extension(evt):
            continue
        elements = sum(math.prod(shape) for shape in (evt.input_shapes or []) if isinstance(shape, list) and shape
                       and all(isinstance(d, int) for d in shape))
        count, work = ops.get(name, (0, 0.0))
        ops[name] = (count + 1, work + float(elements))
    return ops, custom_us


def fallback_finding(run_reference: Callable[[list[Any]], Any], run_candidate: Callable[[list[Any]], Any],
                     draw: Callable[[], list[Any]], device: Any, kernels: Sequence[KernelLaunch],
                     recorder: Any) -> Finding | None:
    """`pytorch_fallback` from what ran: on CUDA the kernels of one profiled reference forward against the
    candidate's kernel list (already profiled by check_custom_code); on the CPU the aten ops of one
    profiled forward of each, with the extension functions' calls as the candidate's own code. `draw()`
    gives each call its inputs, drawn before the profiler starts (its kernels are not the forward's)."""
    if not any(k.custom for k in kernels) and not any(v > 0 for v in custom_launches(recorder).values()):
        return None  # no custom code ran: that is no_custom_kernel
    extension_us = None
    if device.type == "cuda":
        inputs = draw()
        with device_profile() as prof:
            run_reference(inputs)
        del inputs
        # Memsets and copies are not kernels of the computation (cuBLAS may clear a workspace on some calls).
        reference = {n: v for n, v in cuda_kernel_totals(prof).items() if not n.startswith(("Memset", "Memcpy"))}
        library = {k.name: (int(k.count), float(k.device_time_us)) for k in kernels if not k.custom}
        custom_us: float | None = sum(float(k.device_time_us) for k in kernels if k.custom)
        where, unit = "kernels", "device_us"
    else:
        inputs = draw()
        with host_profile() as prof:
            run_reference(inputs)
        reference, _ = _cpu_op_totals(prof)
        del inputs  # one input set at a time
        inputs = draw()
        recorder.label_calls = True
        try:
            with host_profile() as prof:
                run_candidate(inputs)
        finally:
            recorder.label_calls = False
        library, extension_us = _cpu_op_totals(prof)
        custom_us = None  # mostly call overhead for tiny calls: not a measure of the work (see fallback_rule)
        where, unit = "aten ops", "input_elements"
    evidence = fallback_rule(reference, library, custom_us)
    if evidence is None:
        return None
    evidence.update(measured=where, unit=unit)
    if extension_us is not None:
        evidence["extension_us"] = round(extension_us, 3)
    share = f" ({evidence['own_share']:.0%} of its time)" if evidence["own_share"] is not None else ""
    return finding("pytorch_fallback",
                   f"the candidate's own code ran{share} but PyTorch's {where} cover all "
                   f"{evidence['reference_kernels']} of the reference's, at least as often and with comparable work: "
                   "PyTorch does the work", evidence)


# ------------------------------------------------------------------ timed outputs

TIMED_SAMPLES = 3  # random timed calls checked besides the last one
TF32_TOLERANCE = 1e-2
# A sampled timed call's compare of at least this much expected output may run side by side, its window's
# exclusive hold let go meanwhile: on the H200 sweep (2026-12-03) the four compares of a 6 GiB output, slices
# moved over from pageable host memory, were 4.5 of the 4.9 s that level1/19_ReLU held the GPU alone.
SIDE_BY_SIDE_BYTES = 256 << 20
# ... where a large compare took longer than this: the next ones let the GPU go. Letting it go costs a
# second drain of the readers before the next timed call (the windows' waits for readers averaged 0.47 s
# per hold in session 13's level-1 sweep), which a compare from page-locked memory with the fused kernel
# (about 0.15 s for 6 GiB on the H200) does not: the first large compare is timed in the window, and only
# a slow one (pageable memory, a slow bus) sends the rest side by side. The bar is at least what the
# window's own drain cost (TimedOutputCheck's `pause_cost_s`): on the H200 (session 14, level 2) 27 windows
# let the GPU go for compares of a fraction of a second and waited about as long again for each way back.
SIDE_BY_SIDE_S = 0.25


class FlippingDraw:
    """One input draw that stands in for two where a second would not fit the memory rule: its floating-
    point tensors are reversed in place (flattened: every dimension flipped) between the two contents, so
    a cache keyed on the inputs' content still never hits. Every value stays one the task drew, and a
    full flip keeps symmetry, row sums and positive-definiteness; integer and non-contiguous tensors stay
    as they are. The flip runs in slices (observe.slice_elements): no full-size temporary."""

    def __init__(self, inputs: list[Any]) -> None:
        self.inputs, self.parity, self.flips = inputs, 0, 0
        # Frozen: the content stays (the host-timed calls, whose kernel timer would count a flip's kernels).
        self.frozen = False

    def at(self, parity: int) -> list[Any]:
        """The inputs with content `parity` (0: as drawn, 1: flipped), flipping in place if needed."""
        if parity != self.parity and not self.frozen:
            for x in self.inputs:
                flip_in_place(x)
            self.parity = parity
            self.flips += 1
        return self.inputs


def flip_in_place(x: Any) -> None:
    """Reverse a contiguous floating-point tensor's elements (flattened) in place, in slices (no full-size
    temporary); other tensors stay as they are."""
    import torch

    if not (isinstance(x, torch.Tensor) and x.is_floating_point() and x.is_contiguous() and x.numel() > 1):
        return
    flat = x.detach().view(-1)
    n = flat.numel()
    step = slice_elements(x.device)
    with torch.no_grad():
        for lo in range(0, n // 2, step):
            size = min(step, n // 2 - lo)
            head, tail = flat[lo:lo + size], flat[n - lo - size:n - lo]
            saved = head.clone()
            head.copy_(tail.flip(0))
            tail.copy_(saved.flip(0))
            del saved


class Rotation:
    """A timed callable that calls `model` on the next of several input draws, in turn, so a cache keyed
    on the inputs' content (holding one entry) earns nothing during timing. `draws` is a list of draws, or
    one FlippingDraw whose two contents alternate in place (see memory.second_draw_fits)."""

    def __init__(self, model: Any, draws: list[list[Any]] | FlippingDraw) -> None:
        self.model, self.draws, self.calls = model, draws, 0

    def contents(self) -> int:
        """How many input contents the calls rotate over."""
        return 2 if isinstance(self.draws, FlippingDraw) else len(self.draws)

    def next_index(self) -> int:
        """Which content the next call gets."""
        return self.calls % self.contents()

    def at(self, index: int) -> list[Any]:
        """The inputs with content `index` (a FlippingDraw is put in that content now: outside the timed
        window only)."""
        if isinstance(self.draws, FlippingDraw):
            return self.draws.at(index)
        return self.draws[index]

    def peek(self) -> list[Any]:
        """The inputs of the next call (a FlippingDraw is put in that content now: call it outside the
        timed window, as RotationPrepare does)."""
        return self.at(self.next_index())

    def __call__(self) -> Any:
        import torch

        inputs = self.peek()
        self.calls += 1
        with torch.no_grad():
            return self.model(*inputs)


class RotationPrepare:
    """Timing hooks (Timer.event_times / host_times): before each call, the called side's next inputs are
    put in place (a FlippingDraw's flip), outside the timed window."""

    def __init__(self, rotations: Mapping[str, Any]) -> None:
        self.rotations = rotations

    def begin(self, trials: int) -> None:
        pass

    def before(self, name: str) -> None:
        rotation = self.rotations.get(name)
        if isinstance(rotation, Rotation):
            rotation.peek()

    def after(self, name: str, out: Any) -> None:
        pass


def largest_magnitude(t: Any) -> float:
    """max |t| from one fused min/max reduction: `t.abs().max()` made an output-sized temporary, which put
    a second output beside the expected one in every sampled timed check (on the H200 a 2 GiB softmax's
    timing peaked at 1.28x the reference's own peak, level1/11's at 1.77x). In memory order (flat_view): on
    a transposed output aminmax made a contiguous copy first (level1/97's 2 GiB, bench/peak_trace.py)."""
    import torch

    with torch.no_grad():
        low, high = torch.aminmax(t if t.is_contiguous() else flat_view(t))
    return max(abs(float(low)), abs(float(high)))


def _flat(out: Any) -> list[Any]:
    return list(out) if isinstance(out, (list, tuple)) else [out]


class TimedOutputCheck:
    """Hooks for timing.Timer.event_times: compares sampled timed candidate calls with the reference.

    The timed calls rotate over two input contents (Rotation), so a sampled call's expected output is the
    reference's output for the content that call gets. Where the reference leaves its inputs as they were,
    `prepare()` computes both expected outputs once, before the timed window (side by side with other
    evaluations: engine/worker/gpu_share.py), and they wait off the device; the window then spends nothing
    on them but the compares. Where the reference changes its inputs, before a sampled call (outside the
    timed window) the candidate's next inputs are copied and the reference computes the expected output
    from the copy, held until that call is compared. Right after a sampled call's end event, the device is
    synchronized and the output compared; a large one's compare runs side by side (`side_by_side`: the
    window's exclusive hold goes meanwhile and comes back before the next timed call). A sampled call whose
    inputs and output are, bit for bit and in the same layout, those of an earlier sampled call that passed
    its compare passes without one (fingerprints: a pass over each on the device, no copy from the host):
    the same bytes for the same input values get the same verdict. Outputs the reference returns from timed calls are overwritten
    (NaN) once their end event is recorded, and the expected outputs' device memory before it is freed, so
    a candidate handing back unwritten memory cannot find the reference's result in it.
    """

    def __init__(self, candidate: Rotation, reference_model: Any, device: Any, *, atol: float, rtol: float,
                 compare: Callable[..., Any], protected: set[int], sync: Callable[[], None],
                 numerics: tuple[Callable[[], Any], Callable[[], Any]], samples: int = TIMED_SAMPLES,
                 to_host: Callable[[list[Any]], list[Any]] = list, reference_mutates: bool = True,
                 side_by_side: Callable[[], Any] = contextlib.nullcontext,
                 side_by_side_bytes: int = SIDE_BY_SIDE_BYTES, side_by_side_s: float = SIDE_BY_SIDE_S,
                 pause_cost_s: Callable[[], float] = lambda: 0.0,
                 keep: Callable[[list[Any]], list[Any]] | None = None) -> None:
        self.candidate, self.reference_model, self.device = candidate, reference_model, device
        # A compare of at least `side_by_side_bytes` of expected output lets the window's exclusive hold go
        # while it runs (the worker: gpu_share.side_by_side) once one such compare took over `side_by_side_s`;
        # smaller or faster ones take less than the switch.
        self.side_by_side, self.side_by_side_bytes = side_by_side, side_by_side_bytes
        self.side_by_side_s = side_by_side_s
        # What letting the GPU go would cost: the last wait for readers of the window's hold (the worker:
        # gpu_share.write_wait_s); a compare shorter than that stays in the window.
        self.pause_cost_s = pause_cost_s
        self.slow_compares = False  # a large compare in the window took over side_by_side_s and pause_cost_s()
        self.compared_side_by_side = 0
        self.to_host = to_host  # where the expected output waits for the timed call (the worker: pinned host)
        # Or, where it returns the outputs themselves, where they stay (the worker: on the device while small,
        # memory.ExpectedPlace); never for outputs that share memory with the inputs or parameters.
        self.keep = keep
        self.atol_for: list[float] = []
        # Whether the reference changes its inputs (the correctness trials saw it): only then does it get a copy.
        self.reference_mutates = reference_mutates
        self.atol, self.rtol, self.compare, self.sync = atol, rtol, compare, sync
        self.protected = protected  # storages the reference's outputs may share (its inputs, parameters)
        self.reference_numerics, self.timing_numerics = numerics
        self.samples = samples
        self.scale_atol = rtol >= TF32_TOLERANCE  # see timed_tolerance
        self.sample: set[int] = set()
        self.trials = 0
        self.index = 0
        self.expected: list[Any] | None = None
        self.reference_aliases = False  # the reference itself returns memory of its inputs or parameters
        self.checked: list[int] = []
        self.failures: list[dict[str, Any]] = []
        self.aliased: list[int] = []
        # Per input content (Rotation.next_index): the expected outputs, their atols and whether the
        # reference returned memory it was given; filled by prepare().
        self.prepared: dict[int, tuple[list[Any], list[float], bool]] = {}
        # The inputs' signature of each sampled call that passed its compare -> its output's (observe.signature).
        self.passed: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self.inputs_as: tuple[Any, ...] | None = None  # the sampled call's inputs, as before() read them
        self.repeats = 0  # sampled calls that passed as repeats of a compared one

    def begin(self, trials: int) -> None:
        """A new timed window (a noisy timing is measured again: each window is sampled and checked)."""
        self.trials = trials
        self.index = 0
        rng = random.SystemRandom()
        pool = range(max(trials - 1, 0))
        self.sample = set(rng.sample(pool, min(self.samples, len(pool)))) | {trials - 1}

    def prepare(self, part: Callable[[str], Any] = untimed_part) -> int:
        """Before the timed window: where the reference leaves its inputs as they were, compute the expected
        output of each input content the timed calls rotate over, once, and move it off the device. Returns
        how many were computed (0: the reference changes its inputs, so each sampled call computes its own,
        from a copy of that call's inputs). `part(name)` times its steps (the worker's sub-phases)."""
        if self.reference_mutates:
            return 0
        for index in range(self.candidate.contents()):
            self.prepared[index] = self._expected_for(self.candidate.at(index), copy_inputs=False, part=part)
        return len(self.prepared)

    def _expected_for(self, inputs: list[Any], copy_inputs: bool,
                      part: Callable[[str], Any] = untimed_part
                      ) -> tuple[list[Any], list[float], bool]:
        """The reference's output for `inputs` (reference numerics), its atols and whether it returned memory
        of its inputs or parameters, the output moved off the device and its device memory poisoned."""
        import torch

        # A copy of the inputs where the reference changes its inputs in place, freed once it has run (else
        # it runs on the draw itself: no second copy of the inputs beside the two draws); the reference's
        # output is fresh memory that nothing touches until it is compared.
        if copy_inputs:
            inputs = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        self.reference_numerics()
        try:
            with torch.no_grad(), part("expected_reference"):
                expected = _flat(self.reference_model(*inputs))
        finally:
            self.timing_numerics()
        aliases = bool(storage_addresses(expected) & (storage_addresses(inputs) | self.protected))
        del inputs
        # TF32 errors scale with the output: the scale is read here, while the output is on the device.
        with part("expected_scale"):
            atol_for = [max(self.atol, TF32_TOLERANCE * largest_magnitude(e))
                        if self.scale_atol and isinstance(e, torch.Tensor) and e.is_floating_point() and e.numel() > 0
                        else self.atol for e in expected]
        on_device = expected
        with part("expected_off_device"):
            expected = self.keep(expected) if self.keep is not None and not aliases else self.to_host(expected)
        kept = {id(v) for v in expected}
        # What moved off the device is freed now, poisoned first: a candidate handing back unwritten memory
        # finds NaN. What stays is alive until its sampled calls are compared: no allocation gets its memory.
        _poison([v for v in on_device if id(v) not in kept], self.protected)
        del on_device
        return expected, atol_for, aliases

    def before(self, name: str) -> None:
        if name != "candidate" or self.index not in self.sample:
            return
        inputs = self.candidate.peek()  # in its content already (RotationPrepare ran first): no flip here
        prepared = self.prepared.get(self.candidate.next_index())
        if prepared is None:
            prepared = self._expected_for(inputs, copy_inputs=self.reference_mutates)
        self.expected, self.atol_for, self.reference_aliases = prepared
        self.inputs_as = signature(inputs, fingerprints(inputs))

    def after(self, name: str, out: Any) -> None:

        if name == "reference":
            _poison(_flat(out), self.protected)
            return
        index = self.index
        self.index += 1
        if self.expected is None:
            return
        self.sync()
        expected, self.expected = self.expected, None  # a prepared one stays in `prepared` for the next sample
        got = _flat(out)
        self.checked.append(index)
        inputs_as, self.inputs_as = self.inputs_as, None
        reason = ""
        if len(got) != len(expected):
            reason = f"{len(got)} outputs instead of {len(expected)}"
        elif storage_addresses(got) & storage_addresses(expected):  # a kept expected output, handed back
            reason = "returned the memory of the expected output itself"
        elif self._repeats_a_passed_call(inputs_as, got):
            self.repeats += 1
        else:
            reason = self._compared(expected, got, inputs_as)
        if reason:
            self.failures.append({"call": index, "reason": reason})
        if storage_addresses(got) & self.protected and not self.reference_aliases:  # timed inputs, parameters
            self.aliased.append(index)
        del expected, got

    def _compared(self, expected: list[Any], got: list[Any], inputs_as: tuple[Any, ...] | None) -> str:
        """The compare of a sampled call's outputs ("" or why one is wrong); a large one side by side once
        such compares proved slow. A pass is remembered for its inputs (`passed`)."""
        reason = ""
        large = tensor_bytes(expected) >= self.side_by_side_bytes
        aside = large and self.slow_compares
        self.compared_side_by_side += aside
        started = time.perf_counter()
        with self.side_by_side() if aside else contextlib.nullcontext():
            for k, (e, g) in enumerate(zip(expected, got, strict=True)):
                check = self.compare(k, e, g, self.atol_for[k], self.rtol)
                if not check.passed:
                    reason = f"output {k}: {check.reason}"
                    break
            if not reason and inputs_as is not None and inputs_as not in self.passed:
                self.passed[inputs_as] = signature(got, fingerprints(got))  # a pass over the output: once per content
        if large and not aside and time.perf_counter() - started > max(self.side_by_side_s, self.pause_cost_s()):
            self.slow_compares = True  # the next large compares let the GPU go
        return reason

    def _repeats_a_passed_call(self, inputs_as: tuple[Any, ...] | None, got: list[Any]) -> bool:
        """Whether this sampled call's inputs are an earlier passed one's and its output that call's, bit for
        bit and in the same layout (a change in either is compared in full)."""
        earlier = self.passed.get(inputs_as) if inputs_as is not None else None
        return earlier is not None and signature(got, fingerprints(got)) == earlier

    def findings(self) -> list[Finding]:
        out = []
        if self.failures:
            first = self.failures[0]
            out.append(finding(
                "timing_output_mismatch",
                f"timed call {first['call'] + 1} of {self.trials} returned a wrong output ({first['reason']}); "
                f"{len(self.failures)} of {len(self.checked)} checked timed calls were wrong",
                {"checked_calls": self.checked, "failures": self.failures[:5], "timed_calls": self.trials,
                 "atol": self.atol, "rtol": self.rtol}))
        if self.aliased:
            out.append(finding("output_aliases_input", "during timing the candidate returned memory of "
                               "its inputs or of the reference model's parameters", {"timed_calls": self.aliased[:5]}))
        return out


def _poison(values: list[Any], protected: set[int]) -> None:
    """Overwrite reference outputs (NaN, or 0 for integers) before their memory is freed, except memory
    in `protected` (inputs, parameters): a candidate that returns unwritten memory must not find them."""
    import torch

    for t in values:
        if isinstance(t, torch.Tensor) and t.numel() > 0 and storage_address(t) not in protected:
            with contextlib.suppress(RuntimeError):
                t.fill_(float("nan") if t.is_floating_point() else 0)


def timed_tolerance(atol: float, rtol: float, timing_numerics: Mapping[str, Any], device: Any) -> tuple[float, float]:
    """The timed calls run with PyTorch's default numerics; where those allow TF32, a candidate that keeps
    cuBLAS/cuDNN for part of the work computes in TF32 there, so its outputs are held to 1e-2 (relative,
    and absolute relative to the output's largest value): loose for rounding, tight for stale, unwritten
    or other-draw outputs, which are wrong at the scale of the output itself."""
    if device.type == "cuda" and (timing_numerics.get("matmul_allow_tf32") or timing_numerics.get("cudnn_allow_tf32")
                                  or timing_numerics.get("float32_matmul_precision") != "highest"):
        return max(atol, TF32_TOLERANCE), max(rtol, TF32_TOLERANCE)
    return atol, rtol


# ------------------------------------------------------------------ clocks


def clock_findings(pairs: Mapping[str, tuple[float, float]]) -> list[Finding]:
    """Each timed callable's total on the timer clock against an independent clock read around the same
    calls (CPU timing). They agree to within 10% + 1 ms unless one was altered in place."""
    bad = {n: {"timer_s": round(a, 6), "monotonic_s": round(b, 6)} for n, (a, b) in pairs.items()
           if abs(a - b) > 0.1 * max(a, b) + 1e-3}
    if not bad:
        return []
    return [finding("harness_tampering", "the timer clock disagrees with an independent clock around the "
                    "timed calls of " + ", ".join(sorted(bad)) + ": it was altered in place (e.g. through ctypes)",
                    {"replaced": ["time.perf_counter (in place)"], "clocks": bad})]


# ------------------------------------------------------------------ weak task check




class FixedValueProbe:
    """Whether one fixed value per float output, the same in every trial, would pass every trial.

    For each element e the passing constants form [e - tol, e + tol] with tol = atol + rtol·|e| (the
    correctness rule); one constant passes a whole trial iff the intersection over its elements is not
    empty, and every trial iff the intersection over all trials is not empty.
    """

    def __init__(self, atol: float, rtol: float) -> None:
        self.atol, self.rtol = atol, rtol
        self.bounds: dict[int, tuple[float, float]] = {}
        self.trials = 0
        self.possible = True

    def add(self, expected: list[Any]) -> None:
        import torch

        self.trials += 1
        floats = {k: t for k, t in enumerate(expected)
                  if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 0}
        if not floats:
            self.possible = False
            return
        for k, t in floats.items():
            flat = flat_view(t.detach())  # bounds do not depend on the order: memory order, no copy
            acc = check_kernels.fixed_bounds(flat, self.atol, self.rtol)  # on a GPU: one pass (check_kernels.py)
            if acc is None:
                # In slices (no full-size temporaries), the bounds kept on the device: one host sync per output.
                acc = torch.tensor([float("-inf"), float("inf"), 1.0], dtype=torch.float64, device=flat.device)
                step = slice_elements(flat.device) // 4  # float64 temporaries: a few of a quarter slice each
                for start in range(0, flat.numel(), step):
                    e = flat[start:start + step].double()
                    tol = e.abs().mul_(self.rtol).add_(self.atol)
                    acc[0] = torch.maximum(acc[0], (e - tol).max())
                    acc[1] = torch.minimum(acc[1], (e + tol).min())
                    acc[2] = torch.minimum(acc[2], torch.isfinite(e).all().double())
                    del e, tol
            lo, hi, finite = acc.tolist()
            if not finite:
                self.possible = False
                return
            old = self.bounds.get(k)
            if old is not None:
                lo, hi = max(lo, old[0]), min(hi, old[1])
            self.bounds[k] = (lo, hi)
            if lo > hi:
                self.possible = False

    def finding(self, trials: int) -> Finding | None:
        if not self.possible or self.trials < trials or not self.bounds:
            return None
        zero = all(lo <= 0.0 <= hi for lo, hi in self.bounds.values())
        values = {k: 0.0 if zero else (lo + hi) / 2 for k, (lo, hi) in self.bounds.items()}
        kind = "zero" if zero else "constant"
        return finding("weak_task_check", f"a {kind} tensor (the same value in every trial) would pass this "
                       "task's correctness check at the configured tolerance; the result proves little",
                       {"trivial_output": kind, "values": {str(k): v for k, v in values.items()},
                        "atol": self.atol, "rtol": self.rtol})


# ------------------------------------------------------------------ shape specialization

_HYPER = re.compile(r"kernel|stride|pad|dilation|group|head|eps|momentum|scale|factor|prob|^p$|margin|alpha|beta|"
                    r"seed|bits|^k$|top|axis|reduce|order|window|pool", re.I)
MIN_SIZE = 8  # smaller constants are left alone (axes, kernel sizes, channel counts of 3)


def size_constants(task: Any, source: str) -> dict[str, int]:
    """Module-level int constants that get_inputs()/get_init_inputs() use (directly or through other
    module-level assignments), look like sizes (not kernel sizes, strides, axes...) and are >= MIN_SIZE.
    Any spelling a task uses: `ROWS = 64`, `batch_size = 16`, `dim: int = 512`, `h = w = 128` and
    `rows, cols = 64, 512` (see _bindings)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return {}
    assigns: dict[str, ast.AST] = {}
    funcs: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            assigns.update(_bindings(node))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            funcs[node.name] = node
    stack = [funcs[n] for n in ("get_inputs", "get_init_inputs") if n in funcs]
    used: set[str] = set()
    while stack:
        node = stack.pop()
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id not in used:
                if sub.id in assigns:
                    used.add(sub.id)
                    stack.append(assigns[sub.id])
                elif sub.id in funcs:
                    used.add(sub.id)
                    stack.append(funcs[sub.id])
    out = {}
    for name in sorted(used):
        value = getattr(task, name, None)
        if name in assigns and isinstance(value, int) and not isinstance(value, bool) and value >= MIN_SIZE \
                and not _HYPER.search(name):
            out[name] = value
    return out


def smaller_size(value: int) -> int:
    """An odd size below `value`: just below for small sizes, about half for large ones (cheap)."""
    if value >= 256:
        half = value // 2
        return half + 1 if half % 2 == 0 else half
    return value - 1 if value % 2 == 0 else value - 2


def rewrite_constants(source: str, values: Mapping[str, int]) -> str:
    """The task source with the module-level assignments of `values`' names set to those values."""
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            chosen = {values[t.id] for t in node.targets if t.id in values}  # type: ignore[attr-defined]
            if len(chosen) == 1:
                node.value = ast.Constant(chosen.pop())
        elif isinstance(node, ast.Assign) and isinstance(node.value, (ast.Tuple, ast.List)):
            for target in node.targets:  # `rows, cols = 64, 512`: each element on its own
                for name, k in _unpacked(target, node.value):
                    if name in values:
                        node.value.elts[k] = ast.Constant(values[name])
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id in values:
            node.value = ast.Constant(values[node.target.id])
    return ast.unparse(ast.fix_missing_locations(tree))


def _unpacked(target: ast.AST, value: ast.Tuple | ast.List) -> list[tuple[str, int]]:
    """(name, element index) for a tuple target unpacking a literal tuple of the same length; [] otherwise
    (`a, b = shape` cannot be rewritten, so its names are no size constants)."""
    if not isinstance(target, (ast.Tuple, ast.List)) or len(target.elts) != len(value.elts):
        return []
    if not all(isinstance(e, ast.Name) for e in target.elts):
        return []
    return [(e.id, k) for k, e in enumerate(target.elts)]  # type: ignore[attr-defined]


def _bindings(node: ast.Assign | ast.AnnAssign) -> dict[str, ast.AST]:
    """The names a module-level assignment binds, each with the expression that gives its value (the
    element of a literal tuple for `rows, cols = 64, 512`), for the assignments rewrite_constants rewrites."""
    if isinstance(node, ast.AnnAssign):
        return {node.target.id: node.value} if isinstance(node.target, ast.Name) and node.value is not None else {}
    if all(isinstance(t, ast.Name) for t in node.targets):  # `height = width = 128` binds both
        return {t.id: node.value for t in node.targets}  # type: ignore[attr-defined]
    out: dict[str, ast.AST] = {}
    if isinstance(node.value, (ast.Tuple, ast.List)):
        for target in node.targets:
            out.update({name: node.value.elts[k] for name, k in _unpacked(target, node.value)})
    return out


def load_variant(source: str, path: str, values: Mapping[str, int]) -> Any:
    """A fresh module object from the task source with the size constants replaced."""
    import types

    module = types.ModuleType("cudaforge_task_sizes")
    module.__file__ = path
    exec(compile(rewrite_constants(source, values), path, "exec"), module.__dict__)  # the task's own code
    return module


def shape_findings(task: Any, source: str, path: str, init: list[Any], model: Any, model_new: Any,
                   candidate_cls: Any, *, prepare: Callable[[Any], Any], inputs_for: Callable[[Any], list[Any]],
                   run_reference: Callable[[Any, list[Any]], Any], run_candidate: Callable[[Any, list[Any]], Any],
                   compare: Callable[[list[Any], list[Any]], str], copy_parameters: Callable[[Any, Any], Any],
                   seed: int, evict: Callable[[], None] = lambda: None,
                   to_host: Callable[[list[Any]], list[Any]] = list,
                   share: Callable[[Any, Any], Any] = lambda reference, candidate: None,
                   build_model: Callable[[Callable[[], Any], str], Any] = lambda build, role: build()) -> list[Finding]:
    """`shape_specialized` when the candidate is wrong, crashes or refuses at a second, smaller set of sizes
    at which the reference works; a `shape_check_skipped` note when the sizes cannot be changed.

    `prepare(model)` moves a fresh model to the device/dtype; `inputs_for(module)` draws one input set from
    a task module; `compare(expected, got)` returns "" or the first mismatch; `run_candidate` raises the
    worker's CandidateFailure on an exception in the candidate. `evict()` frees the full-size models'
    memory before models of the new sizes are built (they are not used again). One input set and one
    output on the device at a time: the reference's output waits on the host (`to_host`) while the
    candidate runs on a second draw of the same seed (no clone). `share(reference, candidate)` runs before
    the new candidate is moved (the worker: its weights become the reference's, shared_weights.py).
    `build_model(build, role)` runs each model's construction, role "reference" first, then "candidate" (the
    worker: without its read hold until the first GPU op, gpu_share.off_the_gpu; the candidate's replays the
    reference's random fills, worker/init_replay.py).
    """
    constants = size_constants(task, source)
    if not constants:
        return [_skipped("the task's get_inputs()/get_init_inputs() use no module-level size constants", {})]
    values = {name: smaller_size(v) for name, v in constants.items()}
    changed = {name: [constants[name], values[name]] for name in constants}
    described = ", ".join(f"{n}={v[1]} (was {v[0]})" for n, v in changed.items())
    import torch

    try:
        variant = load_variant(source, path, values)
        new_init = list(variant.get_init_inputs())
        ref_model = model
        rebuild = not _same_values(new_init, list(init))
        if rebuild:
            evict()
            # Step boundaries: a timed window waiting elsewhere goes first. Readers inside this check, one
            # step before, made the longest drains of the H200 sweeps' lock timelines.
            checkpoint()
            torch.manual_seed(seed)
            ref_model = prepare(build_model(lambda: variant.Model(*new_init), "reference"))
            checkpoint()
        expected = to_host(_flat(run_reference(ref_model, inputs_for(variant))))
        checkpoint()
    except Exception as exc:  # the task itself does not work at other sizes
        return [_skipped(f"the reference fails at {described}: {type(exc).__name__}: {str(exc)[:160]}", changed)]
    cand = model_new
    try:
        if rebuild:
            torch.manual_seed(seed)
            cand = build_model(lambda: candidate_cls(*new_init), "candidate")
            share(ref_model, cand)  # before it moves: the weights it shares with the reference exist once
            cand = prepare(cand)
            copy_parameters(ref_model, cand)
            checkpoint()
        got = _flat(run_candidate(cand, inputs_for(variant)))  # the same seed: the reference's values
        reason = compare(expected, got)
    except Exception as exc:
        reason = f"{getattr(exc, 'message', None) or exc}"[:300]
        reason = f"raised: {reason}"
    if not reason:
        return []
    return [finding("shape_specialized", f"at {described} the candidate is wrong or fails ({reason}); "
                    "the reference works there: the kernel may be specialized to the task's sizes",
                    {"changed": changed, "reason": reason})]


def _same_values(a: list[Any], b: list[Any]) -> bool:
    """Equal init arguments (tensors compared by value; anything incomparable counts as changed)."""
    import torch

    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        try:
            same = torch.equal(x, y) if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) else bool(x == y)
        except Exception:
            same = False
        if not same:
            return False
    return True


def _skipped(why: str, changed: Mapping[str, Any]) -> Finding:
    return finding("shape_check_skipped", f"second set of sizes not checked: {why}", {"changed": dict(changed)})
