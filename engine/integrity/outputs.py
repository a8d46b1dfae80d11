"""Runtime integrity checks on outputs, run in the worker after correctness passed.

`check_cache_reuse` calls the candidate with new values written into the *same* input memory (and in new
memory) and compares with the reference, which exposes caches keyed on pointers, version counters,
sampled elements or shapes; `check_constant_output` finds outputs that are constant where the
reference's are not. torch is imported lazily.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from cudaforge.engine.integrity.registry import finding
from cudaforge.engine.observe import slice_elements
from cudaforge.engine.results import Finding, Severity

SPARSE_ROUNDS = 3  # sparse same-memory probes of check_cache_reuse, each with its own random mask


def _tensors(values: Iterable[Any]) -> list[Any]:
    import torch

    return [v for v in values if isinstance(v, torch.Tensor)]


def _flat(out: Any) -> list[Any]:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _mix_in_place(m: Any, v: Any, gen: Any, fraction: float) -> None:
    """Replace about `fraction` of m's elements by v's, in slices, and always at least one drawn element.
    The masks come from `gen`, a generator on m's device: drawn on the host, an 8 GiB input's masks took
    seconds per probe on the GPU machine."""
    import torch

    if not m.is_contiguous():
        mask = torch.rand(m.shape, generator=gen, device=m.device) < fraction
        mask.view(-1)[int(torch.randint(m.numel(), (1,), generator=gen, device=m.device))] = True
        m.copy_(torch.where(mask, v.to(m.device), m))
        return
    flat, src = m.view(-1), v.reshape(-1)  # `v` may wait on the host: it comes over slice by slice
    step = slice_elements(m.device)
    for start in range(0, flat.numel(), step):
        n = min(step, flat.numel() - start)
        mask = torch.rand(n, generator=gen, device=m.device) < fraction
        part = src[start:start + n].to(m.device, non_blocking=True)
        flat[start:start + n] = torch.where(mask, part, flat[start:start + n])
        del part
    i = int(torch.randint(flat.numel(), (1,), generator=gen, device=m.device))
    flat[i] = src[i].to(m.device)


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


def _match(expected: list[Any], got: list[Any], atol: float, rtol: float) -> bool:
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
        where = e.device if e.device.type != "cpu" else g.device  # a host copy comes over slice by slice
        ef, gf = e.detach().reshape(-1), g.detach().reshape(-1)
        step = slice_elements(where)
        for start in range(0, ef.numel(), step):
            es = ef[start:start + step].to(where, non_blocking=True)
            gs = gf[start:start + step].to(where, non_blocking=True)
            if e.is_floating_point() or e.is_complex():
                work = torch.float64 if e.dtype == torch.float64 else torch.float32
                if not bool(torch.isclose(gs.to(work), es.to(work), rtol=rtol, atol=atol, equal_nan=True).all()):
                    return False
            elif not torch.equal(gs, es):
                return False
    return True


def _finite_range(t: Any) -> tuple[float, float, int]:
    """(min, max, count) of t's finite values, in float64, in slices."""
    import torch

    flat = t.detach().reshape(-1)
    lo, hi, count = float("inf"), float("-inf"), 0
    step = slice_elements(flat.device)
    for start in range(0, flat.numel(), step):
        part = flat[start:start + step]
        finite = torch.isfinite(part)
        if not bool(finite.all()):
            part = part[finite]
        if part.numel():  # min and max of float values are exact in float64: no float64 copy needed
            low, high = torch.aminmax(part)
            lo, hi, count = min(lo, float(low)), max(hi, float(high)), count + part.numel()
    return lo, hi, count


def _constant_values(got: list[Any]) -> list[float | None]:
    """Per output: its one repeated value when a float tensor of 2+ elements holds only that, else None
    (read where the output lives, before it moves to the host)."""
    import torch

    values: list[float | None] = []
    for g in got:
        if not isinstance(g, torch.Tensor) or g.numel() < 2 or not g.is_floating_point():
            values.append(None)
            continue
        gf = g.detach().reshape(-1)
        step = slice_elements(gf.device)
        same = all(bool((gf[i:i + step] == gf[0]).all()) for i in range(0, gf.numel(), step))
        values.append(float(gf[0]) if same else None)
    return values


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
    hits = []
    for k, (e, g) in enumerate(zip(expected, got, strict=False)):
        if not (isinstance(e, torch.Tensor) and isinstance(g, torch.Tensor)) or e.numel() < 2 or g.numel() < 2:
            continue
        if not (e.is_floating_point() and g.is_floating_point()):
            continue
        lo, hi, finite = _finite_range(e)  # in slices: no full-size float64 copy
        if finite < 2:
            continue
        spread = hi - lo
        # A spread that is only denormal noise could flush to zero in an honest kernel.
        if spread <= 1e-30:
            continue
        value = got_constant[k] if k < len(got_constant) else None
        if value is not None:
            hits.append({"output": k, "value": value, "reference_spread": spread})
    if not hits:
        return None
    return finding("constant_output", "output(s) " + ", ".join(str(h["output"]) for h in hits)
                   + " hold one repeated value where the reference's values vary", {"outputs": hits})


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
) -> list[Finding]:
    """Probe the candidate for results cached across calls; returns findings (empty when clean).

    `run_candidate(inputs)` / `run_reference(inputs)` call the model on a list of inputs and return its
    output (synchronising the device); `make_inputs(seed)` draws a fresh input list on the device.
    Call it only after correctness passed. The probes, in order, on draws seed, seed+1, seed+2:

    1. A in fresh memory: the baseline (no finding unless the candidate is wrong here, then none at all).
    2. same_memory: draw B written into A's tensors through `.data` (same pointers, same shapes, version
       counters unchanged), so a cache keyed on data_ptr/id/storage/_version returns A's result.
       After each candidate call its inputs get the probe's values back the same way, and the reference
       runs on them (`to_host(values)` makes the host snapshots; default: clones).
    3. same_memory_sparse: B's values (as the reference left them) with ~1/16 of the floating-point
       elements replaced from draw A, in the same memory: defeats caches that validate a few sampled
       elements (up to SPARSE_ROUNDS times, each with a new mask, while the candidate stays right).
    4. new_memory: a fresh draw in new tensors: defeats caches keyed on shape.

    One input set on the device at a time: B is drawn first and waits on the host (`to_host`) while A
    is drawn and probed; A's host snapshot is the sparse rounds' donor. Draw C (seed+2) must not land at
    A's addresses (a cache that recomputes on the same pointers and serves its entry on new ones would
    pass): with `fresh_beside` (a second input set fits the memory rule) it is drawn while A's tensors
    live; else it is drawn once A's are gone, goes to the host, and comes back into new tensors placed
    past the start of whatever memory they get (OFFSET_BYTES), each with its own storage.

    A wrong probe whose output equals the previous call's output exactly, while the reference's outputs
    differ, is `result_cache` (fail). Any other wrong probe is `inconsistent_output` (fail for the
    valid draws 2 and 4; warn for the sparse mix 3, which may break a task's input invariants). A float
    output that is one repeated value where the reference varies is `constant_output` (fail).
    Exceptions raised by the callables propagate (the worker classifies them).
    """
    import torch
    from cudaforge.engine.observe import checkpoint, fingerprint

    def snapshot(values: list[Any]) -> list[Any]:
        return to_host(values) if to_host is not None else \
            [v.detach().clone() if isinstance(v, torch.Tensor) else v for v in values]

    def write(dst: list[Any], src: list[Any]) -> None:
        # Through .data: same memory, version counters untouched (a cache keyed on _version sees no change).
        with torch.no_grad():
            for w, v in zip(dst, src, strict=True):
                if isinstance(w, torch.Tensor):
                    w.data.copy_(v)

    def prints(out: list[Any]) -> list[Any]:
        # The exact content of an output without keeping a copy of it (a candidate may hand back the same
        # buffer on every call, so the tensor itself would change under us).
        return [fingerprint(v) if isinstance(v, torch.Tensor) else v for v in out]

    # Memory (engine/worker/memory.py): one input set on the device (two for a moment while the next draw
    # is written into it), one output at a time: the candidate's output waits on the host (`to_host`)
    # while the reference runs on the same inputs, written back from their host snapshot; the
    # reference's previous output waits there too. The candidate's previous output is a fingerprint.
    findings: list[Finding] = []
    b = make_inputs(seed + 1)
    b_host = snapshot(b)  # waits on the host until it is written into A's memory
    del b
    work = make_inputs(seed)
    saved = snapshot(work)
    first = _flat(run_candidate(work))
    constant_got = _constant_values(first)
    first_host = snapshot(first)
    out_prev = prints(first)
    del first
    write(work, saved)
    ref_dev = _flat(run_reference(work))  # compared on the device; the host copies come over in slices
    if not _match(ref_dev, first_host, atol, rtol):
        return findings  # wrong to begin with: the correctness trials are the judge of that
    constant = check_constant_output(ref_dev, first_host, constant_got)
    ref_prev = snapshot(ref_dev)
    del first_host, ref_dev
    last_constant: list[Finding | None] = [constant]

    def probe(name: str, inputs: list[Any], severity_other: Severity) -> tuple[bool, list[Any]]:
        """The candidate on `inputs`, then the reference on the same values written back; returns whether
        the candidate was right and the inputs as the reference left them."""
        nonlocal out_prev, ref_prev
        checkpoint()  # a step boundary: a timed window waiting elsewhere goes first
        values = snapshot(inputs)
        got = _flat(run_candidate(inputs))
        got_print = prints(got)
        got_constant = _constant_values(got)
        got_host = snapshot(got)
        del got
        write(inputs, values)
        del values
        ref_dev = _flat(run_reference(inputs))
        ok = _match(ref_dev, got_host, atol, rtol)
        last_constant[0] = check_constant_output(ref_dev, got_host, got_constant)
        del got_host
        evidence = {"probe": name, "seed": seed}
        stale = not ok and got_print == out_prev and not _match(ref_dev, ref_prev, atol, rtol)
        ref_prev = None  # one reference output on the host at a time
        ref = snapshot(ref_dev)
        del ref_dev
        if not ok:
            if stale:
                findings.append(finding("result_cache",
                                        f"with new input values ({name.replace('_', ' ')}) the candidate returned "
                                        "exactly its previous output: results are cached across calls",
                                        {**evidence, "stale": True}))
            else:
                findings.append(finding("inconsistent_output",
                                        f"wrong result on a later call with new input values "
                                        f"({name.replace('_', ' ')}), though earlier calls were correct",
                                        {**evidence, "stale": False}, severity=severity_other))
        out_prev, ref_prev = got_print, ref
        return ok, inputs

    same_shapes = len(work) == len(b_host) and all(
        not isinstance(x, torch.Tensor) or (isinstance(y, torch.Tensor) and x.shape == y.shape and x.dtype == y.dtype)
        for x, y in zip(work, b_host, strict=True))
    if same_shapes and _tensors(work):
        write(work, b_host)
        del b_host
        ok, work = probe("same_memory", work, "fail")
        # The sparse mixes start from b as the reference left it (in `work` now): both sides see the same values.
        gens: dict[str, Any] = {}  # one per device: masks drawn where the inputs live, never on the host
        # Up to SPARSE_ROUNDS sparse changes with independent masks: a cache validated by k sampled
        # elements survives one with probability (1 - sparse_fraction)^k, all of them with its cube.
        for _ in range(SPARSE_ROUNDS):
            if not ok:
                break
            changed = False
            with torch.no_grad():
                for m, v in zip(work, saved, strict=True):
                    if isinstance(m, torch.Tensor) and m.is_floating_point() and m.numel() > 0:
                        key = str(m.device)
                        if key not in gens:
                            gens[key] = torch.Generator(device=m.device).manual_seed(seed)
                        _mix_in_place(m.data, v, gens[key], sparse_fraction)  # .data: the version stays
                        changed = True
            m = v = None  # the loop's names would keep the last input alive
            if not changed:
                break
            ok, work = probe("same_memory_sparse", work, "warn")
    else:
        del b_host
    del saved
    if fresh_beside:
        fresh = make_inputs(seed + 2)  # allocated while the probed inputs live: other addresses
        del work
    else:
        del work
        c = make_inputs(seed + 2)  # likely at the freed addresses: it goes to the host and comes back offset
        devices = [x.device if isinstance(x, torch.Tensor) else None for x in c]
        c_host = snapshot(c)
        del c
        fresh = [_offset_copy(h, d) if isinstance(h, torch.Tensor) and d is not None else h
                 for h, d in zip(c_host, devices, strict=True)]
        del c_host
    probe("new_memory", fresh, "fail")
    del fresh
    if constant is None:
        constant = last_constant[0]
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
