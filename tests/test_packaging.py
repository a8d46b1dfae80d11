"""Every Python package folder under engine/ and tui/ is listed in pyproject.toml, so a regular
(non-editable) install ships it: a missing entry installs fine and then fails at import."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_folder_is_packaged() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    setup = meta["tool"]["setuptools"]
    listed = set(setup["packages"])
    dirs = {name: Path(path) for name, path in setup["package-dir"].items()}
    for top, name in (("engine", "cudaforge.engine"), ("tui", "cudaforge.tui")):
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top)
            package = ".".join([name, *rel.parts]) if rel.parts else name
            assert package in listed, f"{package} ({init.parent}) is missing from [tool.setuptools] packages"
            assert dirs.get(package) == init.parent.relative_to(ROOT), f"{package} has no package-dir mapping"
    data = setup["package-data"]
    assert "*.tcss" in data["cudaforge.tui"]
