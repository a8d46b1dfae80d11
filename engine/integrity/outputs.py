"""Runtime integrity checks on outputs, run in the worker after correctness passed.

`check_cache_reuse` calls the candidate with new values written into the *same* input memory (and in new
memory) and compares with the reference, which exposes caches keyed on pointers, version counters,
sampled elements or shapes; `check_constant_output` finds outputs that are constant where the
reference's are not. torch is imported lazily.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from cudaforge.engine import check_kernels
from cudaforge.engine.integrity.registry import finding
from cudaforge.engine.integrity.runtime import flip_in_place
from cudaforge.engine.observe import (
    checkpoint,
    common_order,
    coordinates,
    flat_view,
    paired_pieces,
    signature,
    slice_elements,
    tensor_bytes,
    untimed_part,
)
from cudaforge.engine.results import Finding, Severity

SPARSE_ROUNDS = 3  # sparse same-memory probes of check_cache_reuse, their masks disjoint (at most 1/fraction)


@dataclass(frozen=True)
class VerifiedCall:
    """A correctness trial that passed, as the cache probes can recognise it: its inputs' and both sides'
    outputs' signatures (`signature`). A probe whose inputs have the trial's signature and whose candidate
    output has the candidate's is judged by that trial's compare: the same bytes in the same layout were
    already found within tolerance of the reference's output for the same input values."""

    inputs: tuple[Any, ...]
    reference: tuple[Any, ...]  # the reference's outputs' fingerprints (the probes' `previous`)
    candidate: tuple[Any, ...]


def _tensors(values: Iterable[Any]) -> list[Any]:
    import torch

    return [v for v in values if isinstance(v, torch.Tensor)]


def _flat(out: Any) -> list[Any]:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _band_mask(u: Any, band: int, fraction: float) -> Any:
    """The elements whose draw `u` falls in band `band` of width `fraction`: [band*f, (band+1)*f)."""
    return (u >= band * fraction) & (u < (band + 1) * fraction)


def _mix_in_place(m: Any, seed: int, band: int, gen: Any, fraction: float) -> None:
    """Replace about `fraction` of m's elements, and always at least one, by m's own values at other
    positions (each slice rolled by a random offset): valid values of the task's own draw, with no second
    input set and nothing from the host.

    Which elements change comes from one uniform draw per element, the same in every round (a generator
    on m's device seeded with `seed` afresh each call): round `band` changes those whose draw lies in
    [band*fraction, (band+1)*fraction), so the rounds change disjoint sets and no element changes in two
    of them. The single element changed in every round (for tensors too small for a band to hold one)
    moves one position per round, so an element changes in at most two of the SPARSE_ROUNDS rounds. A
    cache validated by one sampled element therefore sees it unchanged in at least one round while other
    values changed, and returns its stale result: with masks drawn independently it escaped all three
    rounds with probability about (1/16)^3 (at three such seeds the adversarial suite's cache_evasive.py
    was accepted, 1.1-1.7x faster than eager: bench/results/2026-12-06-s29-cache-evasive-seeds.log).
    The roll offsets come from `gen`, seeded apart from the masks (masks and offsets drawn on the host took
    seconds per probe of an 8 GiB input on the GPU machine)."""
    import torch

    n_all = m.numel()
    if n_all < 2:
        return
    bands = torch.Generator(device=m.device).manual_seed(seed)
    if not m.is_contiguous():
        mask = _band_mask(torch.rand(m.shape, generator=bands, device=m.device), band, fraction)
        donor = m.reshape(-1).roll(1 + int(torch.randint(n_all - 1, (1,), generator=gen, device=m.device)))
        m.copy_(torch.where(mask, donor.view(m.shape), m))
        del mask
    else:
        flat = m.view(-1)
        step = slice_elements(m.device)
        starts = [s for s in range(0, n_all, step) if min(step, n_all - s) >= 2]
        # Every slice's offset drawn at once: one host sync per tensor, not one per slice.
        draws = torch.rand(len(starts), generator=gen, device=m.device).tolist() if starts else []
        for start, u in zip(starts, draws, strict=True):
            n = min(step, n_all - start)
            part = flat[start:start + n]
            mask = _band_mask(torch.rand(n, generator=bands, device=m.device), band, fraction)
            shift = 1 + min(n - 2, int(u * (n - 1)))  # in 1..n-1
            part.copy_(torch.where(mask, part.roll(shift), part))
            del mask
    i = (int(torch.randint(n_all, (1,), generator=bands, device=m.device)) + band) % n_all
    j = (i + 1 + int(torch.randint(n_all - 1, (1,), generator=gen, device=m.device))) % n_all
    if m.is_contiguous():
        flat = m.view(-1)
        flat[i] = flat[j].clone()
    else:
        at_i, at_j = coordinates([i, j], m.shape, tuple(range(m.dim())))  # row-major: i and j as counted
        m[at_i] = m[at_j].clone()


OFFSET_BYTES = 4096  # where new_memory's tensors start in memory they may share with the freed inputs'


def _offset_copy(host: Any, device: Any) -> Any:
    """`host`'s values in a new tensor on `device` whose data (and storage) start OFFSET_BYTES past the
    start of its allocation: never at the address of a tensor freed just before, though the allocator
    may hand back the same memory. The allocation lives as long as the tensor (DLPack's owner)."""
    import torch
    from torch.utils import dlpack

    nbytes = host.numel() * host.element_size()
    buf = torch.empty(nbytes + OFFSET_BYTES, dtype=torch.uint8, device=device)
    view = buf[OFFSET_BYTES:].view(host.dtype).view(host.shape)
    view.copy_(host)
    try:
        out = dlpack.from_dlpack(dlpack.to_dlpack(view))  # its own storage, starting at the view's data
    except Exception:  # a dtype DLPack cannot carry: the view (its data pointer still differs)
        return view
    out._cudaforge_allocation = buf  # the memory's one owner, alive as long as the tensor (and counted once)
    return out


SPACER_BYTES = 4 << 20  # held while the new-memory draw is made where the probed inputs were just freed


def _addresses(values: list[Any]) -> set[int]:
    import torch

    return {p for v in values if isinstance(v, torch.Tensor) and v.numel() > 0
            for p in (v.data_ptr(), v.untyped_storage().data_ptr())}


def _draw_elsewhere(work: list[Any], draw: Callable[[], list[Any]], to_host: Callable[[list[Any]], list[Any]]
                    ) -> list[Any]:
    """A fresh draw in new memory once the probed inputs (`work`, emptied here) are freed, never at their
    addresses: a cache that recomputes on the same pointers and serves its entry on new ones must not find
    them again. A spacer taken from the freed memory first makes the allocator put the draw elsewhere; where
    it still lands on an old address, the draw goes to the host and comes back into new tensors placed past
    the start of whatever memory they get (OFFSET_BYTES), each with its own storage."""
    import torch

    old = _addresses(work)
    devices = {x.device for x in work if isinstance(x, torch.Tensor)}
    work.clear()
    spacers = [torch.empty(SPACER_BYTES, dtype=torch.uint8, device=d) for d in devices]
    fresh = draw()
    del spacers
    if not (_addresses(fresh) & old):
        return fresh
    placed = [x.device if isinstance(x, torch.Tensor) else None for x in fresh]
    on_host = to_host(fresh)
    fresh.clear()
    return [_offset_copy(h, d) if isinstance(h, torch.Tensor) and d is not None else h
            for h, d in zip(on_host, placed, strict=True)]


def _match(expected: list[Any], got: list[Any], atol: float, rtol: float) -> bool:
    """Whether every output is within tolerance (torch.isclose, NaN equal to NaN), in slices of both in one
    element order (observe.paired_pieces: views, or copies of one slice, never of a whole output); the
    verdict stays on the device until the end: one host sync per output, not one per slice (with eight
    evaluations time-sliced on one GPU, each sync waited for the others' turns). Each slice ends a step
    (observe.checkpoint): a timed window waiting elsewhere goes first, as in the correctness compare
    (worker/compare.py); without it, a probe's candidate call and its whole compare were one step, the step
    the windows of an H100 quarter sweep most often waited for last (27 of 63, session 34)."""
    import torch

    if len(expected) != len(got):
        return False
    for e, g in zip(expected, got, strict=True):
        if not isinstance(e, torch.Tensor):
            if type(e) is not type(g) or e != g:
                return False
            continue
        if not isinstance(g, torch.Tensor) or g.shape != e.shape or g.dtype != e.dtype:
            return False
        if e.numel() == 0:
            continue
        where = e.device if e.device.type != "cpu" else g.device  # a host copy comes over slice by slice
        floating = e.is_floating_point() or e.is_complex()
        ok = torch.ones((), dtype=torch.bool, device=where)
        order = common_order(e, g)
        for _, e_part, g_part in paired_pieces(e.detach(), g.detach(), order, slice_elements(where)):
            es = e_part.to(where, non_blocking=True)
            gs = g_part.to(where, non_blocking=True)
            fused = check_kernels.compare_stats(es, gs, atol, rtol) if floating else None
            if fused is not None:  # on a GPU: one pass (the same tolerance and NaN rules as isclose here)
                ok &= fused[0][0] == 0
            elif floating:
                work = torch.float64 if e.dtype == torch.float64 else torch.float32
                ok &= torch.isclose(gs.to(work), es.to(work), rtol=rtol, atol=atol, equal_nan=True).all()
            else:
                ok &= (gs == es).all()
            del es, gs
            checkpoint()
        if not bool(ok):
            return False
    return True


def _finite_range(t: Any) -> tuple[float, float, int]:
    """(min, max, count) of t's finite values, in float64, in slices over its memory (the order does not
    matter here), accumulated on its device: one host sync at the end."""
    import torch

    flat = flat_view(t.detach())
    inf = float("inf")
    lo = torch.full((), inf, dtype=torch.float64, device=flat.device)
    hi = torch.full((), -inf, dtype=torch.float64, device=flat.device)
    count = torch.zeros((), dtype=torch.int64, device=flat.device)
    step = slice_elements(flat.device)
    for start in range(0, flat.numel(), step):
        part = flat[start:start + step]
        finite = torch.isfinite(part)
        # min and max of float values are exact in float64: the slice's own dtype until the last step
        lo = torch.minimum(lo, torch.where(finite, part, inf).min().to(torch.float64))
        hi = torch.maximum(hi, torch.where(finite, part, -inf).max().to(torch.float64))
        count += finite.sum()
    low, high, n = torch.stack([lo, hi, count.to(torch.float64)]).tolist()
    return low, high, int(n)


def _constant_values(got: list[Any]) -> list[float | None]:
    """Per output: its one repeated value when a float tensor of 2+ elements holds only that, else None
    (read where the output lives, before it moves to the host)."""
    import torch

    values: list[float | None] = []
    for g in got:
        if not isinstance(g, torch.Tensor) or g.numel() < 2 or not g.is_floating_point():
            values.append(None)
            continue
        gf = flat_view(g.detach())
        step = slice_elements(gf.device)
        same = torch.ones((), dtype=torch.bool, device=gf.device)  # on the device: one sync per output
        for i in range(0, gf.numel(), step):
            same &= (gf[i:i + step] == gf[0]).all()
        values.append(float(gf[0]) if bool(same) else None)
    return values


def reference_spreads(expected: list[Any]) -> list[float | None]:
    """Per output: the spread (max - min) of the reference's finite float values where there are two or
    more of them, else None (read where the output lives, before it moves to the host)."""
    import torch

    spreads: list[float | None] = []
    for e in expected:
        if not isinstance(e, torch.Tensor) or e.numel() < 2 or not e.is_floating_point():
            spreads.append(None)
            continue
        lo, hi, finite = _finite_range(e)  # in slices: no full-size float64 copy
        spreads.append(hi - lo if finite >= 2 else None)
    return spreads


def constant_finding(spreads: list[float | None], got_constant: list[float | None]) -> Finding | None:
    """`constant_output` when a float output is one repeated value (`got_constant`, _constant_values of the
    candidate's outputs) while the reference's varies (`spreads`, reference_spreads of its outputs)."""
    hits = []
    for k, (spread, value) in enumerate(zip(spreads, got_constant, strict=False)):
        # A spread that is only denormal noise could flush to zero in an honest kernel.
        if spread is None or spread <= 1e-30 or value is None:
            continue
        hits.append({"output": k, "value": value, "reference_spread": spread})
    if not hits:
        return None
    return finding("constant_output", "output(s) " + ", ".join(str(h["output"]) for h in hits)
                   + " hold one repeated value where the reference's values vary", {"outputs": hits})


def check_constant_output(expected: list[Any], got: list[Any],
                          got_constant: list[float | None] | None = None) -> Finding | None:
    """`constant_output` when a float output is one repeated value while the reference's varies.

    An honest kernel computing a varying function gives varying values; a zero or constant tensor
    passes only tasks whose outputs are below the tolerance (see `weak_task_check`). `got_constant`
    is _constant_values(got), when it was read before `got` moved elsewhere.
    """
    import torch

    if got_constant is None:
        got_constant = _constant_values(got)
    pairs = list(zip(expected, got, strict=False))
    spreads = reference_spreads([e if isinstance(g, torch.Tensor) and g.numel() >= 2 and g.is_floating_point() else None
                                 for e, g in pairs])
    return constant_finding(spreads, got_constant[:len(pairs)])


def check_cache_reuse(
    run_candidate: Callable[[list[Any]], Any],
    run_reference: Callable[[list[Any]], Any],
    make_inputs: Callable[[int], list[Any]],
    *,
    atol: float,
    rtol: float,
    seed: int = 20_000,
    sparse_fraction: float = 1 / 16,
    to_host: Callable[[list[Any]], list[Any]] | None = None,
    fresh_beside: bool = True,
    reference_mutates: bool = False,
    park_output: Callable[[list[Any], list[Any]], list[Any]] | None = None,
    host_input_room: Callable[[int], None] | None = None,
    verified: Sequence[VerifiedCall] = (),
    part: Callable[[str], Any] = untimed_part,
) -> list[Finding]:
    """Probe the candidate for results cached across calls; returns findings (empty when clean).

    `run_candidate(inputs)` / `run_reference(inputs)` call the model on a list of inputs and return its
    output (synchronising the device); `make_inputs(seed)` draws a fresh input list on the device.
    Call it only after correctness passed. Each probe runs the reference on its inputs, then the
    candidate on the same inputs, and compares; the probes, in order:

    1. baseline: draw A (seed) in fresh memory (no finding unless the candidate is wrong here, then none
       at all: the correctness trials are the judge of that).
    2. same_memory: draw B (seed+1) written into A's tensors through `.data` (same pointers, same shapes,
       version counters unchanged), so a cache keyed on data_ptr/id/storage/_version returns A's result.
    3. same_memory_sparse: about 1/16 of the floating-point elements, and always one, replaced by values
       of the same tensor at other positions, in the same memory: defeats caches that validate a few
       sampled elements (up to SPARSE_ROUNDS times, each round's mask disjoint from the others', while the
       candidate stays right).
    4. new_memory: a fresh draw C (seed+2) in new tensors: defeats caches keyed on shape.

    Memory (engine/worker/memory.py): one input set on the device, and one output: the reference's
    output waits while the candidate runs where `park_output(output, inputs)` puts it (the worker: on the
    device where a second output fits the memory rule, else on the host; default: `to_host`, else clones), and the outputs of
    the previous probe are kept as fingerprints only. A reference that changes its inputs in place
    (`reference_mutates`) gets them back from a host snapshot before the candidate runs; a candidate
    that changes them needs nothing: the next probe writes its values over them, and both sides see
    what it leaves. Where B must wait on the host beside those snapshots (a second input set there),
    `host_input_room(bytes)` is asked for the room first (the worker grows its host reservation). With `fresh_beside` (a second input set fits the memory rule) B and C are drawn
    beside A's tensors. Else B is A's own values reversed in place (runtime.flip_in_place, every value one
    the task drew; where an input is not floating point, B is drawn first and waits on the host), and C
    is drawn once A's tensors are gone, never at their addresses (_draw_elsewhere).

    A wrong probe whose output equals the previous call's output exactly, while the reference's outputs
    differ, is `result_cache` (fail). Any other wrong probe is `inconsistent_output` (fail for the
    valid draws 2 and 4; warn for the sparse mix 3, which may break a task's input invariants). A float
    output that is one repeated value where the reference varies is `constant_output` (fail).
    `verified` (the correctness trials that passed, VerifiedCall) spares a probe the reference's call, its
    output's trip off the device and the compare where they would only repeat a trial's: the probe's inputs
    have a trial's signature (the worker's probes draw at the trials' seeds: A, B and C are trials 0-2's
    values) and the candidate hands back, bit for bit and in the same layout, the output that trial found
    within tolerance, and no constant one. Anything else (a stale output, another
    layout, a constant, a nondeterministic candidate's other bits) runs the whole probe, the candidate
    called again after the reference, as if the first call had not been made.
    Exceptions raised by the callables propagate (the worker classifies them). `part(name)` times the probes'
    steps (the worker's sub-phases: draw, snapshot, mix, reference, fingerprint, spreads, park, candidate,
    compare).
    """
    import torch
    from cudaforge.engine.observe import fingerprints

    def draw(seed: int) -> list[Any]:  # make_inputs, timed as its own step
        with part("draw"):
            return make_inputs(seed)

    def off_device(values: list[Any]) -> list[Any]:
        return to_host(values) if to_host is not None else \
            [v.detach().clone() if isinstance(v, torch.Tensor) else v for v in values]

    def off_device_beside(out: list[Any], _inputs: list[Any]) -> list[Any]:
        return off_device(out)

    park = park_output or off_device_beside

    def write(dst: list[Any], src: list[Any]) -> None:
        # Through .data: same memory, version counters untouched (a cache keyed on _version sees no change).
        with torch.no_grad():
            for w, v in zip(dst, src, strict=True):
                if isinstance(w, torch.Tensor):
                    w.data.copy_(v)

    findings: list[Finding] = []
    previous: dict[str, Any] = {}  # the last probe's output fingerprints: "candidate", "reference"
    constants: list[Finding | None] = []

    def judged_by_a_trial(inputs: list[Any]) -> bool:
        """Whether the candidate's output for `inputs` is one a trial already judged right (`verified`): if so,
        `previous` and `constants` record the probe as the whole probe would have."""
        if not verified:
            return False
        with part("fingerprint"):
            drawn = signature(inputs, fingerprints(inputs))
        trial = next((v for v in verified if v.inputs == drawn), None)
        if trial is None:
            return False
        with part("candidate"):
            got = _flat(run_candidate(inputs))
        with part("fingerprint"):
            got_print = fingerprints(got)
            same = signature(got, got_print) == trial.candidate
        with part("spreads"):
            same = same and all(v is None for v in _constant_values(got))  # a constant one: the whole probe
        del got
        if same:
            previous.update(candidate=got_print, reference=list(trial.reference))
            constants.append(None)
        else:
            checkpoint()  # the whole probe follows: a step boundary before its reference, as before the first
        return same

    def probe(name: str, inputs: list[Any], severity_other: Severity) -> bool:
        """The reference on `inputs`, then the candidate on the same values; whether the candidate was right."""
        checkpoint()  # a step boundary: a timed window waiting elsewhere goes first
        if judged_by_a_trial(inputs):
            return True
        with part("snapshot"):
            values = off_device(inputs) if reference_mutates else None
        with part("reference"):
            ref_dev = _flat(run_reference(inputs))
        # The outputs' exact content without keeping a copy (a candidate may hand back the same buffer on
        # every call, so the tensor itself would change under us).
        with part("fingerprint"):
            ref_print = fingerprints(ref_dev)
        with part("spreads"):
            spreads = reference_spreads(ref_dev)
        with part("park"):
            expected = park(ref_dev, inputs)
        del ref_dev
        if values is not None:
            with part("snapshot"):
                write(inputs, values)
            del values
        # A step boundary before the candidate runs, as in a correctness trial (the reference's part and the
        # candidate's are a step each; none right after the candidate's call, whose sync could finish its
        # unwaited work before the compare reads it).
        checkpoint()
        with part("candidate"):
            got = _flat(run_candidate(inputs))
        with part("fingerprint"):
            got_print = fingerprints(got)
        with part("spreads"):
            constant = constant_finding(spreads, _constant_values(got))
        with part("compare"):
            ok = _match(expected, got, atol, rtol)  # the host copies come over in slices
        del got, expected
        stale = not ok and got_print == previous.get("candidate") and ref_print != previous.get("reference")
        previous.update(candidate=got_print, reference=ref_print)
        if name == "baseline":
            constants.append(constant if ok else None)
            return ok
        constants.append(constant)
        if not ok:
            evidence = {"probe": name, "seed": seed, "stale": stale}
            if stale:
                findings.append(finding("result_cache",
                                        f"with new input values ({name.replace('_', ' ')}) the candidate returned "
                                        "exactly its previous output: results are cached across calls", evidence))
            else:
                findings.append(finding("inconsistent_output",
                                        f"wrong result on a later call with new input values "
                                        f"({name.replace('_', ' ')}), though earlier calls were correct",
                                        evidence, severity=severity_other))
        return ok

    # B where a second set does not fit beside A: A's own values reversed in place (runtime.FlippingDraw's
    # flip, through .data so the version stays) where every input is floating point, else a draw that
    # waits on the host until it goes into A's memory.
    b: list[Any] | None = None
    work = draw(seed)
    flip = not fresh_beside and bool(_tensors(work)) and all(
        x.is_floating_point() and x.is_contiguous() and x.numel() > 1 for x in _tensors(work))
    if not fresh_beside and not flip:
        if reference_mutates and host_input_room is not None:
            # B waits on the host beside each probe's snapshot of the inputs: a second input set there.
            host_input_room(tensor_bytes(work))
        del work
        b = off_device(draw(seed + 1))
        work = draw(seed)
    if not probe("baseline", work, "fail"):
        return findings  # wrong to begin with: the correctness trials are the judge of that
    if fresh_beside:
        b = draw(seed + 1)  # beside A: a second input set fits
    same_shapes = flip or (b is not None and len(work) == len(b) and all(
        not isinstance(x, torch.Tensor) or (isinstance(y, torch.Tensor) and x.shape == y.shape and x.dtype == y.dtype)
        for x, y in zip(work, b, strict=True)))
    if same_shapes and _tensors(work):
        if flip:
            for t in _tensors(work):
                flip_in_place(t.data)  # .data: same memory, the version counter untouched
            t = None  # the loop's name would keep the last input alive
        else:
            write(work, b)
        del b
        ok = probe("same_memory", work, "fail")
        gens: dict[str, Any] = {}  # one per device: offsets drawn where the inputs live, never on the host
        # Up to SPARSE_ROUNDS sparse changes with disjoint masks (_mix_in_place): a cache validated by one
        # sampled element is caught for certain, one validated by k elements unless every round's band
        # holds one of them.
        for band in range(SPARSE_ROUNDS):
            if not ok:
                break
            changed = False
            with torch.no_grad(), part("mix"):
                for m in work:
                    if isinstance(m, torch.Tensor) and m.is_floating_point() and m.numel() > 1:
                        key = str(m.device)
                        if key not in gens:
                            # the offsets' stream: not the masks' seed, so no offset repeats a mask draw
                            gens[key] = torch.Generator(device=m.device).manual_seed(seed + 1)
                        _mix_in_place(m.data, seed, band, gens[key], sparse_fraction)  # .data: the version stays
                        changed = True
            m = None  # the loop's name would keep the last input alive
            if not changed:
                break
            ok = probe("same_memory_sparse", work, "warn")
    else:
        del b
    if fresh_beside:
        fresh = draw(seed + 2)  # allocated while the probed inputs live: other addresses
        del work
    else:
        fresh = _draw_elsewhere(work, lambda: draw(seed + 2), off_device)
    probe("new_memory", fresh, "fail")
    del fresh
    constant = next((c for c in constants if c is not None), None)  # the first probe's that saw one
    if constant is not None:
        findings.append(constant)
    # One finding per name: the first (most telling) probe's.
    seen: set[str] = set()
    unique = []
    for f in findings:
        if f.name not in seen:
            seen.add(f.name)
            unique.append(f)
    return unique
