"""GPU specs: the shipped files, name/CC detection, and the unknown-card fallback."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from types import SimpleNamespace

import pytest
from cudaforge.engine.errors import ConfigError
from cudaforge.engine.gpu.specs import (
    NUMERIC_FIELDS,
    TENSOR_FIELDS,
    compare_with_properties,
    detect_gpu_spec,
    gpu_spec_for_device,
    gpu_spec_from_properties,
    load_gpu_specs,
    match_gpu_specs,
    query_nvidia_smi,
)

REQUIRED_CARDS = {
    "h200_sxm",
    "h100_sxm",
    "h100_pcie",
    "a100_40gb",
    "a100_80gb_sxm",
    "a100_80gb_pcie",
    "l40s",
    "rtx6000_ada",
    "quadro_rtx6000",
    "rtx4090",
    "rtx3090",
    "l4",
    "t4",
    "a10g",
}

# Device names as torch.cuda.get_device_name / nvidia-smi report them.
KNOWN_NAMES = [
    ("NVIDIA H200", (9, 0), "h200_sxm"),
    ("NVIDIA H100 80GB HBM3", (9, 0), "h100_sxm"),
    ("NVIDIA H100 PCIe", (9, 0), "h100_pcie"),
    ("NVIDIA A100-SXM4-40GB", (8, 0), "a100_40gb"),
    ("NVIDIA A100-PCIE-40GB", (8, 0), "a100_40gb"),
    ("NVIDIA A100-SXM4-80GB", (8, 0), "a100_80gb_sxm"),
    ("NVIDIA A100 80GB PCIe", (8, 0), "a100_80gb_pcie"),
    ("NVIDIA L40S", (8, 9), "l40s"),
    ("NVIDIA RTX 6000 Ada Generation", (8, 9), "rtx6000_ada"),
    ("Quadro RTX 6000", (7, 5), "quadro_rtx6000"),
    ("NVIDIA GeForce RTX 4090", (8, 9), "rtx4090"),
    ("NVIDIA GeForce RTX 3090", (8, 6), "rtx3090"),
    ("NVIDIA L4", (8, 9), "l4"),
    ("Tesla T4", (7, 5), "t4"),
    ("NVIDIA A10G", (8, 6), "a10g"),
]
# Different cards whose names contain a known one: they must not borrow its peaks.
OTHER_CARDS = [
    ("NVIDIA H200 NVL", (9, 0)),
    ("NVIDIA H100 NVL", (9, 0)),
    ("NVIDIA L40", (8, 9)),
    ("NVIDIA GeForce RTX 3090 Ti", (8, 6)),
    ("NVIDIA GeForce RTX 4090 D", (8, 9)),
    ("NVIDIA GeForce RTX 4090 Laptop GPU", (8, 9)),
    ("NVIDIA A10", (8, 6)),
]

H200_PROPS = {
    "name": "NVIDIA H200",
    "major": 9,
    "minor": 0,
    "multi_processor_count": 132,
    "total_memory": 150_109_880_320,
    "L2_cache_size": 62_914_560,
    "shared_memory_per_block_optin": 232_448,
}


def test_every_required_card_has_a_profile() -> None:
    keys = {p.key for p in load_gpu_specs()}
    assert keys >= REQUIRED_CARDS


def test_profiles_are_found_through_package_resources() -> None:
    folder = resources.files("cudaforge.profiles").joinpath("gpus")
    names = {e.name for e in folder.iterdir() if e.name.endswith(".toml")}
    assert {f"{k}.toml" for k in REQUIRED_CARDS} <= names


@pytest.mark.parametrize("key", sorted(REQUIRED_CARDS))
def test_profile_fields_are_complete_and_plausible(key: str) -> None:
    p = next(p for p in load_gpu_specs() if p.key == key)
    assert p.source and p.chip and p.match
    assert not p.missing_fields
    for f in NUMERIC_FIELDS:
        assert (getattr(p, f) is not None) or f in p.not_supported, f
    assert p.max_warps_per_sm * 32 == p.max_threads_per_sm
    assert p.shared_mem_per_block_optin_kb <= p.shared_mem_per_sm_kb
    # Dense tensor figures: FP16 is at least TF32, FP8 (where present) at least FP16.
    if p.tf32_tensor_tflops and p.fp16_tensor_tflops:
        assert p.fp16_tensor_tflops >= p.tf32_tensor_tflops
    if p.fp8_tensor_tflops and p.fp16_tensor_tflops:
        assert p.fp8_tensor_tflops >= p.fp16_tensor_tflops
    assert p.fp16_tensor_tflops > p.fp32_tflops  # tensor cores exist on every listed card
    text = resources.files("cudaforge.profiles").joinpath("gpus", f"{key}.toml").read_text()
    assert "halved" in text.lower(), "each file says which figures were halved (or that none were)"
    assert "source" in text.lower()


def test_h200_values_from_the_datasheet() -> None:
    p = detect_gpu_spec("NVIDIA H200", (9, 0))
    assert (p.sm_count, p.dram_gb, p.dram_bandwidth_gbs, p.fp32_tflops) == (132, 141, 4800, 67.0)
    assert p.fp16_tensor_tflops == pytest.approx(1979 / 2)  # datasheet: 1979 with sparsity
    assert p.fp8_tensor_tflops == pytest.approx(3958 / 2)
    assert p.ridge_point() == pytest.approx(67e12 / 4.8e12)


@pytest.mark.parametrize(("name", "cc", "key"), KNOWN_NAMES)
def test_detection_by_device_name(name: str, cc: tuple[int, int], key: str) -> None:
    hits = match_gpu_specs(name, cc, load_gpu_specs())
    assert [p.key for p in hits] == [key]
    assert detect_gpu_spec(name, cc).key == key


@pytest.mark.parametrize(("name", "cc"), OTHER_CARDS)
def test_similar_names_of_other_cards_do_not_match(name: str, cc: tuple[int, int]) -> None:
    assert match_gpu_specs(name, cc, load_gpu_specs()) == []
    assert detect_gpu_spec(name, cc).detected_from == "device_properties"


def test_compute_capability_must_agree() -> None:
    p = detect_gpu_spec("NVIDIA H200", (8, 0))
    assert p.detected_from == "device_properties"


def test_unknown_card_is_built_from_properties_and_names_its_gaps() -> None:
    props = {
        "name": "NVIDIA Future GPU",
        "major": 12,
        "minor": 0,
        "multi_processor_count": 170,
        "total_memory": 32 * 10**9,
        "L2_cache_size": 96 * 2**20,
        "clock_rate": 2_400_000,  # kHz
        "memory_clock_rate": 14_000_000,  # kHz
        "memory_bus_width": 512,
        "shared_memory_per_block_optin": 101_376,
        "shared_memory_per_multiprocessor": 102_400,
        "max_threads_per_multi_processor": 1536,
        "regs_per_multiprocessor": 65536,
        "warp_size": 32,
    }
    p = detect_gpu_spec("NVIDIA Future GPU", (12, 0), props)
    assert p.detected_from == "device_properties"
    assert p.sm_count == 170 and p.l2_mb == 96 and p.max_warps_per_sm == 48
    assert p.dram_bandwidth_gbs == pytest.approx(2 * 14e9 * 512 / 8 / 1e9)
    assert p.fp32_tflops == pytest.approx(170 * 128 * 2 * 2.4e9 / 1e12, rel=1e-3)
    assert set(TENSOR_FIELDS) <= set(p.missing_fields)  # never guessed
    assert "fp32_tflops" not in p.missing_fields
    assert "Unknown for this card" in p.summary()


def test_unknown_card_without_properties_lists_everything_missing() -> None:
    p = gpu_spec_from_properties("Mystery", (9, 0), None)
    assert "sm_count" in p.missing_fields and "dram_bandwidth_gbs" in p.missing_fields
    assert p.max_blocks_per_sm == 32  # from the CC table
    assert p.summary()  # renders with unknowns


def test_fewer_sms_than_the_profile_scales_compute_peaks() -> None:
    props = dict(H200_PROPS, multi_processor_count=66)
    p = detect_gpu_spec("NVIDIA H200", (9, 0), props)
    assert p.sm_count == 66 and p.fp32_tflops == pytest.approx(33.5)
    assert p.detected_from == "spec sheet+device_properties" and p.notes


def test_summary_is_short_and_has_the_peaks() -> None:
    text = detect_gpu_spec("NVIDIA A100-SXM4-40GB", (8, 0)).summary()
    assert 3 <= len(text.splitlines()) <= 8
    assert "1,555 GB/s" in text and "FP8 n/a" in text and "sm_80" in text


def test_compare_with_properties_flags_contradictions() -> None:
    p = detect_gpu_spec("NVIDIA H200", (9, 0))
    assert compare_with_properties(p, H200_PROPS).mismatches == ()
    bad = compare_with_properties(p, dict(H200_PROPS, total_memory=80 * 10**9))
    assert any("memory" in m for m in bad.mismatches)


def _write(folder: Path, name: str, text: str) -> None:
    (folder / name).write_text(text, encoding="utf-8")


def test_bad_profile_files_give_one_line_errors(tmp_path: Path) -> None:
    good = resources.files("cudaforge.profiles").joinpath("gpus", "t4.toml").read_text()
    _write(tmp_path, "x.toml", good + "\nbogus = 1\n")
    with pytest.raises(ConfigError, match=r"x\.toml: unknown key 'bogus'"):
        load_gpu_specs(tmp_path)
    _write(tmp_path, "x.toml", good.replace("sm_count = 40\n", ""))
    with pytest.raises(ConfigError, match="missing key 'sm_count'"):
        load_gpu_specs(tmp_path)
    _write(tmp_path, "x.toml", good.replace("sm_count = 40", "sm_count = -1"))
    with pytest.raises(ConfigError, match="'sm_count' must be a positive number"):
        load_gpu_specs(tmp_path)
    _write(tmp_path, "x.toml", good.replace("match = [", "match = ['(', "))
    with pytest.raises(ConfigError, match="bad 'match' pattern"):
        load_gpu_specs(tmp_path)


def _smi(stdout: str, rc: int = 0):  # noqa: ANN202 - a fake command runner
    calls: list[list[str]] = []

    def run(argv, timeout_s):  # noqa: ANN001, ANN202
        calls.append(list(argv))
        return SimpleNamespace(returncode=rc, stdout=stdout, stderr="")

    return run, calls


def test_profile_for_device_uses_nvidia_smi_without_torch() -> None:
    run, calls = _smi("NVIDIA H200, 9.0, 143771, 1980, 580.65.06\n")
    p = gpu_spec_for_device(0, run=run, which=lambda name: f"/usr/bin/{name}", use_torch=False)
    assert p is not None and p.key == "h200_sxm"
    assert calls[0][0] == "/usr/bin/nvidia-smi" and calls[0][-2:] == ["-i", "0"]


def test_profile_for_device_without_gpu_is_none() -> None:
    run, _ = _smi("", rc=9)
    assert gpu_spec_for_device(0, run=run, which=lambda name: None, use_torch=False) is None
    assert gpu_spec_for_device(0, run=run, which=lambda name: "/x/nvidia-smi", use_torch=False) is None


def test_nvidia_smi_index_follows_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    run, calls = _smi("NVIDIA L4, 8.9, 23034, 2040, 550.1, 20000\n")
    props = query_nvidia_smi(1, run=run, which=lambda name: "nvidia-smi")
    assert calls[0][-1] == "1"
    assert props == {
        "name": "NVIDIA L4",
        "driver_version": "550.1",
        "major": 8,
        "minor": 9,
        "total_memory": 23034 * 2**20,
        "clock_rate": 2_040_000,
        "free_memory": 20000 * 2**20,
    }
