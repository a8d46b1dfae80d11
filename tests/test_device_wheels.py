"""bench/device_wheels.py: the wheels carried to the GPU machine are the installed closure of the workbench's
needs, marker-evaluated for that machine (CPython 3.12, Linux x86-64), with an extra only where a requirement
asks for it. No download here."""

from __future__ import annotations

import importlib.metadata as md
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from device_wheels import ROOTS, closure, main  # noqa: E402


def test_the_closure_pins_every_needed_distribution_at_its_installed_version() -> None:
    pins = closure()
    for root in ROOTS:
        assert pins[root] == md.version(root)
    # pydantic's compiled core and textual's parser come along: the GPU steps import them through the roots.
    assert pins["pydantic-core"] == md.version("pydantic-core")
    assert pins["markdown-it-py"] == md.version("markdown-it-py")
    assert all(name == name.lower() for name in pins)


def test_an_extra_counts_only_where_a_requirement_asks_for_it() -> None:
    """textual asks for `markdown-it-py[linkify]`, so linkify-it-py comes along; its own optional `syntax` extra
    (tree-sitter) is asked for by nobody and stays out, and so does pytest."""
    pins = closure(("textual",))
    assert pins["linkify-it-py"] == md.version("linkify-it-py")
    assert not any(name.startswith("tree-sitter") for name in pins)
    assert "pytest" not in pins


def test_a_requirement_that_is_not_installed_is_named() -> None:
    with pytest.raises(SystemExit, match="no-such-distribution-here is needed but not installed"):
        closure(("no-such-distribution-here",))


def test_list_prints_the_pins(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["--list"]) == 0
    lines = capsys.readouterr().out.split()
    assert f"pydantic=={md.version('pydantic')}" in lines and len(lines) == len(closure())


def test_gpu_check_imports_exactly_the_roots_it_is_sent_wheels_for() -> None:
    """gpu_check.sh (shell, on the GPU machine) tests for the packages whose wheels this script fills .whl/ with;
    the two lists cannot share code, so a change to one without the other fails here."""
    script = (Path(__file__).resolve().parent.parent / "bench" / "gpu_check.sh").read_text()
    lines = [line for line in script.splitlines() if line.startswith("SESSION_IMPORTS=")]
    assert len(lines) == 1, lines
    imported = lines[0].split('"')[1].removeprefix("import ").split(", ")
    assert sorted(imported) == sorted(ROOTS)
