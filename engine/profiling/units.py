"""Units of ncu metrics, normalised to one canonical unit per kind.

ncu prints base units in the raw CSV (`ns`, `byte`, `byte/s`), but auto-scaled units (`usecond`,
`Mbyte`, `Gbyte/second`) appear in other pages and versions. Everything is brought to: time in µs
("us"), sizes in bytes ("byte"), bandwidth in GB/s (1e9 bytes per second), frequency in MHz,
percentages in "%". Other units (cycle, inst, warp, block, register/thread...) are kept as printed.
"""

from __future__ import annotations

import re

_TIME_TO_US = {
    "ns": 1e-3,
    "nsecond": 1e-3,
    "nsec": 1e-3,
    "us": 1.0,
    "usecond": 1.0,
    "usec": 1.0,
    "µs": 1.0,
    "ms": 1e3,
    "msecond": 1e3,
    "msec": 1e3,
    "s": 1e6,
    "second": 1e6,
    "sec": 1e6,
}
_SIZE_TO_BYTE = {
    "byte": 1.0,
    "bytes": 1.0,
    "b": 1.0,
    "kbyte": 1e3,
    "kb": 1e3,
    "mbyte": 1e6,
    "mb": 1e6,
    "gbyte": 1e9,
    "gb": 1e9,
    "tbyte": 1e12,
    "tb": 1e12,
    "kib": 2.0**10,
    "mib": 2.0**20,
    "gib": 2.0**30,
    "tib": 2.0**40,
}
_PER_SECOND = {"s", "second", "sec"}
_FREQ_TO_MHZ = {"hz": 1e-6, "khz": 1e-3, "mhz": 1.0, "ghz": 1e3}

_NUMBER = re.compile(r"^[+-]?(\d{1,3}(,\d{3})+|\d+)(\.\d+)?([eE][+-]?\d+)?$")


def parse_number(cell: str) -> float | None:
    """A CSV cell as a number: thousands separators allowed ("2,306,380.5"); n/a and text -> None."""
    text = cell.strip()
    if not text or not _NUMBER.match(text):
        return None
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def normalize(value: float | None, unit: str) -> tuple[float | None, str]:
    """(value, unit) in the canonical unit of its kind; unknown units pass through unchanged."""
    u = unit.strip()
    key = u.lower()
    if not u:
        return value, ""
    if u == "%":
        return value, "%"
    if key in _TIME_TO_US:
        return _scale(value, _TIME_TO_US[key]), "us"
    if key in _SIZE_TO_BYTE:
        return _scale(value, _SIZE_TO_BYTE[key]), "byte"
    if key in _FREQ_TO_MHZ:
        return _scale(value, _FREQ_TO_MHZ[key]), "MHz"
    if "/" in key:
        num, _, den = key.partition("/")
        if num in _SIZE_TO_BYTE and den in _PER_SECOND:
            return _scale(value, _SIZE_TO_BYTE[num] / 1e9), "GB/s"
        if num in _SIZE_TO_BYTE and den in _TIME_TO_US:
            # bytes per <time unit> -> GB/s
            per_second = _SIZE_TO_BYTE[num] / (_TIME_TO_US[den] * 1e-6)
            return _scale(value, per_second / 1e9), "GB/s"
        if num == "cycle" and den in _TIME_TO_US:
            # cycles per <time unit> -> MHz (cycles per µs)
            return _scale(value, 1.0 / _TIME_TO_US[den]), "MHz"
        if num in _SIZE_TO_BYTE:
            # byte/block, Kbyte/block, byte/sector ...: scale the size, keep the denominator
            return _scale(value, _SIZE_TO_BYTE[num]), f"byte/{u.partition('/')[2]}"
    return value, u


def _scale(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor
