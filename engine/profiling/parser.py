"""Reading `ncu --csv --page raw` output, and telling its failure modes apart.

The format, as an H200 with ncu 2025.3 prints it (fixtures in tests/fixtures/ncu/):
- `==WARNING==`, `==PROF==`, `==ERROR==` lines, interleaved with whatever the target printed;
- a header row: "ID","Process ID","Process Name","Host Name", then one column per NVTX state when
  `--nvtx` is on, then "Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC",
  then every metric column (requested ones, launch__*/device__attribute_* and more), sorted;
- a units row ("byte", "ns", "byte/s", "%", ... or empty);
- one row per profiled kernel launch. Numbers carry thousands separators ("65,536").
Columns are found by name, never by position.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field

from cudaforge.engine.profiling.result import KernelProfile, MetricValue
from cudaforge.engine.profiling.units import normalize, parse_number

IDENTITY_COLUMNS = frozenset(
    {
        "ID",
        "Process ID",
        "Process Name",
        "Host Name",
        "Kernel Name",
        "Context",
        "Stream",
        "Block Size",
        "Grid Size",
        "Device",
        "CC",
    }
)
# Device- and system-level columns repeated on every row: kept once per result, not per kernel.
_DEVICE_PREFIXES = ("device__attribute_", "nvlink__", "numa__", "c2clink__")

PERMISSION_MARKER = "ERR_NVGPUCTRPERM"
_APP_ERROR = re.compile(r"==ERROR==\s+The application returned an error code \((-?\d+)\)")
_NO_KERNELS = re.compile(r"==WARNING==\s+No kernels were profiled", re.IGNORECASE)


class CsvParseError(ValueError):
    """The output had a raw-page header but rows that do not fit it."""


@dataclass(frozen=True)
class ParsedOutput:
    """What the raw page held: kernels, the metric column names, device attributes, ncu's lines."""

    kernels: tuple[KernelProfile, ...] = ()
    columns: tuple[str, ...] = ()
    device: dict[str, str] = field(default_factory=dict)
    found_header: bool = False
    tool_lines: tuple[str, ...] = ()  # ==PROF==/==WARNING==/==ERROR== lines, in order


def tool_lines(text: str) -> list[str]:
    """ncu's own messages (`==PROF==`, `==WARNING==`, `==ERROR==`), in order."""
    return [line.rstrip() for line in text.splitlines() if line.startswith("==")]


def target_lines(stderr: str) -> list[str]:
    """What the profiled program itself wrote to stderr (every non-blank line that is not ncu's), in order: a
    failed target's traceback or its last words."""
    return [line.rstrip() for line in stderr.splitlines() if line.strip() and not line.startswith("==")]


def _is_nvtx_column(name: str) -> bool:
    return "Domain:" in name or "_Range" in name


def _dims(cell: str) -> tuple[int, int, int] | None:
    nums = re.findall(r"\d[\d,]*", cell)
    if len(nums) != 3:
        return None
    x, y, z = (int(n.replace(",", "")) for n in nums)
    return (x, y, z)


def parse_raw_csv(text: str) -> ParsedOutput:
    """Parse ncu's stdout (or a `--log-file`) holding a `--csv --page raw` report.

    Lines before the header (target output, ncu messages) are skipped; after the header only lines
    that look like CSV rows are read, so stray target output cannot shift columns. Raises
    `CsvParseError` when a row has the wrong number of cells.
    """
    lines = text.splitlines()
    start = next(
        (i for i, line in enumerate(lines) if line.startswith('"ID","Process ID"')),
        None,
    )
    messages = tuple(tool_lines(text))
    if start is None:
        return ParsedOutput(found_header=False, tool_lines=messages)
    csv_lines = [lines[start]] + [line for line in lines[start + 1 :] if line.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(csv_lines))))
    header = rows[0]
    if len(rows) < 2:
        raise CsvParseError("ncu printed a CSV header but no units row")
    units = rows[1]
    if len(units) != len(header):
        raise CsvParseError(f"units row has {len(units)} cells, header has {len(header)}")
    if units and units[0] not in ("", "ID") and parse_number(units[0]) is not None:
        raise CsvParseError("second CSV row is not a units row (ncu format changed?)")
    index = {name: i for i, name in enumerate(header)}
    metric_cols = [
        i
        for i, name in enumerate(header)
        if name not in IDENTITY_COLUMNS
        and not _is_nvtx_column(name)
        and not name.startswith(_DEVICE_PREFIXES)
    ]
    device_cols = [i for i, name in enumerate(header) if name.startswith(_DEVICE_PREFIXES)]
    nvtx_cols = [i for i, name in enumerate(header) if _is_nvtx_column(name)]

    kernels: list[KernelProfile] = []
    device: dict[str, str] = {}
    for lineno, row in enumerate(rows[2:], start=3):
        if len(row) != len(header):
            raise CsvParseError(f"CSV row {lineno} has {len(row)} cells, header has {len(header)}")

        def cell(name: str, row: list[str] = row) -> str:
            i = index.get(name)
            return row[i] if i is not None else ""

        launch = parse_number(cell("ID"))
        if launch is None:
            raise CsvParseError(f"CSV row {lineno}: ID {cell('ID')!r} is not a number")
        metrics: dict[str, MetricValue] = {}
        for i in metric_cols:
            raw = row[i]
            value, unit = normalize(parse_number(raw), units[i])
            metrics[header[i]] = MetricValue(value=value, unit=unit, raw=raw, raw_unit=units[i])
        if not device:
            device = {header[i]: row[i] for i in device_cols}
        nvtx = " | ".join(row[i].strip() for i in nvtx_cols if row[i].strip())
        kernels.append(
            KernelProfile(
                launch_id=int(launch),
                name=cell("Kernel Name"),
                grid=_dims(cell("Grid Size")),
                block=_dims(cell("Block Size")),
                metrics=metrics,
                stream=cell("Stream"),
                context=cell("Context"),
                device=cell("Device"),
                cc=cell("CC"),
                nvtx=nvtx,
            )
        )
    return ParsedOutput(
        kernels=tuple(kernels),
        columns=tuple(header[i] for i in metric_cols),
        device=device,
        found_header=True,
        tool_lines=messages,
    )


def application_exit_code(text: str) -> int | None:
    """The target's exit code when ncu reports "The application returned an error code (N)"."""
    m = _APP_ERROR.search(text)
    return int(m.group(1)) if m else None


def says_permission_denied(text: str) -> bool:
    return PERMISSION_MARKER in text


def says_no_kernels(text: str) -> bool:
    return bool(_NO_KERNELS.search(text))


def ncu_errors(text: str) -> list[str]:
    """ncu's own `==ERROR==` lines without their prefix, in order, less its report of the target's exit code
    (said separately): why ncu failed or stopped its target (a driver resource taken, say)."""
    return [line[len("==ERROR==") :].strip() for line in text.splitlines()
            if line.startswith("==ERROR==") and not _APP_ERROR.match(line)]
