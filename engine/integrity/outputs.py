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
from cudaforge.engine.results import Finding, Severity

SPARSE_ROUNDS = 3  # sparse same-memory probes of check_cache_reuse, each with its own random mask


def _tensors(values: Iterable[Any]) -> list[Any]:
    import torch

    return [v for v in values if isinstance(v, torch.Tensor)]


def _flat(out: Any) -> list[Any]:
    return list(out) if isinstance(out, (list, tuple)) else [out]


_SLICE = 1 << 23  # elements per slice of a whole-tensor check (no full-size temporaries)


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
    flat, src = m.view(-1), v.reshape(-1).to(m.device)
    for start in range(0, flat.numel(), _SLICE):
        n = min(_SLICE, flat.numel() - start)
        mask = torch.rand(n, generator=gen, device=m.device) < fraction
        flat[start:start + n] = torch.where(mask, src[start:start + n], flat[start:start + n])
    i = int(torch.randint(flat.numel(), (1,), generator=gen, device=m.device))
    flat[i] = src[i]


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
        g = g.to(e.device)
        ef, gf = e.detach().reshape(-1), g.detach().reshape(-1)
        for start in range(0, ef.numel(), _SLICE):
            es, gs = ef[start:start + _SLICE], gf[start:start + _SLICE]
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
    for start in range(0, flat.numel(), _SLICE):
        part = flat[start:start + _SLICE]
        finite = torch.isfinite(part)
        if not bool(finite.all()):
            part = part[finite]
        if part.numel():  # min and max of float values are exact in float64: no float64 copy needed
            low, high = torch.aminmax(part)
            lo, hi, count = min(lo, float(low)), max(hi, float(high)), count + part.numel()
    return lo, hi, count


def check_constant_output(expected: list[Any], got: list[Any]) -> Finding | None:
    """`constant_output` when a float output is one repeated value while the reference's varies.

    An honest kernel computing a varying function gives varying values; a zero or constant tensor
    passes only tasks whose outputs are below the tolerance (see `weak_task_check`).
    """
    import torch

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
        gf = g.detach().reshape(-1)
        if all(bool((gf[i:i + _SLICE] == gf[0]).all()) for i in range(0, gf.numel(), _SLICE)):
            hits.append({"output": k, "value": float(gf[0]), "reference_spread": spread})
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
) -> list[Finding]:
    """Probe the candidate for results cached across calls; returns findings (empty when clean).

    `run_candidate(inputs)` / `run_reference(inputs)` call the model on a list of inputs and return its
    output (synchronising the device); `make_inputs(seed)` draws a fresh input list on the device.
    Call it only after correctness passed. The probes, in order, on draws seed, seed+1, seed+2:

    1. A in fresh memory: the baseline (no finding unless the candidate is wrong here, then none at all).
    2. same_memory: draw B written into A's tensors through `.data` (same pointers, same shapes, version
       counters unchanged), so a cache keyed on data_ptr/id/storage/_version returns A's result.
    3. same_memory_sparse: A's values with ~1/16 of the floating-point elements replaced from another
       draw, in the same memory: defeats caches that validate a few sampled elements (up to
       SPARSE_ROUNDS times, each with a new mask, while the candidate stays right).
    4. new_memory: a fresh draw in new tensors: defeats caches keyed on shape.

    A wrong probe whose output equals the previous call's output exactly, while the reference's outputs
    differ, is `result_cache` (fail). Any other wrong probe is `inconsistent_output` (fail for the
    valid draws 2 and 4; warn for the sparse mix 3, which may break a task's input invariants). A float
    output that is one repeated value where the reference varies is `constant_output` (fail).
    Exceptions raised by the callables propagate (the worker classifies them).
    """
    import torch
    from cudaforge.engine.observe import fingerprint

    def clone(values: list[Any]) -> list[Any]:
        return [v.clone() if isinstance(v, torch.Tensor) else v for v in values]

    def prints(out: list[Any]) -> list[Any]:
        # The exact content of an output without keeping a copy of it (a candidate may hand back the same
        # buffer on every call, so the tensor itself would change under us).
        return [fingerprint(v) if isinstance(v, torch.Tensor) else v for v in out]

    # Memory (engine/worker/memory.py): at most two input sets and three outputs are alive at once; the
    # candidate's previous output is kept as a fingerprint, the reference runs on the draw itself.
    findings: list[Finding] = []
    a = make_inputs(seed)
    work = clone(a)
    first = _flat(run_candidate(work))
    ref_prev = _flat(run_reference(a))
    del a
    if not _match(ref_prev, first, atol, rtol):
        return findings  # wrong to begin with: the correctness trials are the judge of that
    constant = check_constant_output(ref_prev, first)
    out_prev = prints(first)
    del first
    last_constant: list[Finding | None] = [constant]

    def probe(name: str, values: list[Any], inputs: list[Any], severity_other: Severity) -> bool:
        nonlocal out_prev, ref_prev
        got = _flat(run_candidate(inputs))
        got_print = prints(got)
        ref = _flat(run_reference(values))
        ok = _match(ref, got, atol, rtol)
        last_constant[0] = check_constant_output(ref, got)
        del got
        evidence = {"probe": name, "seed": seed}
        if not ok:
            if got_print == out_prev and not _match(ref, ref_prev, atol, rtol):
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
        return ok

    b = make_inputs(seed + 1)
    same_shapes = len(work) == len(b) and all(
        not isinstance(x, torch.Tensor) or (isinstance(y, torch.Tensor) and x.shape == y.shape and x.dtype == y.dtype)
        for x, y in zip(work, b, strict=True))
    if same_shapes and _tensors(work):
        with torch.no_grad():
            for w, v in zip(work, b, strict=True):
                if isinstance(w, torch.Tensor):
                    w.data.copy_(v)  # through .data: same memory, version counter untouched
        ok = probe("same_memory", b, work, "fail")
        # The sparse mixes start from b as the reference left it: both sides then see the same values.
        mixed = b
        del b
        gens: dict[str, Any] = {}  # one per device: masks drawn where the inputs live, never on the host
        # Up to SPARSE_ROUNDS sparse changes with independent masks: a cache validated by k sampled
        # elements survives one with probability (1 - sparse_fraction)^k, all of them with its cube.
        for round_ in range(SPARSE_ROUNDS):
            if not ok:
                break
            d = make_inputs(seed + 2 + round_)
            changed = False
            for m, v in zip(mixed, d, strict=True):
                if isinstance(m, torch.Tensor) and m.is_floating_point() and m.numel() > 0:
                    key = str(m.device)
                    if key not in gens:
                        gens[key] = torch.Generator(device=m.device).manual_seed(seed)
                    _mix_in_place(m, v, gens[key], sparse_fraction)
                    changed = True
            del d
            if not changed:
                break
            with torch.no_grad():
                for w, v in zip(work, mixed, strict=True):
                    if isinstance(w, torch.Tensor):
                        w.data.copy_(v)
            ok = probe("same_memory_sparse", mixed, work, "warn")
        del mixed
    else:
        del b
    # The new-memory probe's inputs are allocated while the last probe's are still alive, so they cannot
    # land at the same addresses (a cache keyed on pointers would otherwise see "the same memory").
    fresh = make_inputs(seed + 2)
    fresh_work = clone(fresh)
    del work
    w = v = m = None  # the loops' names would keep the last input sets alive
    probe("new_memory", fresh, fresh_work, "fail")
    del fresh, fresh_work
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
