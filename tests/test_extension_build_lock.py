"""A killed extension build does not hang the next one (engine/worker/harness.py `one_builder`).

torch.utils.cpp_extension guards a build directory with a lock file (FileBaton) that a builder killed with
SIGKILL leaves behind; every later load_inline of that extension then waited for it for ever. In the CI a
batch driver killed during a round's build made its resume, and every later test sharing the extension
cache, wait until the run's 90 minutes were gone. Real processes and a real compiler here."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from cudaforge.engine.worker.harness import BUILD_FLOCK, one_builder

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="flock: Linux")

HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from cudaforge.engine.worker.harness import one_builder
    with one_builder(Path(sys.argv[1])):
        Path(sys.argv[2]).write_text("in")
        time.sleep(float(sys.argv[3]))
""")


def test_builders_take_turns_and_a_dead_builders_lock_file_goes(tmp_path: Path) -> None:
    build_dir = tmp_path / "ext-abc"
    build_dir.mkdir()
    (build_dir / "lock").write_text("")  # torch's baton, left by a builder killed mid-build
    flag = tmp_path / "in"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(build_dir), str(flag), "1.0"])
    try:
        end = time.monotonic() + 60
        while not flag.exists():
            assert time.monotonic() < end and holder.poll() is None, "the first builder never got in"
            time.sleep(0.01)
        assert not (build_dir / "lock").exists()  # stale: no live builder of ours was in the directory
        asked = time.monotonic()
        with one_builder(build_dir):  # waits for the live one, however long it builds
            waited = time.monotonic() - asked
        assert holder.wait(60) == 0
        assert waited >= 0.5, waited
    finally:
        if holder.poll() is None:
            holder.kill()
    assert (build_dir / BUILD_FLOCK).exists()


def test_load_inline_builds_past_a_lock_file_a_killed_build_left(tmp_path: Path) -> None:
    """The recorder's load_inline (what a candidate calls), in a fresh process, with torch's lock file already
    in the extension's build directory: it builds and runs (it waited for ever before)."""
    script = textwrap.dedent("""
        import sys
        from pathlib import Path
        import torch
        import torch.utils.cpp_extension as cpp_ext
        from cudaforge.engine.worker.harness import BuildRecorder

        recorder = BuildRecorder(Path(sys.argv[1]))
        recorder.install()
        source = "int twice(int x) { return 2 * x; }"
        build_dir = recorder.build_dir_for("cf_lock_test", source, None, (), {"functions": ["twice"]})
        build_dir.mkdir(parents=True)
        (build_dir / "lock").write_text("")  # a builder of this extension was killed here
        module = cpp_ext.load_inline(name="cf_lock_test", cpp_sources=source, functions=["twice"])
        print(module.twice(21))
    """)
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "extensions")], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "42"
