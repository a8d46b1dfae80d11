"""Candidates: the source of a `ModelNew` module and the format it is written in.

Formats: `nvrtc` (kernels compiled at import by cudaforge.engine.nvrtc), `inline`
(torch.utils.cpp_extension.load_inline with CUDA sources, KernelBench-compatible), `cpu`
(load_inline with C++ sources only), `triton` (kernels written with `@triton.jit`; on `--device cpu`
they run in Triton's interpreter) and `python` (anything else; judged by the integrity rules).
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cudaforge.engine.errors import CandidateError, TaskError
from cudaforge.engine.task import _defined_names, parse_python

CandidateFormat = Literal["nvrtc", "inline", "cpu", "triton", "python"]
FORMATS: tuple[str, ...] = ("nvrtc", "inline", "cpu", "triton", "python")
_TRITON_KERNEL = re.compile(r"@\s*(?:triton\.)?(?:jit|autotune)\b|\btriton\.(?:jit|autotune)\s*\(")
_TRITON_IMPORT = re.compile(r"^\s*(?:import\s+triton\b|from\s+triton\b)", re.MULTILINE)


def detect_format(source: str) -> CandidateFormat:
    """Which build path the source uses, read from what it imports and calls."""
    if re.search(r"cudaforge\.engine\.nvrtc", source):
        return "nvrtc"
    if re.search(r"\bload_inline\s*\(", source):  # before load_kernel: an exported file keeps its calls
        if re.search(r"\bcuda_sources\s*=", source):
            return "inline"
        return "cpu"
    if re.search(r"\bload_kernel\s*\(", source):  # a standalone nvrtc file (helper inlined)
        return "nvrtc"
    if _TRITON_IMPORT.search(source) and _TRITON_KERNEL.search(source):
        return "triton"
    return "python"


@dataclass(frozen=True)
class Candidate:
    source: str
    format: CandidateFormat
    path: Path | None = None

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()

    @classmethod
    def from_source(cls, source: str, *, path: Path | None = None) -> Candidate:
        return cls(source=source, format=detect_format(source), path=path)


def load_candidate(path: str | Path) -> Candidate:
    """Read a candidate file; it must parse and define `class ModelNew` at module level."""
    path = Path(path)
    try:
        source, tree = parse_python(path, "candidate")
    except TaskError as exc:
        raise CandidateError(exc.message) from None
    check_candidate_tree(tree, str(path))
    return Candidate.from_source(source, path=path.resolve())


def check_candidate_source(source: str, label: str = "<candidate>") -> None:
    """Raise CandidateError unless `source` parses and defines ModelNew."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise CandidateError(f"{label}:{exc.lineno}: syntax error in candidate: {exc.msg}") from None
    check_candidate_tree(tree, label)


def check_candidate_tree(tree: ast.Module, label: str) -> None:
    node = _defined_names(tree).get("ModelNew")
    if not isinstance(node, ast.ClassDef):
        raise CandidateError(f"{label}: no `class ModelNew` defined at module level")
