"""Extracting one ModelNew module, or one JSON object, from free-form model replies."""

from __future__ import annotations

from cudaforge.engine.agents import code_blocks, extract_json_object, extract_module, extract_module_detailed

MODULE = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x
"""

SKETCH = """class ModelNew(nn.Module):
    ...  # sketch only
    def forward(self, x):
        return helper(x
"""


def test_single_python_fence() -> None:
    text = f"I replaced the op with a kernel.\n\n```python\n{MODULE}```\nThat is all."
    assert extract_module(text) == MODULE


def test_language_tags_and_tilde_fences() -> None:
    for opener in ("```py", "```Python", "``` python", "~~~python", "```", "````python"):
        closer = opener.strip()[0] * (4 if opener.startswith("````") else 3)
        text = f"Here:\n{opener}\n{MODULE}{closer}\n"
        assert extract_module(text) == MODULE, opener


def test_several_fences_pick_the_one_defining_modelnew() -> None:
    cuda = "```cuda\n__global__ void k(float* x) { }\n```\n"
    usage = "```bash\npython run.py\n```\n"
    text = f"The kernel:\n{cuda}And the module:\n```python\n{MODULE}```\nRun it with\n{usage}"
    assert extract_module(text) == MODULE


def test_last_parsing_module_wins_over_an_earlier_sketch() -> None:
    text = f"Sketch:\n```python\n{SKETCH}```\nFull module:\n```python\n{MODULE}```\n"
    assert extract_module(text) == MODULE
    # ...and an earlier complete module beats a later broken one.
    text = f"```python\n{MODULE}```\nor maybe\n```python\n{SKETCH}```\n"
    assert extract_module(text) == MODULE


def test_unterminated_fence() -> None:
    text = f"Here you go:\n```python\n{MODULE}"
    assert extract_module(text) == MODULE


def test_no_fence_at_all() -> None:
    assert extract_module(MODULE) == MODULE
    text = f"Sure! Here is the module.\n\n{MODULE}\nThis should be faster because it fuses the ops."
    assert extract_module(text) == MODULE


def test_reasons_when_there_is_no_usable_module() -> None:
    assert extract_module_detailed("").reason == "the reply was empty"
    assert extract_module_detailed("I would use shared memory.").reason == "the reply contains no code"
    assert (
        extract_module_detailed("```python\nprint(1)\n```").reason == "no code block defines `class ModelNew`"
    )
    broken = extract_module_detailed(f"```python\n{SKETCH}```")
    assert broken.source is None and "syntax error at line" in broken.reason
    cut = extract_module_detailed(f"```python\n{SKETCH}")
    assert cut.reason.startswith("the code block was not closed and the module has a Python syntax error")


def test_modelnew_must_be_top_level() -> None:
    nested = "```python\ndef make():\n    class ModelNew:\n        pass\n```"
    # The regex needs `class ModelNew` at line start, so an indented one is not a candidate.
    assert extract_module(nested) is None


def test_code_blocks_reports_closed_state() -> None:
    blocks = code_blocks("```json\n{}\n```\n```python\nx = 1\n")
    assert [(b.info, b.closed) for b in blocks] == [("json", True), ("python", False)]


def test_nested_fence_text_inside_a_string_does_not_end_the_block() -> None:
    module = 'DOC = """\n```python\nnot a fence end\n"""\n' + MODULE
    # An inner opening fence with an info string is content, not a close.
    text = f"````python\n{module}````\n"
    assert extract_module(text) == module


def test_extract_json_object_variants() -> None:
    assert extract_json_object('{"a": 1}') == ({"a": 1}, "")
    assert extract_json_object('```json\n{"a": 1}\n```') == ({"a": 1}, "")
    assert extract_json_object('Here is my verdict: {"a": {"b": 2}} Hope it helps.') == ({"a": {"b": 2}}, "")
    data, why = extract_json_object('{"a": 1,')
    assert data is None and why.startswith("the JSON does not parse")
    data, why = extract_json_object("[1, 2]")
    assert data is None and "not an object" in why
    assert extract_json_object("no json here") == (None, "the reply contains no JSON object")
