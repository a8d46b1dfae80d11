"""KernelBench-format tasks: a file with `class Model`, `get_inputs()` and `get_init_inputs()`.

The app process validates a task statically (file, syntax, required names) without running it:
task code is executed only inside a worker, which reports dynamic problems (get_inputs raising,
Model not building) as a `task_error` outcome.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass
from pathlib import Path

from cudaforge.engine.errors import TaskError

REQUIRED_FUNCTIONS = ("get_inputs", "get_init_inputs")


@dataclass(frozen=True)
class Task:
    """A loaded task. `path` is the file that is evaluated (imported by the worker and the fit check); on a
    resumed run that is the run folder's copy, and `origin` is the file the run was started from."""

    path: Path
    source: str
    name: str
    constants: tuple[str, ...]
    origin: Path | None = None

    @property
    def shown_path(self) -> Path:
        """The path a person knows the task by: the file the run was started from."""
        return self.origin or self.path

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()


def _defined_names(tree: ast.Module) -> dict[str, ast.AST]:
    names: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = node
    return names


def parse_python(path: Path, kind: str) -> tuple[str, ast.Module]:
    """Read and parse a Python file, turning every failure into a one-line error naming it."""
    error = TaskError if kind == "task" else None
    if not path.exists():
        raise (error or TaskError)(f"{path}: {kind} file not found")
    if path.is_dir():
        raise (error or TaskError)(f"{path}: is a directory, expected a {kind} file")
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"{path}: cannot read {kind} file: {exc}") from None
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise TaskError(f"{path}:{exc.lineno}: syntax error in {kind} file: {exc.msg}") from None
    return source, tree


def load_task(path: str | Path) -> Task:
    """Load and statically validate a KernelBench-format task file."""
    path = Path(path)
    source, tree = parse_python(path, "task")
    names = _defined_names(tree)
    model = names.get("Model")
    if not isinstance(model, ast.ClassDef):
        raise TaskError(f"{path}: no `class Model(nn.Module)` defined at module level")
    for fn in REQUIRED_FUNCTIONS:
        node = names.get(fn)
        if node is None:
            raise TaskError(f"{path}: missing module-level function `{fn}()`")
        if not isinstance(node, (ast.FunctionDef, ast.Assign)):
            raise TaskError(f"{path}:{getattr(node, 'lineno', '?')}: `{fn}` must be a function")
    if not any(isinstance(n, ast.FunctionDef) and n.name == "forward" for n in model.body):
        raise TaskError(f"{path}:{model.lineno}: class Model has no forward() method")
    constants = tuple(
        name
        for name, node in names.items()
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and name.isupper()
    )
    return Task(path=path.resolve(), source=source, name=task_name_of(path), constants=constants)


def task_name_of(path: str | Path) -> str:
    """A task's name: its folder's for a `task.py` (KernelBench-style folders), else the file's stem."""
    path = Path(path)
    return path.parent.name if path.stem == "task" else path.stem
