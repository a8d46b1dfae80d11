"""The package's import graph: no import cycle anywhere (lazy imports inside functions count too),
and the import-linter contracts of pyproject.toml hold. Both read the graph that grimp builds from
the sources, over a temporary tree linking cudaforge/{engine,tui,profiles} to the checkout (the
editable install's import hook is not a folder grimp can walk)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip("grimp")

GRAPH = textwrap.dedent("""
    import json, grimp
    graph = grimp.build_graph("cudaforge", cache_dir=None)
    print(json.dumps({m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}))
""")


@pytest.fixture(scope="module")
def linked_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("importroot")
    (root / "cudaforge").mkdir()
    for part in ("engine", "tui", "profiles"):
        (root / "cudaforge" / part).symlink_to(ROOT / part)
    yield root


def _strongly_connected(graph: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative: every component of more than one module is a cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph.get(start, ())))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in graph:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph.get(nxt, ()))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_tarjan_finds_a_cycle() -> None:
    assert _strongly_connected({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]
    assert _strongly_connected({"a": ["b"], "b": []}) == []


def test_no_import_cycle(linked_root: Path) -> None:
    out = subprocess.run([sys.executable, "-c", GRAPH], capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(linked_root), "PATH": "/usr/bin:/bin"}, cwd=linked_root)
    assert out.returncode == 0, out.stderr[-2000:]
    graph = json.loads(out.stdout)
    assert any(m.startswith("cudaforge.engine.worker") for m in graph)
    cycles = _strongly_connected(graph)
    assert cycles == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_import_contracts_hold() -> None:
    out = subprocess.run(["bash", str(ROOT / "scripts" / "lint_imports.sh")], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "broken" in out.stdout and " 0 broken" in out.stdout
