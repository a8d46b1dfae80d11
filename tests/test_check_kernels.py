"""The fused check kernels (engine/check_kernels.py) against the PyTorch forms they replace: the same
fingerprints, comparison statistics and fixed-value bounds, bit for bit, and never counted as a
candidate's kernels. On the CPU the PyTorch forms run (the kernels need a GPU)."""

from __future__ import annotations

import math

import pytest
import torch
from cudaforge.engine import check_kernels, observe
from cudaforge.engine.integrity.runtime import FixedValueProbe
from cudaforge.engine.worker import compare


def test_on_the_host_the_pytorch_forms_run() -> None:
    x = torch.randn(1000)
    assert check_kernels.compare_stats(x, x.clone(), 1e-4, 1e-4) is None
    assert check_kernels.fixed_bounds(x, 1e-4, 1e-4) is None
    assert check_kernels.word_sums(x.view(torch.int32), observe._KEY) is None
    assert observe.word_sums(x.view(torch.int32)) == observe.word_sums_in_slices(x.view(torch.int32))


def _torch_bounds(flat: torch.Tensor, atol: float, rtol: float) -> list[float]:
    e = flat.double()
    tol = e.abs().mul_(rtol).add_(atol)
    return [(e - tol).max().item(), (e + tol).min().item(), float(torch.isfinite(e).all())]


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def _with_specials(t: torch.Tensor, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    flat = t.view(-1)
    n = flat.numel()
    for value in (float("nan"), float("inf"), float("-inf")):
        idx = torch.randint(0, n, (3,), generator=gen)
        flat[idx.to(flat.device)] = value
    return t


gpu = pytest.mark.gpu


@gpu
@pytest.mark.parametrize("n", [1, 1000, 5_000_003])
def test_word_sums_match_the_pytorch_form(n: int) -> None:
    raw = torch.randint(-2**31, 2**31 - 1, (n,), dtype=torch.int32, device="cuda")
    assert check_kernels.word_sums(raw, observe._KEY) == observe.word_sums_in_slices(raw)
    assert observe.word_sums(raw) == observe.word_sums_in_slices(raw)
    flipped = raw.clone()
    flipped[n // 2] ^= 1
    assert observe.word_sums(flipped) != observe.word_sums(raw)


@gpu
def test_fingerprints_read_together_match_one_at_a_time() -> None:
    """observe.fingerprints queues every GPU tensor's sums and syncs once: the same fingerprints as one call
    each, for dense tensors, a strided view (a copy of its words), odd byte sizes and an empty tensor."""
    values: list[object] = [torch.randn(1000, device="cuda"), torch.randn(64, 64, device="cuda").t(),
                            torch.arange(7, dtype=torch.uint8, device="cuda"), torch.empty(0, device="cuda"),
                            3, torch.randn(5), torch.randint(0, 9, (5_000_003,), dtype=torch.int32, device="cuda")]
    together = observe.fingerprints(values)
    assert together == [observe.fingerprint(v) if isinstance(v, torch.Tensor) else v for v in values]
    assert together[0][:2] == observe.word_sums_in_slices(values[0].view(torch.int32))  # type: ignore[union-attr]
    changed = [v.clone() if isinstance(v, torch.Tensor) else v for v in values]
    changed[6][123] += 1  # type: ignore[index]
    assert [a != b for a, b in zip(observe.fingerprints(changed), together, strict=True)] == \
        [False] * 6 + [True]


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("specials", [False, True])
def test_comparison_statistics_match_the_pytorch_form(dtype: torch.dtype, specials: bool) -> None:
    n = 3_000_017
    gen = torch.Generator(device="cuda").manual_seed(7)
    e = torch.randn(n, device="cuda", generator=gen).to(dtype)
    g = (e.float() + 1e-3 * torch.randn(n, device="cuda", generator=gen)).to(dtype)
    g[12345] += 5.0  # a clear worst element
    if specials:
        _with_specials(e, 1)
        _with_specials(g, 2)
        g[99] = e[99] = float("nan")  # the same NaN on both sides passes
    atol, rtol = 1e-2, 1e-2
    fused = check_kernels.compare_stats(e, g, atol, rtol)
    assert fused is not None
    stats, vals, idxs = fused
    pieces = observe.paired_pieces(e, g, (0,), observe.slice_elements(e.device))
    ref_stats, ref_vals, ref_idxs = compare._compare_in_slices(pieces, e.device, torch.float32, False, atol, rtol, 5,
                                                                fuse=False)
    got, want = stats.tolist(), ref_stats.tolist()
    assert all(_same(a, b) for a, b in zip(got, want, strict=True)), (got, want)
    top = sorted(vals.tolist(), reverse=True)[:5]
    assert top == sorted(ref_vals.tolist(), reverse=True)[:5]
    if not specials:  # one worst element (with infinities several tie, in any order)
        assert int(idxs[vals.argmax()]) == int(ref_idxs[ref_vals.argmax()]) == 12345
    check = compare.compare_output(0, e, g, atol, rtol)  # the result a user sees
    assert check.mismatches == int(want[0])
    assert specials or check.worst[0].index == (12345,)


@gpu
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_a_host_parked_output_compares_by_fused_slices_as_on_the_device(layout: str) -> None:
    """compare_output with the expected output waiting on the host (page-locked, as memory.host_copy leaves
    a large one) and the candidate's on the GPU: slices come over and go through the fused kernel, with the
    same verdict, statistics and worst elements as both on the device and as the PyTorch form."""
    from cudaforge.engine.worker import memory

    gen = torch.Generator(device="cuda").manual_seed(11)
    e = torch.randn(64, 1024, 300, device="cuda", generator=gen)  # about 5 slices of 4M elements
    if layout == "transposed":
        e = e.transpose(1, 2)  # dense, not contiguous: compared in memory order, as views
    g = e + 1e-5 * torch.randn(e.shape, device="cuda", generator=gen)
    g[3, 17, 200] += 2.0
    g[60, 250, 250] = float("nan")
    (host,) = memory.host_copy([e])
    assert host.stride() == e.stride()
    on_device = compare.compare_output(0, e, g, 1e-4, 1e-4)
    from_host = compare.compare_output(0, host, g, 1e-4, 1e-4)
    for check in (on_device, from_host):
        assert not check.passed and check.mismatches == 2 and check.nonfinite_got == 1
    # The NaN (an infinite error) first, then the clear outlier: the same worst elements either way.
    assert [w.index for w in from_host.worst[:2]] == [w.index for w in on_device.worst[:2]] \
        == [(60, 250, 250), (3, 17, 200)]
    assert [w.abs_err for w in from_host.worst] == [w.abs_err for w in on_device.worst]
    assert from_host.max_abs_err == on_device.max_abs_err == float("inf")
    pieces = observe.paired_pieces(e, g, observe.common_order(e, g), observe.slice_elements(e.device))
    stats, _, _ = compare._compare_in_slices(pieces, e.device, torch.float32, False, 1e-4, 1e-4, 5, fuse=False)
    assert int(stats[0]) == from_host.mismatches


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_fixed_value_bounds_match_the_pytorch_form(dtype: torch.dtype) -> None:
    flat = torch.randn(2_000_003, device="cuda").to(dtype) * 3 + 0.5
    got = check_kernels.fixed_bounds(flat, 1e-4, 1e-4)
    assert got is not None
    assert got.tolist() == _torch_bounds(flat, 1e-4, 1e-4)
    flat[17] = float("nan")
    assert check_kernels.fixed_bounds(flat, 1e-4, 1e-4).tolist()[2] == 0.0
    probe = FixedValueProbe(1e-4, 1e-4)
    probe.add([flat])
    assert not probe.possible  # a non-finite output: no constant passes


@gpu
def test_the_check_kernels_are_never_the_candidates() -> None:
    from cudaforge.engine import nvrtc
    from cudaforge.engine.integrity.runtime import cuda_kernel_totals
    from torch.profiler import ProfilerActivity, profile

    nvrtc.LAUNCH_COUNTS.clear()
    x = torch.randn(1 << 20, device="cuda")
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        observe.fingerprint(x)
        compare.compare_output(0, x, x.clone(), 1e-4, 1e-4)
        FixedValueProbe(1e-4, 1e-4).add([x])
        torch.cuda.synchronize()
    assert nvrtc.LAUNCH_COUNTS == {}
    assert not any(name.startswith("cudaforge_check") for name in cuda_kernel_totals(prof))
    assert check_kernels.UNAVAILABLE == {}
