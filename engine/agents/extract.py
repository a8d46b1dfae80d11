"""Pull one complete `ModelNew` module, or one JSON object, out of a model's free-form reply.

Models wrap code in fences with or without language tags, sometimes several (a sketch, then the
module), sometimes forget to close the last fence, sometimes send bare code. The rule: among the
code blocks, take the last one that defines `class ModelNew` at top level and parses as Python;
failing that, report why, so the Coder can be asked once more with the reason.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any

_FENCE_OPEN = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")
_MODELNEW = re.compile(r"^class[ \t]+ModelNew\b", re.MULTILINE)
_CODE_START = re.compile(r"^(import |from |class |def |@|#|[A-Za-z_][A-Za-z_0-9]*\s*=)")


@dataclass(frozen=True)
class CodeBlock:
    """A fenced block: its info string (language tag) and its text; `closed` False if cut off."""

    info: str
    text: str
    closed: bool


@dataclass(frozen=True)
class Extraction:
    """The module found in a reply, or the reason none was usable (sent back to the Coder)."""

    source: str | None
    reason: str = ""


def code_blocks(text: str) -> list[CodeBlock]:
    """Fenced blocks in order, tolerating ``` or ~~~ fences, any info string and an open last fence."""
    blocks: list[CodeBlock] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = _FENCE_OPEN.match(lines[i])
        if not match:
            i += 1
            continue
        fence = match.group("fence")
        info = match.group("info").strip()
        body: list[str] = []
        i += 1
        closed = False
        while i < len(lines):
            stripped = lines[i].strip()
            if stripped.startswith(fence[0] * len(fence)) and stripped.strip(fence[0]) == "":
                closed = True
                i += 1
                break
            body.append(lines[i])
            i += 1
        blocks.append(CodeBlock(info=info, text="\n".join(body), closed=closed))
    return blocks


def _defines_modelnew(tree: ast.Module) -> bool:
    return any(isinstance(node, ast.ClassDef) and node.name == "ModelNew" for node in tree.body)


def _check(source: str) -> tuple[bool, str]:
    """Whether `source` parses and defines ModelNew at top level; else why not."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return False, f"the module has a Python syntax error at line {exc.lineno}: {exc.msg}"
    if not _defines_modelnew(tree):
        return False, "the code does not define `class ModelNew` at module level"
    return True, ""


def _bare_code(text: str) -> str | None:
    """Code without fences: from the first code-looking line to the end, trimming trailing prose."""
    lines = text.splitlines()
    start = next((n for n, line in enumerate(lines) if _CODE_START.match(line)), None)
    if start is None:
        return None
    body = lines[start:]
    # Drop trailing prose lines one by one until the rest parses (bounded: replies are short).
    for end in range(len(body), 0, -1):
        candidate = "\n".join(body[:end]).rstrip() + "\n"
        if _MODELNEW.search(candidate) and _check(candidate)[0]:
            return candidate
        if len(body) - end > 40:
            break
    return None


def extract_module_detailed(text: str) -> Extraction:
    """The module in `text`, or the reason there is none (for the retry message)."""
    if not text.strip():
        return Extraction(None, "the reply was empty")
    blocks = code_blocks(text)
    with_class = [b for b in blocks if _MODELNEW.search(b.text)]
    for block in reversed(with_class):
        source = block.text.strip("\n") + "\n"
        ok, _ = _check(source)
        if ok:
            return Extraction(source)
    if with_class:
        block = with_class[-1]
        _, why = _check(block.text.strip("\n") + "\n")
        if not block.closed:
            why = f"the code block was not closed and {why}"
        return Extraction(None, why)
    if blocks:
        return Extraction(None, "no code block defines `class ModelNew`")
    if _MODELNEW.search(text):
        bare = _bare_code(text)
        if bare is not None:
            return Extraction(bare)
        return Extraction(None, "the reply mentions `class ModelNew` but holds no module that parses")
    return Extraction(None, "the reply contains no code")


def extract_module(text: str) -> str | None:
    """The complete `ModelNew` module in a reply, or None when there is no usable one."""
    return extract_module_detailed(text).source


def extract_json_object(text: str) -> tuple[dict[str, Any] | None, str]:
    """The JSON object in a reply (bare, fenced, or surrounded by prose), or None and why."""
    candidates: list[str] = [b.text for b in code_blocks(text) if b.text.strip().startswith("{")]
    stripped = text.strip()
    candidates.append(stripped)
    first, last = stripped.find("{"), stripped.rfind("}")
    if first != -1:  # an unclosed object still gets parsed, so the error says where it broke
        candidates.append(stripped[first : last + 1] if last > first else stripped[first:])
    error = "the reply contains no JSON object"
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError as exc:
            if candidate.lstrip().startswith("{"):
                error = f"the JSON does not parse: {exc.msg} at line {exc.lineno} column {exc.colno}"
            continue
        if isinstance(value, dict):
            return value, ""
        error = f"the reply is JSON but a {type(value).__name__}, not an object"
    return None, error
