"""The candidate's construction gets the reference's random weights without drawing them again.

Both models are built on the host from the same seed (pipeline.load_task, build_candidate), so where
ModelNew constructs its layers as Model does, every random fill of its weights repeats one of Model's:
same generator state before it, same op, same size, same numbers. Drawing them is the slow part of a
large model's construction: the host's generator is serial (level3/2_ShallowWideMLP, 8 GiB of weights:
about 15-20 s a model on the H200 machine's host under a sweep's load, twice per evaluation and twice
again in the shape check).

So the reference's construction is *recorded*: every large random fill on the host (_random_ops: uniform_,
normal_, rand, randn; at least MIN_NUMEL elements, the default generator) keeps its result tensor, the
tensor's version counter and the generator's state before and after it; a fill whose memory any later op of
the construction writes (its schema's write annotations: in place, `out=`, through views and `.data`) is
dropped, and so is one the finished model does not keep. The candidate's construction is *replayed*: a fill
whose op, arguments, size, dtype and generator state before it equal a recorded one's, and whose recorded
tensor is unchanged since (its version counter), gets a copy of those values and the generator moves on to
the recorded state after it. That is exactly what drawing would have produced, bit for bit, and the generator ends
where it would have; any other fill (another order, another size, a changed tensor, another generator)
is drawn as before. Nothing is shared: the candidate's tensors are its own copies.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from cudaforge.engine.observe import storage_address

MIN_NUMEL = 1 << 18  # below this a draw costs less than the bookkeeping (1 MiB of float32)


@dataclass
class ReplayStats:
    """What a replayed construction took from the record (for the phase record and tests)."""

    fills: int = 0  # large random fills seen
    replayed: int = 0  # ... of them copied from the record
    replayed_bytes: int = 0
    seconds: float = 0.0  # spent copying


@dataclass
class ConstructionRecord:
    """The large random fills of one construction: key -> (result tensor, its version then, state after)."""

    fills: dict[tuple[Any, ...], tuple[Any, int, Any]] = field(default_factory=dict)

    def clear(self) -> None:
        """Let the recorded tensors go (the reference's host weights are freed when it moves to the device)."""
        self.fills.clear()

    def forget_written(self, storages: set[int]) -> None:
        """Drop the fills whose memory was written after they were drawn: they no longer hold the draws."""
        for key in [k for k, (t, _, _) in self.fills.items() if storage_address(t) in storages]:
            del self.fills[key]

    def keep_only(self, model: Any) -> None:
        """Keep only the fills that live on in `model` (its parameters' and buffers' memory): the record then
        holds no memory that the model does not, and temporaries of the construction go as they would."""
        import torch

        alive: set[int] = set()
        if isinstance(model, torch.nn.Module):
            alive = {storage_address(t) for t in [*model.parameters(), *model.buffers()]}
        for key in [k for k, (t, _, _) in self.fills.items() if storage_address(t) not in alive]:
            del self.fills[key]


_WRITES: dict[Any, tuple[tuple[int, str], ...]] = {}


def _written(func: Any, args: Any, kwargs: dict[str, Any]) -> set[int]:
    """The memory (storage pointers) of the host tensors an op writes, from its schema's write annotations:
    in-place ops, `out=` and copies, through views and `.data` alike (they share the memory)."""
    import torch

    where = _WRITES.get(func)
    if where is None:
        where = tuple((i, a.name) for i, a in enumerate(func._schema.arguments)
                      if a.alias_info is not None and a.alias_info.is_write)
        _WRITES[func] = where
    found: set[int] = set()
    for i, name in where:
        value = args[i] if i < len(args) else kwargs.get(name)
        for t in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                found.add(storage_address(t))
    return found


def _random_ops() -> dict[Any, str]:
    """The ops that fill from the default host generator, by kind: "inplace" (the tensor is args[0]) or
    "factory" (a new tensor of the size in args[0])."""
    import torch

    aten = torch.ops.aten
    return {aten.uniform_.default: "inplace", aten.normal_.default: "inplace",
            aten.rand.default: "factory", aten.randn.default: "factory"}


def _key(func: Any, kind: str, args: Any, kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
    """The fill's identity apart from the generator state, or None where it is not one we replay: another
    generator, a device other than the host, a small or non-contiguous tensor."""
    import torch

    if kwargs.get("generator") is not None:
        return None
    if kind == "inplace":
        target = args[0]
        if not isinstance(target, torch.Tensor) or target.device.type != "cpu" or target.numel() < MIN_NUMEL \
                or not target.is_contiguous():
            return None
        rest = tuple(float(a) for a in args[1:])
        return (str(func), tuple(target.shape), target.dtype, rest, tuple(sorted(
            (k, v) for k, v in kwargs.items() if k != "generator")))
    size = tuple(int(s) for s in args[0])
    numel = math.prod(size)
    device = kwargs.get("device")
    if numel < MIN_NUMEL or (device is not None and torch.device(device).type != "cpu") \
            or kwargs.get("layout") not in (None, torch.strided) or kwargs.get("pin_memory"):
        return None
    return (str(func), size, kwargs.get("dtype"), (), ())


def _fill_key(ops: dict[Any, str], func: Any, args: Any, kwargs: dict[str, Any]) -> tuple[str, tuple[Any, ...]] | None:
    """(kind, key) of a fill we record or replay, else None; anything unexpected in an op's arguments makes
    it one we leave alone (the bookkeeping never fails a construction)."""
    kind = ops.get(func)
    if kind is None:
        return None
    try:
        key = _key(func, kind, args, kwargs)
        hash(key)
    except Exception:
        return None
    return None if key is None else (kind, key)


def _writes(func: Any, args: Any, kwargs: dict[str, Any]) -> set[int] | None:
    """_written, or None where the op's schema cannot say (then every record is dropped: nothing is trusted)."""
    try:
        return _written(func, args, kwargs)
    except Exception:
        return None


def _state_key(state: Any) -> tuple[int, ...]:
    """The host generator's state (get_rng_state's 5,056 bytes) as a hashable key, without numpy."""
    import torch

    return tuple(state.view(torch.int64).tolist()) if state.numel() % 8 == 0 else tuple(state.tolist())


@contextlib.contextmanager
def recording(record: ConstructionRecord) -> Iterator[ConstructionRecord]:
    """Record the large host random fills of what runs inside (the reference's construction)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    ops = _random_ops()
    # An in-place op's version bump comes after its dispatch returns, so a fill's version is read when the
    # next op starts (or the construction ends): the version its values have until something changes them.
    pending: list[tuple[tuple[Any, ...], Any, Any]] = []

    def settle() -> None:
        for key, out, after in pending:
            record.fills[key] = (out, out._version, after)
        pending.clear()

    class Record(TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            return False  # host construction, never compiled: no torch._dynamo import (1-5 s) on first use

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            settle()
            kwargs = kwargs or {}
            fill = _fill_key(ops, func, args, kwargs)
            # Whatever this op writes no longer holds an earlier fill's draws (a fill over a fill included).
            written = _writes(func, args, kwargs)
            if written is None:
                record.clear()
            elif written:
                record.forget_written(written)
            if fill is None:
                return func(*args, **kwargs)
            before = torch.get_rng_state()
            out = func(*args, **kwargs)
            if isinstance(out, torch.Tensor) and out.device.type == "cpu" and out.is_contiguous():
                pending.append(((*fill[1], _state_key(before)), out, torch.get_rng_state()))
            return out

    try:
        with Record():
            yield record
    finally:
        settle()


@contextlib.contextmanager
def replaying(record: ConstructionRecord, stats: ReplayStats | None = None) -> Iterator[ReplayStats]:
    """Replay `record`'s fills where what runs inside (the candidate's construction) repeats them exactly;
    what was replayed is counted in `stats` (a new one where none is given)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    ops = _random_ops()
    stats = stats if stats is not None else ReplayStats()

    class Replay(TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            return False  # as Record's

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            fill = _fill_key(ops, func, args, kwargs)
            if fill is None:
                return func(*args, **kwargs)
            kind, key = fill
            stats.fills += 1
            hit = record.fills.get((*key, _state_key(torch.get_rng_state())))
            if hit is None:
                return func(*args, **kwargs)
            source, version, after = hit
            if source._version != version:  # changed since it was drawn: those are not the drawn values
                return func(*args, **kwargs)
            if kind == "factory" and source.dtype != (kwargs.get("dtype") or torch.get_default_dtype()):
                return func(*args, **kwargs)  # the default dtype changed in between: draw it
            start = time.perf_counter()
            out = args[0].copy_(source) if kind == "inplace" else source.clone(memory_format=torch.contiguous_format)
            torch.set_rng_state(after)
            stats.replayed += 1
            stats.replayed_bytes += out.numel() * out.element_size()
            stats.seconds += time.perf_counter() - start
            return out

    with Replay():
        yield stats
