"""One copy of the weights on the device for both models.

The worker gives the candidate the reference's parameters and buffers wherever names, shapes and dtypes
match (pipeline.copy_parameters copies their values). Two copies doubled the evaluation's memory on tasks
whose weights dominate: on the H200 sweep (2026-12-03) level2/55_Matmul_MaxPool_Sum_Scale held 8.34 GiB for
a reference that peaks at 4.09 GiB (a 4 GiB weight), and eight such problems broke the 1.25x rule. Here the
candidate's matching tensors are made views of the reference's device memory before the candidate is moved
to the device, so the weights exist once (a tensor the candidate's own __init__ put on a GPU is left as it is:
its kernels may already hold its address).

What this lends the candidate is memory the reference computes with, so the candidate must leave it as it
was: `check()` compares the shared tensors' fingerprints (observe.fingerprint: two keyed sums on a GPU, a
hash on the host) with those taken when they were shared, after every candidate call of the checks and after
the timed windows. A change is a failing `weights_mutation` finding and ends the evaluation, before the
reference could compute with the changed weights. A candidate that rebinds its own parameter (`p.data = t`)
changes nothing of the reference's and is left alone: it only gives up the sharing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cudaforge.engine import observe
from cudaforge.engine.worker import memory


@dataclass
class SharedWeights:
    """The reference's tensors the candidate shares (by the candidate's names), and their fingerprints."""

    tensors: dict[str, Any] = field(default_factory=dict)
    prints: list[Any] = field(default_factory=list)
    found: Any = None  # the first weights_mutation finding: it stands even if a caller swallowed the error

    def clear(self) -> None:
        """Forget the shared tensors (the shape check frees the full-size models: no reference of them is
        kept here), not a finding already made."""
        self.tensors, self.prints = {}, []

    @property
    def watching(self) -> bool:
        """Whether there is anything to check (shared tensors, or a finding that stands)."""
        return bool(self.tensors) or self.found is not None

    def changed(self) -> list[str]:
        """The shared tensors whose content differs from when they were shared (names, sorted)."""
        if not self.tensors:
            return []
        now = observe.fingerprints(list(self.tensors.values()))
        return sorted(name for name, before, after in zip(self.tensors, self.prints, now, strict=True)
                      if before != after)


SHARED = SharedWeights()  # the worker's (one evaluation per process)


def share(model: Any, model_new: Any, float_dtype: Any = None) -> SharedWeights:
    """Make the candidate's parameters and buffers views of the reference's where the name and shape match
    and the dtype matches, or will once the candidate is moved to `float_dtype` (pipeline.place). Call it
    with the reference already on the device and the candidate not yet moved: moving it then leaves the
    shared ones where they are. Returns (and keeps in SHARED) what was shared."""
    import torch

    reference = dict(model.named_parameters())
    reference.update(dict(model.named_buffers()))
    shared: dict[str, Any] = {}
    with torch.no_grad():
        for name, param in model_new.named_parameters():
            ref = reference.get(name)
            if ref is not None and _compatible(param, ref, float_dtype):
                own = param.untyped_storage()
                param.data = ref.data
                memory.storage_let_go(own)
                shared[name] = ref
        for owner_name, owner in model_new.named_modules():
            for key, buf in list(owner._buffers.items()):
                full = f"{owner_name}.{key}" if owner_name else key
                ref = reference.get(full)
                if buf is not None and ref is not None and _compatible(buf, ref, float_dtype):
                    own = buf.untyped_storage()
                    owner._buffers[key] = ref.detach()
                    del buf
                    memory.storage_let_go(own)
                    shared[full] = ref
    SHARED.tensors = {name: t.detach() for name, t in shared.items()}
    SHARED.prints = observe.fingerprints(list(SHARED.tensors.values()))
    return SHARED


def _compatible(mine: Any, ref: Any, float_dtype: Any) -> bool:
    """Same shape, and the dtype the candidate's tensor will have once placed. A tensor the candidate already
    put on a GPU itself stays its own: its kernels may hold its address from __init__."""
    if tuple(mine.shape) != tuple(ref.shape) or mine.numel() == 0 or mine.device.type == "cuda":
        return False
    if mine.dtype == ref.dtype:
        return True
    return float_dtype is not None and mine.is_floating_point() and ref.dtype == float_dtype


def mutation_finding(where: str) -> Any:
    """A failing `weights_mutation` finding where the candidate changed shared weights (now or at an earlier
    check), else None."""
    from cudaforge.engine.integrity.registry import finding

    if SHARED.found is not None:
        return SHARED.found
    names = SHARED.changed()
    if not names:
        return None
    SHARED.found = finding("weights_mutation", f"during {where} the candidate changed weights it shares with the "
                   f"reference: {', '.join(names[:5])}" + (f" and {len(names) - 5} more" if len(names) > 5 else ""),
                   {"tensors": names[:20], "where": where})
    return SHARED.found
