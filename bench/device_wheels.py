"""Fill `.whl/` with the wheels that the GPU machine lacks, at the versions installed here.

The GPU machine has PyTorch but not the workbench's own needs (textual, openai, anthropic, tomlkit, pydantic) and
cannot reach a package index; bench/gpu_check.sh installs `.whl/*.whl` there for the steps that drive a session
or the workbench. This resolves those packages' requirement closure from the distributions installed in this
interpreter (so the GPU run uses the versions CI tested), then downloads each as a CPython 3.12 x86-64 wheel.

    .venv/bin/python bench/device_wheels.py             # download into .whl/
    .venv/bin/python bench/device_wheels.py --list      # only print name==version, one a line

Run it with the interpreter that has the workbench installed (`.venv`, after scripts/setup.sh).

Add `/.whl/` to `.git/info/exclude` and name `.whl` in the device call's carry.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import subprocess
import sys
from pathlib import Path

try:
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
except ImportError:  # pip vendors the same library
    from pip._vendor.packaging.markers import default_environment  # type: ignore[no-redef]
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]
    from pip._vendor.packaging.utils import canonicalize_name  # type: ignore[no-redef]

ROOTS = ("textual", "openai", "anthropic", "tomlkit", "pydantic")
PYTHON = "3.12"  # the GPU machine's
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")


def target_environment(python: str = PYTHON) -> dict[str, str]:
    """Marker values of the GPU machine (Linux x86-64, CPython `python`), not of this one."""
    env = dict(default_environment())
    env.update(python_version=python, python_full_version=f"{python}.0", sys_platform="linux",
               platform_system="Linux", platform_machine="x86_64", os_name="posix",
               implementation_name="cpython", platform_python_implementation="CPython", extra="")
    return env


def closure(roots: tuple[str, ...] = ROOTS, python: str = PYTHON) -> dict[str, str]:
    """Every distribution the roots need on the target: canonical name -> installed version. Extras count only
    where a requirement asks for them (textual's `markdown-it-py[linkify]` brings linkify-it-py). A requirement
    that is not installed here is an error: its version would be a guess."""
    env = target_environment(python)
    found: dict[str, str] = {}
    seen: set[tuple[str, str]] = set()  # (distribution, extra) pairs whose requirements were read; "" = none
    todo: list[tuple[str, str]] = [(root, "") for root in roots]
    while todo:
        raw, extra = todo.pop()
        name = canonicalize_name(raw)
        if (name, extra) in seen:
            continue
        seen.add((name, extra))
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            raise SystemExit(f"device_wheels: {name} is needed but not installed in {sys.executable}") from None
        found[name] = dist.version
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({**env, "extra": extra}):
                todo.append((req.name, ""))
                todo.extend((req.name, wanted) for wanted in sorted(req.extras))
    return dict(sorted(found.items()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dest", default=".whl", help="where the wheels go (.whl)")
    ap.add_argument("--list", action="store_true", help="print the pins only, download nothing")
    args = ap.parse_args(argv)
    pins = [f"{name}=={version}" for name, version in closure().items()]
    if args.list:
        print("\n".join(pins))
        return 0
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
           PYTHON, "--implementation", "cp", *platforms, "-d", args.dest, *pins]
    rc = subprocess.run(cmd).returncode
    if rc != 0:
        print(f"device_wheels: pip download failed (exit {rc}) for {len(pins)} pins", file=sys.stderr)
        return rc
    print(f"{len(pins)} wheels in {Path(args.dest).resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
