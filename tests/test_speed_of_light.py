"""Speed-of-light arithmetic against hand-computed floors (an elementwise task: bytes; a matmul:
FlopCounterMode), with the H200's spec sheet, and the one byte floor `faster_than_memory_bound` shares."""

from __future__ import annotations

import pytest
import torch
from cudaforge.engine import speed_of_light as sol
from cudaforge.engine.gpu.specs import load_gpu_specs
from cudaforge.engine.integrity import evidence

H200 = next(s for s in load_gpu_specs() if s.key == "h200_sxm")
PEAKS = sol.peaks_from_spec(H200)


class Elementwise(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * 2.0


class Matmul(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


class Linear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(256, 128)  # 256*128 + 128 fp32 parameters

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def test_elementwise_floor_is_bytes_over_bandwidth() -> None:
    x = torch.randn(1024, 1024)
    work = sol.count_work(Elementwise(), [x])
    assert (work.input_bytes, work.param_bytes, work.output_bytes, work.flops) == (4 * 2**20, 0, 4 * 2**20, 0)
    result = sol.floor(work, PEAKS, "fp32", 1e-4, 1e-4, candidate_ms=0.01)
    by_hand_ms = 8 * 2**20 / 4800e9 * 1e3  # 8 MiB once at 4.8 TB/s = 1.7476 µs
    assert result.byte_floor_ms == pytest.approx(by_hand_ms) and result.floor_ms == pytest.approx(by_hand_ms)
    assert result.bound == "memory" and result.flop_floor_ms == 0.0
    assert result.sol_fraction == pytest.approx(by_hand_ms / 0.01)
    assert result.bandwidth_gbs == 4800 and result.gpu == "NVIDIA H200 SXM"


def test_matmul_floor_is_flops_over_the_admitted_peak() -> None:
    a, b = torch.randn(1024, 512), torch.randn(512, 2048)
    work = sol.count_work(Matmul(), [a, b])
    assert work.flops == 2 * 1024 * 512 * 2048  # FlopCounterMode: 2 M K N
    assert work.bytes == 4 * (1024 * 512 + 512 * 2048 + 1024 * 2048)
    strict = sol.floor(work, PEAKS, "fp32", 1e-4, 1e-4, candidate_ms=1.0)
    # fp32 at 1e-4 cannot hold TF32 products: the CUDA-core peak, 67 TFLOPS -> 32.05 µs
    assert strict.peak == "fp32" and strict.peak_tflops == 67.0
    assert strict.flop_floor_ms == pytest.approx(2 * 1024 * 512 * 2048 / 67e12 * 1e3)
    assert strict.byte_floor_ms == pytest.approx(work.bytes / 4800e9 * 1e3)
    assert strict.bound == "compute" and strict.floor_ms == strict.flop_floor_ms
    assert strict.sol_fraction == pytest.approx(strict.floor_ms / 1.0)
    loose = sol.floor(work, PEAKS, "fp32", 1e-2, 1e-2, candidate_ms=1.0)  # admits TF32: 494.5 TFLOPS
    assert loose.peak == "tf32_tensor" and loose.flop_floor_ms == pytest.approx(2 * 1024 * 512 * 2048 / 494.5e12 * 1e3)
    half = sol.floor(work, PEAKS, "fp16", 1e-2, 1e-2, candidate_ms=1.0)
    assert half.peak == "fp16_tensor" and half.peak_tflops == 989.5


def test_parameters_count_as_bytes_read_and_linear_flops() -> None:
    work = sol.count_work(Linear(), [torch.randn(64, 256)])
    assert work.param_bytes == 4 * (256 * 128 + 128)
    assert work.input_bytes == 4 * 64 * 256 and work.output_bytes == 4 * 64 * 128
    assert work.flops == 2 * 64 * 256 * 128


def test_no_gpu_spec_means_no_floor_and_says_why() -> None:
    work = sol.count_work(Elementwise(), [torch.randn(8, 8)])
    absent = sol.floor(work, None, "fp32", 1e-4, 1e-4, candidate_ms=0.01)
    assert absent.floor_ms is None and absent.sol_fraction is None and absent.note == sol.NO_GPU_NOTE
    assert absent.bytes == 2 * 8 * 8 * 4  # the counts are still recorded


def test_a_reference_that_cannot_run_on_meta_keeps_its_bytes() -> None:
    class ItemModel(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * float(x.sum().item())

    work = sol.count_work(ItemModel(), [torch.randn(16)], real_output_bytes=lambda: 64)
    assert work.flops is None and work.output_bytes == 64 and "meta device" in work.note
    result = sol.floor(work, PEAKS, "fp32", 1e-4, 1e-4, candidate_ms=1.0)
    assert result.flop_floor_ms is None and result.bound == "memory"


def test_faster_than_memory_bound_uses_the_same_byte_floor() -> None:
    work = sol.count_work(Elementwise(), [torch.randn(1024, 1024)])
    floor_ms = sol.floor(work, PEAKS, "fp32", 1e-4, 1e-4, candidate_ms=1.0).byte_floor_ms
    assert floor_ms is not None
    below = evidence.speed_of_light_finding(floor_ms * 0.9, work.bytes, 4800.0, 1.0)
    assert below is not None and below.evidence["floor_ms"] == pytest.approx(floor_ms)
    assert evidence.speed_of_light_finding(floor_ms * 1.1, work.bytes, 4800.0, 1.0) is None


def test_describe_shows_the_arithmetic_and_ncu_bytes_beside_it() -> None:
    work = sol.count_work(Matmul(), [torch.randn(64, 64), torch.randn(64, 64)])
    text = "\n".join(sol.describe(sol.floor(work, PEAKS, "fp32", 1e-4, 1e-4, 0.01), measured_dram_bytes=5e4))
    assert "FlopCounterMode" in text and "67 TFLOPS (fp32)" in text and "4800 GB/s" in text
    assert "ncu measured DRAM traffic: 0.050 MB" in text and "never lowers the floor" in text
