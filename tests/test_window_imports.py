"""Nothing the checks do inside a timed window may import a module tree: an import there holds the GPU
alone with the GPU idle. torch.unravel_index's argument check imported torch.fx.experimental.symbolic_shapes
(sympy and more): 1.8 s of every cuDNN problem's window in the H200 sweep, found by the stack samples
(engine/worker/stack_samples.py), which these tests also cover."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from cudaforge.engine import observe
from cudaforge.engine.worker import stack_samples

HEAVY = ("torch.fx.experimental.symbolic_shapes", "sympy", "torch._dynamo", "torch._inductor")


def test_a_failing_compare_in_a_fresh_process_imports_no_module_tree() -> None:
    """The worst elements of a compare (their coordinates, in a transposed layout too) come from plain
    arithmetic, in a process where nothing had imported the heavy modules before."""
    code = textwrap.dedent(f"""
        import sys, json, torch
        from cudaforge.engine.worker.compare import compare_output
        before = set(sys.modules)
        e = torch.randn(6, 5, 4)
        g = (e + 1e-3 * torch.randn(6, 5, 4)).transpose(0, 2).contiguous().transpose(0, 2)
        check = compare_output(0, e, g, 1e-6, 1e-6)
        assert not check.passed and check.worst, check
        for w in check.worst:
            assert abs(float(e[w.index]) - w.expected) < 1e-6 and abs(float(g[w.index]) - w.got) < 1e-6
        print(json.dumps(sorted(m for m in set(sys.modules) - before if m.startswith({HEAVY!r}))))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


@pytest.mark.parametrize("shape,order", [((7,), (0,)), ((3, 4), (1, 0)), ((2, 3, 5), (2, 0, 1)),
                                         ((4, 1, 3, 2), (3, 1, 0, 2)), ((3, 0, 2), (0, 1, 2))])
def test_coordinates_match_unravel_index(shape: tuple[int, ...], order: tuple[int, ...]) -> None:
    n = 1
    for s in shape:
        n *= s
    flat = list(range(0, n, max(1, n // 9)))
    permuted = [shape[d] for d in order]
    if flat:
        rows = torch.stack(torch.unravel_index(torch.tensor(flat), permuted), dim=1).tolist()
        expected = [tuple(int(c[order.index(d)]) for d in range(len(order))) for c in rows]
    else:
        expected = []
    assert observe.coordinates(flat, shape, order) == expected


def test_the_sampler_folds_an_import_into_the_module_and_the_line_that_imported_it(tmp_path: Path) -> None:
    """A fresh module imported while sampling shows as `import:<name>` beside the line that imported it."""
    pkg = tmp_path / "slow_module_for_samples.py"
    pkg.write_text("import time\nstart = time.perf_counter()\nwhile time.perf_counter() - start < 0.3:\n    pass\n")
    code = textwrap.dedent(f"""
        import os, sys, json
        sys.path.insert(0, {str(tmp_path)!r})
        os.environ[{stack_samples.ENV!r}] = {str(tmp_path / 'out')!r}
        from cudaforge.engine.worker import stack_samples
        from cudaforge.engine.worker.harness import phase
        phase("timing")
        assert stack_samples.start()
        import slow_module_for_samples
        stack_samples.write()
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    [written] = list((tmp_path / "out").glob("stacks-*.json"))
    groups = json.loads(written.read_text())["groups"]
    timing = next(g for g in groups if g["step"] == "timing" and g["hold"] == "none")
    assert timing["seconds"] >= 0.25
    top = timing["stacks"][0]["stack"].split(" <- ")
    assert "import:slow_module_for_samples" in top
    assert top[top.index("import:slow_module_for_samples") + 1].startswith("<module>@<string>:")


def test_summary_groups_by_step_and_hold_longest_first() -> None:
    seconds = collections.Counter({("timing.events", "write", "a"): 0.3, ("timing.events", "write", "b"): 0.1,
                                   ("correctness", "read", "c"): 0.2})
    groups = stack_samples.summary(seconds)
    assert [(g["step"], g["hold"], g["seconds"]) for g in groups] == [("timing.events", "write", 0.4),
                                                                       ("correctness", "read", 0.2)]
    assert [s["stack"] for s in groups[0]["stacks"]] == ["a", "b"]


def test_the_spares_warm_up_of_the_checks_runs_every_primitive_and_imports_no_module_tree() -> None:
    """pipeline.warm_check_steps (a spare's read turns, one per step) on the CPU device, in a fresh process:
    every primitive they name runs, in order (a renamed one would fail here, not silently in the spare, which
    suppresses a step's error), and none imports a module tree."""
    code = textwrap.dedent(f"""
        import sys, json, torch
        from cudaforge.engine.worker import pipeline
        before = set(sys.modules)
        for step in pipeline.warm_check_steps(torch.device("cpu")):
            step()
        print(json.dumps(sorted(m for m in set(sys.modules) - before if m.startswith({HEAVY!r}))))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


@pytest.mark.gpu
def test_after_the_spares_warm_up_a_tasks_first_matmul_and_convolution_load_no_library() -> None:
    """The warm-up's `blas` and `cudnn` steps load cuBLAS, cuBLASLt and cuDNN and make their handles, in a fresh
    process: a task's first linear layer and convolution afterwards (other shapes) map no further cuBLAS or
    cuDNN library, so the reference's first call under a read hold no longer pays for them."""
    code = textwrap.dedent("""
        import json, torch
        from cudaforge.engine.worker import pipeline

        def libs():
            with open("/proc/self/maps") as fh:
                return sorted({line.split("/")[-1].strip() for line in fh if "libcudnn" in line or "libcublas" in line})

        device = torch.device("cuda", 0)
        before = libs()
        for step in pipeline.warm_check_steps(device):
            step()
        warmed = libs()
        left = torch.cuda.memory_allocated(device)  # the last step frees what the others allocated
        x = torch.randn(4, 3, 32, 32, device=device)
        conv = torch.nn.Conv2d(3, 16, 5, padding=2).to(device)
        lin = torch.nn.Linear(16 * 32 * 32, 10).to(device)
        with torch.no_grad():
            lin(conv(x).flatten(1))
        torch.cuda.synchronize()
        print(json.dumps({"before": before, "warmed": warmed, "after": libs(), "left": left}))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    loaded = set(seen["warmed"]) - set(seen["before"])  # cuDNN 9's sub-libraries (their split varies by release)
    assert seen["left"] == 0 and any(name.startswith("libcudnn_") for name in loaded), seen
    assert any(name.startswith("libcublasLt") for name in seen["warmed"]), seen
    assert set(seen["after"]) <= set(seen["warmed"]), seen
