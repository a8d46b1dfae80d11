"""The profiler sessions the worker opens (engine/observe.py) record what the checks read and leave
torch._inductor unimported: torch.profiler.profile's start imports it (`hasattr(torch, "_inductor")`), and
torch._dynamo with it (1.7 s on this project's CPU machine; most of a spare's CUPTI step on the H200)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(script: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def test_a_host_session_records_the_ops_and_their_shapes_without_importing_inductor() -> None:
    assert _run("""
        import sys
        import torch
        from cudaforge.engine.observe import host_profile

        x = torch.randn(64, 32)
        with host_profile() as prof:
            torch.mm(x, x.t())
        ops = {e.name: e.input_shapes for e in prof.function_events}
        assert ops.get("aten::mm") == [[64, 32], [32, 64]], ops
        assert prof.kineto_results is not None
        print(sorted(m for m in ("torch._inductor", "torch._dynamo") if m in sys.modules))
    """) == "[]"


def test_the_wrapper_it_replaces_does_import_them() -> None:
    """What the test above guards against, shown on this torch: if a later torch stops importing them, this
    fails and the note in observe.device_profile can go."""
    assert _run("""
        import sys
        import torch
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]):
            pass
        print(sorted(m for m in ("torch._inductor", "torch._dynamo") if m in sys.modules))
    """) == "['torch._dynamo', 'torch._inductor']"
