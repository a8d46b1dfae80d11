"""GPU specs: the peak numbers a roofline needs, per card, from the vendors' public specifications.

Specs live in `profiles/gpus/*.toml` (shipped as package data of `cudaforge.profiles`) so the
analyzer and the LLM prompts can compare measured counters with what the card can do. A card with no
spec still gets one, built from its CUDA device properties; the fields that cannot be derived
that way are named in `missing_fields` so nobody mistakes an unknown peak for zero.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from cudaforge.engine.errors import ConfigError

# Fields every spec file must define (or list in `not_supported`).
NUMERIC_FIELDS: tuple[str, ...] = (
    "sm_count",
    "boost_clock_mhz",
    "dram_gb",
    "dram_bandwidth_gbs",
    "l2_mb",
    "shared_mem_per_sm_kb",
    "shared_mem_per_block_optin_kb",
    "registers_per_sm",
    "max_registers_per_thread",
    "max_threads_per_sm",
    "max_warps_per_sm",
    "max_blocks_per_sm",
    "fp32_tflops",
    "tf32_tensor_tflops",
    "fp16_tensor_tflops",
    "bf16_tensor_tflops",
    "fp8_tensor_tflops",
    "int8_tensor_tops",
)
TENSOR_FIELDS: tuple[str, ...] = (
    "tf32_tensor_tflops",
    "fp16_tensor_tflops",
    "bf16_tensor_tflops",
    "fp8_tensor_tflops",
    "int8_tensor_tops",
)
_INT_FIELDS = {
    "sm_count",
    "registers_per_sm",
    "max_registers_per_thread",
    "max_threads_per_sm",
    "max_warps_per_sm",
    "max_blocks_per_sm",
}
_KNOWN_KEYS = set(NUMERIC_FIELDS) | {
    "name",
    "chip",
    "match",
    "compute_capability",
    "not_supported",
    "source",
    "notes",
}

# CUDA C++ Programming Guide, "Technical Specifications per Compute Capability": resident blocks
# per SM, and FP32 lanes per SM (for deriving a peak FP32 rate of a card we have no spec for).
_MAX_BLOCKS_PER_SM: dict[tuple[int, int], int] = {
    (7, 0): 32,
    (7, 2): 32,
    (7, 5): 16,
    (8, 0): 32,
    (8, 6): 16,
    (8, 7): 16,
    (8, 9): 24,
    (9, 0): 32,
    (10, 0): 32,
    (10, 3): 32,
    (12, 0): 32,
    (12, 1): 32,
}
_FP32_LANES_PER_SM: dict[tuple[int, int], int] = {
    (7, 0): 64,
    (7, 2): 64,
    (7, 5): 64,
    (8, 0): 64,
    (8, 6): 128,
    (8, 7): 128,
    (8, 9): 128,
    (9, 0): 128,
    (10, 0): 128,
    (10, 3): 128,
    (12, 0): 128,
    (12, 1): 128,
}


@dataclass(frozen=True)
class GpuSpec:
    """Specifications of one card. `None` means unknown (see `missing_fields`) or not supported.

    Tensor figures are dense (no structured sparsity). Sizes: GB = 1e9 bytes for DRAM, MB = MiB for
    L2 and KB = KiB for shared memory, as the vendors and the CUDA device properties use them.
    """

    key: str
    name: str
    compute_capability: tuple[int, int]
    match: tuple[str, ...] = ()
    chip: str = ""
    sm_count: int | None = None
    boost_clock_mhz: float | None = None
    dram_gb: float | None = None
    dram_bandwidth_gbs: float | None = None
    l2_mb: float | None = None
    shared_mem_per_sm_kb: float | None = None
    shared_mem_per_block_optin_kb: float | None = None
    registers_per_sm: int | None = None
    max_registers_per_thread: int | None = None
    max_threads_per_sm: int | None = None
    max_warps_per_sm: int | None = None
    max_blocks_per_sm: int | None = None
    fp32_tflops: float | None = None
    tf32_tensor_tflops: float | None = None
    fp16_tensor_tflops: float | None = None
    bf16_tensor_tflops: float | None = None
    fp8_tensor_tflops: float | None = None
    int8_tensor_tops: float | None = None
    not_supported: tuple[str, ...] = ()
    missing_fields: tuple[str, ...] = ()
    source: str = ""
    notes: tuple[str, ...] = ()
    detected_from: str = "spec sheet"  # "spec sheet", "spec sheet+device_properties", "device_properties"

    @property
    def sm_arch(self) -> str:
        """`sm_90` style name, as nvcc and the prompts spell it."""
        return f"sm_{self.compute_capability[0]}{self.compute_capability[1]}"

    def ridge_point(self, peak_tflops: float | None = None) -> float | None:
        """FLOP per DRAM byte where the roofline turns from memory- to compute-bound."""
        peak = self.fp32_tflops if peak_tflops is None else peak_tflops
        if not peak or not self.dram_bandwidth_gbs:
            return None
        return peak * 1e12 / (self.dram_bandwidth_gbs * 1e9)

    def summary(self) -> str:
        """A few lines for LLM prompts and `cudaforge doctor`: what the card can do at best."""

        def num(v: float | int | None, unit: str = "", digits: int = 1) -> str:
            if v is None:
                return "?"
            text = f"{v:,.{digits}f}" if isinstance(v, float) and v != int(v) else f"{int(v):,}"
            return f"{text}{unit}"

        lines = [
            f"GPU: {self.name} ({self.sm_arch}, {num(self.sm_count)} SMs, boost {num(self.boost_clock_mhz)} MHz)",
            f"Memory: {num(self.dram_gb)} GB DRAM at {num(self.dram_bandwidth_gbs)} GB/s, L2 {num(self.l2_mb)} MB",
            f"Per SM: {num(self.shared_mem_per_sm_kb)} KB shared memory "
            f"(max {num(self.shared_mem_per_block_optin_kb)} KB per block, opt-in), "
            f"{num(self.registers_per_sm)} registers (max {num(self.max_registers_per_thread)} per thread), "
            f"max {num(self.max_threads_per_sm)} threads / {num(self.max_warps_per_sm)} warps / "
            f"{num(self.max_blocks_per_sm)} blocks",
        ]
        tensor = []
        for label, fname, unit in (
            ("FP16", "fp16_tensor_tflops", "TFLOPS"),
            ("BF16", "bf16_tensor_tflops", "TFLOPS"),
            ("TF32", "tf32_tensor_tflops", "TFLOPS"),
            ("FP8", "fp8_tensor_tflops", "TFLOPS"),
            ("INT8", "int8_tensor_tops", "TOPS"),
        ):
            if fname in self.not_supported:
                tensor.append(f"{label} n/a")
            else:
                tensor.append(f"{label} {num(getattr(self, fname))} {unit}")
        lines.append(
            f"Peak: FP32 {num(self.fp32_tflops)} TFLOPS (CUDA cores); dense tensor " + ", ".join(tensor)
        )
        ridge = self.ridge_point()
        if ridge is not None:
            fp16_ridge = self.ridge_point(self.fp16_tensor_tflops) if self.fp16_tensor_tflops else None
            extra = f", FP16 tensor {fp16_ridge:.0f}" if fp16_ridge else ""
            lines.append(f"Roofline ridge point: FP32 {ridge:.1f} FLOP/byte{extra}")
        if self.missing_fields:
            lines.append("Unknown for this card: " + ", ".join(self.missing_fields))
        if self.detected_from != "spec sheet":
            lines.append(f"Spec source: {self.detected_from}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, stored with each run so results say which peaks they were judged by."""
        out: dict[str, Any] = {}
        for f in self.__dataclass_fields__:
            value = getattr(self, f)
            out[f] = list(value) if isinstance(value, tuple) else value
        return out


def _specs_dir() -> Any:
    """The `gpus/` folder inside the installed `cudaforge.profiles` package."""
    return resources.files("cudaforge.profiles").joinpath("gpus")


def _parse_gpu_spec(key: str, data: Mapping[str, Any], origin: str) -> GpuSpec:
    """Validate one spec table; errors name the file and the key, one line each."""
    unknown = sorted(set(data) - _KNOWN_KEYS)
    if unknown:
        raise ConfigError(f"{origin}: unknown key '{unknown[0]}'")
    for required in ("name", "compute_capability", "match"):
        if required not in data:
            raise ConfigError(f"{origin}: missing key '{required}'")
    cc = data["compute_capability"]
    if not (isinstance(cc, list) and len(cc) == 2 and all(isinstance(v, int) for v in cc)):
        raise ConfigError(f"{origin}: 'compute_capability' must be [major, minor]")
    match = data["match"]
    if not (isinstance(match, list) and match and all(isinstance(m, str) for m in match)):
        raise ConfigError(f"{origin}: 'match' must be a non-empty list of regular expressions")
    for pattern in match:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"{origin}: bad 'match' pattern {pattern!r}: {exc}") from None
    not_supported = tuple(data.get("not_supported", ()))
    for name in not_supported:
        if name not in NUMERIC_FIELDS:
            raise ConfigError(f"{origin}: 'not_supported' names unknown field '{name}'")
    values: dict[str, Any] = {}
    for fname in NUMERIC_FIELDS:
        if fname in data:
            value = data[fname]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"{origin}: '{fname}' must be a positive number")
            values[fname] = int(value) if fname in _INT_FIELDS else float(value)
        elif fname not in not_supported:
            raise ConfigError(
                f"{origin}: missing key '{fname}' (list it in 'not_supported' if the card lacks it)"
            )
    notes = data.get("notes", ())
    return GpuSpec(
        key=key,
        name=str(data["name"]),
        compute_capability=(cc[0], cc[1]),
        match=tuple(match),
        chip=str(data.get("chip", "")),
        not_supported=not_supported,
        source=str(data.get("source", "")),
        notes=(notes,) if isinstance(notes, str) else tuple(notes),
        **values,
    )


@functools.cache
def _load_builtin() -> tuple[GpuSpec, ...]:
    specs = []
    folder = _specs_dir()
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".toml"):
            continue
        origin = f"profiles/gpus/{entry.name}"
        try:
            data = tomllib.loads(entry.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{origin}: {exc}") from None
        specs.append(_parse_gpu_spec(entry.name.removesuffix(".toml"), data, origin))
    return tuple(specs)


def load_gpu_specs(directory: str | Path | None = None) -> tuple[GpuSpec, ...]:
    """All specs, sorted by file name. `directory` replaces the built-in folder (tests, users)."""
    if directory is None:
        return _load_builtin()
    specs = []
    for path in sorted(Path(directory).glob("*.toml")):
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: {exc}") from None
        specs.append(_parse_gpu_spec(path.stem, data, str(path)))
    return tuple(specs)


def _specificity(spec: GpuSpec, device_name: str) -> int:
    """Length of the longest pattern that matches: the more specific pattern wins a tie."""
    best = -1
    for pattern in spec.match:
        if re.search(pattern, device_name, flags=re.IGNORECASE):
            best = max(best, len(pattern))
    return best


def match_gpu_specs(
    device_name: str, compute_capability: tuple[int, int] | None, specs: Iterable[GpuSpec]
) -> list[GpuSpec]:
    """Specs whose name patterns match (and whose CC agrees, when one is given), best first."""
    hits = []
    for p in specs:
        score = _specificity(p, device_name)
        if score < 0:
            continue
        if compute_capability is not None and tuple(compute_capability) != p.compute_capability:
            continue
        hits.append((score, p))
    hits.sort(key=lambda item: -item[0])
    return [p for _, p in hits]


def detect_gpu_spec(
    device_name: str,
    compute_capability: tuple[int, int],
    props: Mapping[str, Any] | None = None,
    *,
    specs: Iterable[GpuSpec] | None = None,
) -> GpuSpec:
    """The spec of the card named `device_name` with this CC; an unknown card gets one built
    from `props` (torch.cuda.get_device_properties fields as a dict) with its gaps named.

    A known card whose SM count differs from the spec (a MIG slice, a cut-down variant) keeps the
    spec's per-SM data but has its whole-chip compute peaks scaled to the SMs it really has.
    """
    candidates = match_gpu_specs(device_name, compute_capability, specs or load_gpu_specs())
    if candidates:
        best_score = _specificity(candidates[0], device_name)
        tied = [p for p in candidates if _specificity(p, device_name) == best_score]
        total = _prop_number(props, "total_memory")
        if len(tied) > 1 and total:
            tied.sort(key=lambda p: abs((p.dram_gb or 0) - total / 1e9))
        return _adjust_to_device(tied[0], props)
    return gpu_spec_from_properties(device_name, compute_capability, props)


def _prop_number(props: Mapping[str, Any] | None, key: str) -> float | None:
    if not props:
        return None
    value = props.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return None
    return float(value)


def _adjust_to_device(spec: GpuSpec, props: Mapping[str, Any] | None) -> GpuSpec:
    """Scale the compute peaks of a known spec when the device exposes fewer SMs (MIG, variants)."""
    sms = _prop_number(props, "multi_processor_count")
    if not sms or not spec.sm_count or int(sms) == spec.sm_count:
        return spec
    ratio = sms / spec.sm_count
    scaled: dict[str, Any] = {"sm_count": int(sms)}
    for fname in ("fp32_tflops", *TENSOR_FIELDS):
        value = getattr(spec, fname)
        if value is not None:
            scaled[fname] = round(value * ratio, 2)
    note = (
        f"device reports {int(sms)} SMs, spec has {spec.sm_count}: compute peaks scaled by "
        f"{ratio:.3f}; DRAM bandwidth is the whole card's"
    )
    return replace(spec, **scaled, notes=(*spec.notes, note), detected_from="spec sheet+device_properties")


def gpu_spec_from_properties(
    device_name: str, compute_capability: tuple[int, int], props: Mapping[str, Any] | None
) -> GpuSpec:
    """A spec for a card we have no file for: what the device properties say, the rest named
    in `missing_fields` (dense tensor peaks are never guessed)."""
    cc = (int(compute_capability[0]), int(compute_capability[1]))
    values: dict[str, Any] = {}
    notes: list[str] = []
    sms = _prop_number(props, "multi_processor_count")
    if sms:
        values["sm_count"] = int(sms)
    clock_khz = _prop_number(props, "clock_rate")
    if clock_khz:
        values["boost_clock_mhz"] = clock_khz / 1000.0
    total = _prop_number(props, "total_memory")
    if total:
        values["dram_gb"] = round(total / 1e9, 1)
    mem_clock_khz = _prop_number(props, "memory_clock_rate")
    bus_bits = _prop_number(props, "memory_bus_width")
    if mem_clock_khz and bus_bits:
        # Double data rate, as NVIDIA's bandwidthTest sample computes the theoretical peak.
        values["dram_bandwidth_gbs"] = round(2 * mem_clock_khz * 1e3 * bus_bits / 8 / 1e9, 1)
        notes.append("DRAM bandwidth derived from memory clock x bus width (theoretical peak)")
    l2 = _prop_number(props, "L2_cache_size")
    if l2:
        values["l2_mb"] = round(l2 / 2**20, 2)
    smem_sm = _prop_number(props, "shared_memory_per_multiprocessor")
    if smem_sm:
        values["shared_mem_per_sm_kb"] = smem_sm / 1024
    smem_block = _prop_number(props, "shared_memory_per_block_optin")
    if smem_block:
        values["shared_mem_per_block_optin_kb"] = smem_block / 1024
    regs = _prop_number(props, "regs_per_multiprocessor")
    if regs:
        values["registers_per_sm"] = int(regs)
    if cc >= (3, 5):
        values["max_registers_per_thread"] = 255  # the same on every CC since 3.5
    threads = _prop_number(props, "max_threads_per_multi_processor")
    if threads:
        values["max_threads_per_sm"] = int(threads)
        warp = _prop_number(props, "warp_size") or 32
        values["max_warps_per_sm"] = int(threads // warp)
    if cc in _MAX_BLOCKS_PER_SM:
        values["max_blocks_per_sm"] = _MAX_BLOCKS_PER_SM[cc]
    lanes = _FP32_LANES_PER_SM.get(cc)
    if lanes and sms and clock_khz:
        values["fp32_tflops"] = round(sms * lanes * 2 * clock_khz * 1e3 / 1e12, 2)
        notes.append(f"FP32 peak derived: {int(sms)} SMs x {lanes} lanes x 2 FLOP x clock")
    missing = tuple(f for f in NUMERIC_FIELDS if f not in values)
    name = str((props or {}).get("name") or device_name)
    return GpuSpec(
        key="device",
        name=name,
        compute_capability=cc,
        missing_fields=missing,
        notes=tuple(notes),
        source="CUDA device properties (no spec file matches this card)",
        detected_from="device_properties",
        **values,
    )


@dataclass(frozen=True)
class ProfileCheck:
    """How a chosen spec compares with the running device (used by `cudaforge doctor`)."""

    spec: GpuSpec
    mismatches: tuple[str, ...] = field(default_factory=tuple)


def compare_with_properties(spec: GpuSpec, props: Mapping[str, Any]) -> ProfileCheck:
    """Name the spec values the device contradicts, so a wrong spec is visible, not silent."""
    problems: list[str] = []
    sms = _prop_number(props, "multi_processor_count")
    if sms and spec.sm_count and int(sms) != spec.sm_count:
        problems.append(f"SM count: device {int(sms)}, spec {spec.sm_count}")
    total = _prop_number(props, "total_memory")
    if total and spec.dram_gb and not (0.85 <= total / 1e9 / spec.dram_gb <= 1.15):
        problems.append(f"memory: device {total / 1e9:.1f} GB, spec {spec.dram_gb:g} GB")
    smem = _prop_number(props, "shared_memory_per_block_optin")
    if (
        smem
        and spec.shared_mem_per_block_optin_kb
        and int(smem / 1024) != int(spec.shared_mem_per_block_optin_kb)
    ):
        problems.append(
            f"shared memory per block: device {smem / 1024:g} KB, spec {spec.shared_mem_per_block_optin_kb:g} KB"
        )
    return ProfileCheck(spec=spec, mismatches=tuple(problems))


def smi_device_selector(index: int) -> str:
    """nvidia-smi numbers devices physically; map a CUDA-visible index through CUDA_VISIBLE_DEVICES."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if visible:
        entries = [e.strip() for e in visible.split(",") if e.strip()]
        if 0 <= index < len(entries):
            return entries[index]
    return str(index)


def _default_run(argv: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=False)


def query_nvidia_smi(
    index: int = 0,
    *,
    run: Callable[[Sequence[str], float], Any] = _default_run,
    which: Callable[[str], str | None] = shutil.which,
) -> dict[str, Any] | None:
    """Name, CC, memory and max SM clock of one GPU from nvidia-smi, without creating a CUDA context
    in this process. Returns torch-style property names (name, major, minor, total_memory,
    clock_rate in kHz) plus driver_version and free_memory (bytes free now, when reported), or None
    when nvidia-smi is missing or fails."""
    smi = which("nvidia-smi")
    if smi is None:
        return None
    argv = [
        smi,
        "--query-gpu=name,compute_cap,memory.total,clocks.max.sm,driver_version,memory.free",
        "--format=csv,noheader,nounits",
        "-i",
        smi_device_selector(index),
    ]
    try:
        proc = run(argv, 10.0)
    except (OSError, subprocess.SubprocessError):
        return None
    if getattr(proc, "returncode", 1) != 0:
        return None
    line = next((ln for ln in str(getattr(proc, "stdout", "")).splitlines() if ln.strip()), "")
    parts = [p.strip() for p in line.split(",")]
    if len(parts) < 5:
        return None
    name, cc, mem_mib, clock_mhz, driver = parts[:5]
    props: dict[str, Any] = {"name": name, "driver_version": driver}
    m = re.match(r"^(\d+)\.(\d+)$", cc)
    if m:
        props["major"], props["minor"] = int(m.group(1)), int(m.group(2))
    if mem_mib.isdigit():
        props["total_memory"] = int(mem_mib) * 2**20
    if clock_mhz.isdigit():
        props["clock_rate"] = int(clock_mhz) * 1000
    if len(parts) > 5 and parts[5].isdigit():
        props["free_memory"] = int(parts[5]) * 2**20
    return props


def torch_device_properties(index: int = 0) -> dict[str, Any] | None:
    """torch.cuda.get_device_properties(index) as a plain dict (imports torch lazily); None when torch
    or CUDA is unavailable. Note: initialises CUDA in the calling process."""
    try:
        import torch  # noqa: PLC0415 - lazy on purpose: the engine must import without torch's CUDA
    except ImportError:
        return None
    try:
        if not torch.cuda.is_available():
            return None
        p = torch.cuda.get_device_properties(index)
    except Exception:  # noqa: BLE001 - any CUDA init failure means "no properties"
        return None
    keys = (
        "name",
        "major",
        "minor",
        "multi_processor_count",
        "total_memory",
        "L2_cache_size",
        "clock_rate",
        "memory_clock_rate",
        "memory_bus_width",
        "shared_memory_per_block",
        "shared_memory_per_block_optin",
        "shared_memory_per_multiprocessor",
        "max_threads_per_multi_processor",
        "regs_per_multiprocessor",
        "warp_size",
    )
    return {k: getattr(p, k) for k in keys if hasattr(p, k)}


def gpu_spec_for_device(
    index: int = 0,
    *,
    run: Callable[[Sequence[str], float], Any] = _default_run,
    which: Callable[[str], str | None] = shutil.which,
    use_torch: bool = True,
) -> GpuSpec | None:
    """The spec of CUDA device `index`: nvidia-smi first (no CUDA context in this process), the
    torch device properties when the card is unknown or nvidia-smi is missing. None without a GPU."""
    smi = query_nvidia_smi(index, run=run, which=which)
    if smi and "major" in smi:
        cc = (smi["major"], smi["minor"])
        if match_gpu_specs(smi["name"], cc, load_gpu_specs()):
            return detect_gpu_spec(smi["name"], cc, smi)
    props = torch_device_properties(index) if use_torch else None
    if props and "major" in props:
        return detect_gpu_spec(str(props.get("name", "")), (props["major"], props["minor"]), props)
    if smi and "major" in smi:
        return detect_gpu_spec(smi["name"], (smi["major"], smi["minor"]), smi)
    return None
