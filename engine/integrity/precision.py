"""`precision_flags`: the backend numerics flags, read before and after every candidate call (its import and
construction included) and restored when a call changed them.

The static check (static.py, `precision_downgrade`) sees only direct writes in the source; a candidate can
reach the same flags through `importlib`, `getattr` chains, `sys.modules` or C++. What a call changed is
what matters, whatever the route, so the worker compares the flags themselves. The objects that hold the
flags are looked up once, before the candidate is imported (`capture`), so replacing
`torch.backends.cuda.matmul` later does not hide a change. torch is imported lazily (the app imports this
package without it).
"""

from __future__ import annotations

import contextlib
import importlib
import warnings
from collections.abc import Iterator
from typing import Any

from cudaforge.engine.integrity.registry import finding
from cudaforge.engine.results import Finding

# (object path, attribute), guarded: a torch without one of them skips it. The legacy booleans first, the
# fp32_precision strings of torch >= 2.9 last (restore sets them in this order: a legacy setter rewrites the
# new strings, never the other way round).
FLAGS: tuple[tuple[str, str], ...] = (
    ("torch.backends.cuda.matmul", "allow_tf32"),
    ("torch.backends.cudnn", "allow_tf32"),
    ("torch.backends.cuda.matmul", "allow_fp16_reduced_precision_reduction"),
    ("torch.backends.cuda.matmul", "allow_fp16_reduced_precision_reduction_split_k"),
    ("torch.backends.cuda.matmul", "allow_bf16_reduced_precision_reduction"),
    ("torch.backends.cuda.matmul", "allow_bf16_reduced_precision_reduction_split_k"),
    ("torch.backends.cuda.matmul", "allow_fp16_accumulation"),
    ("torch.backends", "fp32_precision"),
    ("torch.backends.cuda.matmul", "fp32_precision"),
    ("torch.backends.cudnn", "fp32_precision"),
    ("torch.backends.cudnn.conv", "fp32_precision"),
    ("torch.backends.cudnn.rnn", "fp32_precision"),
    ("torch.backends.mkldnn", "fp32_precision"),
    ("torch.backends.mkldnn.matmul", "fp32_precision"),
    ("torch.backends.mkldnn.conv", "fp32_precision"),
    ("torch.backends.mkldnn.rnn", "fp32_precision"),
)
# Flags read and set through functions: name -> (getter path, setter path).
FUNCTIONS: dict[str, tuple[str, str]] = {
    "torch.get_float32_matmul_precision()": ("torch.get_float32_matmul_precision", "torch.set_float32_matmul_precision"),
    "torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()": (
        "torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed",
        "torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp"),
}
_UNREADABLE = "<unreadable>"


def _resolve(path: str) -> Any:
    parts = path.split(".")
    obj: Any = importlib.import_module(parts[0])
    for part in parts[1:]:
        obj = getattr(obj, part)
    return obj


class PrecisionWatch:
    """Reads the flags around candidate calls, records what a call changed and puts the flags back."""

    def __init__(self) -> None:
        self.objects: dict[str, Any] = {}
        self.functions: dict[str, tuple[Any, Any]] = {}
        self.changes: list[dict[str, Any]] = []
        self.calls_changed = 0
        self._before: dict[str, Any] | None = None

    def capture(self) -> None:
        """Look the flag holders up now, before any candidate code runs."""
        for path, _ in FLAGS:
            with contextlib.suppress(Exception):
                self.objects.setdefault(path, _resolve(path))
        for name, (getter, setter) in FUNCTIONS.items():
            with contextlib.suppress(Exception):
                self.functions[name] = (_resolve(getter), _resolve(setter))

    def snapshot(self) -> dict[str, Any]:
        """flag -> value (the legacy getters warn about mixed legacy/new settings: that is no change)."""
        if not self.objects:
            self.capture()
        out: dict[str, Any] = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for path, attr in FLAGS:
                holder = self.objects.get(path)
                if holder is None:
                    continue
                try:
                    out[f"{path}.{attr}"] = getattr(holder, attr)
                except Exception:
                    out[f"{path}.{attr}"] = _UNREADABLE
            for name, (getter, _) in self.functions.items():
                try:
                    out[name] = getter()
                except Exception:
                    out[name] = _UNREADABLE
        return out

    def restore(self, before: dict[str, Any]) -> None:
        """Set every flag that differs from `before` back (a few passes: one setter can move another flag)."""
        for _ in range(3):
            now = self.snapshot()
            changed = [k for k, v in before.items() if now.get(k) != v and v != _UNREADABLE]
            if not changed:
                return
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for key in changed:
                    with contextlib.suppress(Exception):
                        if key in self.functions:
                            self.functions[key][1](before[key])
                        else:
                            path, attr = key.rsplit(".", 1)
                            setattr(self.objects[path], attr, before[key])

    def check(self, before: dict[str, Any], where: str) -> None:
        """Compare with `before`; record and undo a change."""
        after = self.snapshot()
        changed = [{"where": where, "flag": k, "before": v, "after": after.get(k)}
                   for k, v in before.items() if after.get(k) != v]
        if changed:
            self.calls_changed += 1
            if len(self.changes) < 20:
                self.changes.extend(changed[: 20 - len(self.changes)])
            self.restore(before)

    @contextlib.contextmanager
    def call(self, where: str) -> Iterator[None]:
        """Around one candidate call (or its import and construction)."""
        before = self.snapshot()
        try:
            yield
        finally:
            self.check(before, where)

    # Hooks for timing.Timer (outside the timed windows): only the candidate's calls are watched.
    def before(self, name: str) -> None:
        if name == "candidate":
            self._before = self.snapshot()

    def after(self, name: str, out: Any = None) -> None:
        if name == "candidate" and self._before is not None:
            before, self._before = self._before, None
            self.check(before, "a timed call")

    def findings(self) -> list[Finding]:
        if not self.changes:
            return []
        first = self.changes[0]
        return [finding("precision_flags",
                        f"{first['where']} changed {first['flag']} from {first['before']!r} to {first['after']!r} "
                        f"({self.calls_changed} call(s) changed the numerics flags; restored after each)",
                        {"changes": self.changes, "calls": self.calls_changed})]
