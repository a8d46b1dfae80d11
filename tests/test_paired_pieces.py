"""observe.paired_pieces: two tensors of one shape walked in one element order, in pieces of at most a
slice, every element once, views where a side is laid out in that order and piece-sized copies elsewhere
(never a copy of a whole output); and compare_output on top of it, whatever the two layouts."""

from __future__ import annotations

import pytest
import torch
from cudaforge.engine import observe
from cudaforge.engine.worker import memory
from cudaforge.engine.worker.compare import compare_output


def _layouts() -> dict[str, torch.Tensor]:
    base = torch.arange(4 * 6 * 10, dtype=torch.float32).reshape(4, 6, 10)
    return {
        "contiguous": base.clone(),
        "transposed": base.transpose(0, 2).contiguous().transpose(0, 2),  # same values, other memory order
        "strided": torch.arange(2 * 4 * 6 * 10, dtype=torch.float32).reshape(4, 6, 20)[:, :, ::2] * 0 + base,
    }


@pytest.mark.parametrize("step", [1, 7, 10, 60, 1000])
@pytest.mark.parametrize("e_name", ["contiguous", "transposed", "strided"])
@pytest.mark.parametrize("g_name", ["contiguous", "transposed", "strided"])
def test_every_element_once_in_one_order(e_name: str, g_name: str, step: int) -> None:
    layouts = _layouts()
    e, g = layouts[e_name], layouts[g_name] + 0.5
    order = observe.common_order(e, g)
    seen = torch.zeros(e.numel(), dtype=torch.int64)
    expected_flat = e.permute(order).reshape(-1)
    got_flat = g.permute(order).reshape(-1)
    for offset, ep, gp in observe.paired_pieces(e, g, order, step):
        assert ep.dim() == gp.dim() == 1 and ep.numel() == gp.numel() <= max(step, 1)
        assert torch.equal(ep, expected_flat[offset:offset + ep.numel()])
        assert torch.equal(gp, got_flat[offset:offset + gp.numel()])
        seen[offset:offset + ep.numel()] += 1
    assert bool((seen == 1).all())


def test_a_side_laid_out_in_the_order_gives_views_and_the_other_piece_copies() -> None:
    e = torch.randn(8, 16, 32).transpose(1, 2)  # dense, not contiguous
    g = e.contiguous()
    order = observe.common_order(e, g)
    assert order == observe.memory_order(e)
    for _, ep, gp in observe.paired_pieces(e, g, order, 64):
        assert ep.untyped_storage().data_ptr() == e.untyped_storage().data_ptr()  # a view of the expected side
        assert gp.untyped_storage().data_ptr() != g.untyped_storage().data_ptr()  # a copy of one piece
        assert gp.numel() <= 64
    assert observe.paired_pieces(torch.ones(()), torch.ones(()), (), 4).__next__()[1].numel() == 1  # 0-d


def test_compare_output_names_the_worst_elements_whatever_the_layouts() -> None:
    e = torch.randn(5, 7, 9).transpose(0, 2)  # shape (9, 7, 5), transposed in memory
    g = e.contiguous()
    g[8, 6, 4] += 3.0
    g[1, 2, 3] -= 1.0
    check = compare_output(0, e, g, 1e-5, 1e-5)
    assert not check.passed and check.mismatches == 2
    assert [w.index for w in check.worst] == [(8, 6, 4), (1, 2, 3)]
    assert check.worst[0].expected == float(e[8, 6, 4]) and check.worst[0].got == float(g[8, 6, 4])
    assert compare_output(0, e, e.contiguous(), 1e-5, 1e-5).passed


def test_a_transposed_expected_beside_a_contiguous_output_costs_no_output_sized_copy() -> None:
    """The CPU accounting around a compare of a 64 MiB transposed expected output with a contiguous one (an
    attention reference beside a custom kernel's output): only slice-sized temporaries (memory.SLICE_TEMP_BYTES)."""
    counter = memory.CpuAccounting()
    counter.start()
    try:
        e = torch.randn(64, 512, 512).transpose(1, 2)  # made under the accounting, as a worker's outputs are
        g = e.contiguous()
        held = counter.current
        assert held >= 2 * e.numel() * e.element_size()
        assert compare_output(0, e, g, 1e-5, 1e-5).passed
    finally:
        counter.stop()
    assert counter.top - held <= memory.SLICE_TEMP_BYTES, (counter.top - held) / (1 << 20)
