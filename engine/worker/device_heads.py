"""The first elements of an output that waits on the host, kept on the device too, for its compares.

An output that waits on the host while the other side runs (memory.park: the correctness trials and the
cache probes; memory.ExpectedPlace: the timed check's expected outputs) comes back over the bus a slice
at a time to be compared (worker/compare.py). Those copies are the bus-bound part of the large problems'
evaluations: on the H200 sweeps the compares of parked outputs summed about 280 s, and inside timed
windows a 6 GiB elementwise output's sampled compares took most of its ~0.9 s of exclusive time. Where the
memory rule has room beside what waits on the device (room for some of the output, not all: else it would
wait there whole), as many of its first elements as fit are copied on the device as well (one
device-to-device copy, made before the original is freed), and a compared slice that lies within them is
read there instead of coming over the bus.

The host copy stays whole, so whatever else reads the parked output (the worst elements' values, the
probes' fingerprints) reads it as before, and a head only ever stands in for a slice whose values it holds:
a slice of that very host copy (same memory, offset within the head), looked up while the host copy is
alive. Each head goes when its host copy does.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from cudaforge.engine.observe import storage_address


@dataclass(eq=False)  # entries are told apart by identity (their tensors have no truth value)
class _Head:
    host: weakref.ref[Any]  # the host copy it stands in for
    base: int  # the host copy's storage offset (elements): the head's element 0 is there
    numel: int
    head: Any  # the device tensor: the first `numel` elements in the host copy's memory order


_HEADS: dict[int, list[_Head]] = {}  # host storage address -> the heads of host copies in that memory
STATS = {"head_bytes": 0, "host_bytes": 0}  # bytes of parked slices compared from heads, and copied over


def keep(original: Any, host: Any, room_bytes: int) -> int:
    """Keep the first elements of `original` (a device tensor) that fit in `room_bytes` as the head of `host`
    (its host copy, same layout); returns the bytes kept (0 where none: no room, no dense shared layout)."""
    from cudaforge.engine.observe import memory_order

    size = original.element_size()
    count = min(original.numel(), max(0, int(room_bytes)) // size)
    if count <= 0 or host.shape != original.shape or host.stride() != original.stride() \
            or host.dtype != original.dtype or memory_order(original) is None or memory_order(host) is None:
        return 0
    # A dense tensor's elements fill one span of its memory from its storage offset: its first `count`
    # there are the host copy's first `count` from its own offset (same strides).
    head = original.as_strided((count,), (1,), original.storage_offset()).clone()
    entry = _Head(host=weakref.ref(host), base=host.storage_offset(), numel=count, head=head)
    address = storage_address(host)
    _HEADS.setdefault(address, []).append(entry)
    weakref.finalize(host, _drop, address, entry)
    return count * size


def _drop(address: int, entry: _Head) -> None:
    entries = _HEADS.get(address, [])
    if entry in entries:
        entries.remove(entry)
    if not entries:
        _HEADS.pop(address, None)


def on_device(piece: Any) -> Any | None:
    """The device head's elements for `piece` (a contiguous slice of a host copy that has a head, within it),
    else None: the caller copies the piece over as before."""
    entries = _HEADS.get(storage_address(piece)) if piece.is_contiguous() else None
    for entry in entries or ():
        host = entry.host()
        if host is None or host.dtype != piece.dtype:
            continue
        start = piece.storage_offset() - entry.base
        if start >= 0 and start + piece.numel() <= entry.numel:
            STATS["head_bytes"] += piece.numel() * piece.element_size()
            return entry.head[start:start + piece.numel()].view(piece.shape)
    return None


def copied_over(piece: Any) -> None:
    """Count a parked slice that came over the bus (the compares' record beside the heads')."""
    STATS["host_bytes"] += piece.numel() * piece.element_size()


def reset_counts() -> None:
    """Count from zero (an evaluation's own compares, not its spare's warm-up's)."""
    STATS.update(head_bytes=0, host_bytes=0)


def live_bytes() -> int:
    """Device bytes the heads of live host copies hold now."""
    return sum(e.numel * e.head.element_size() for entries in _HEADS.values() for e in entries
               if e.host() is not None)
