"""Unit tests of the static integrity checks (engine/integrity/static.py: source_findings) on small sources."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from adversarial_kit import ADV, candidate_source
from cudaforge.engine.integrity.registry import REGISTRY
from cudaforge.engine.integrity.static import source_findings
from cudaforge.engine.results import Finding

REPO = Path(__file__).resolve().parent.parent
FP32_TASK = textwrap.dedent("""
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def forward(self, x):
            return torch.relu(x)

    def get_inputs():
        return [torch.randn(4, 4)]

    def get_init_inputs():
        return []
""")
FP16_TASK = FP32_TASK.replace("torch.randn(4, 4)", "torch.randn(4, 4, dtype=torch.float16)")

HEADER = "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n_ext = None\n"


def check(body: str, task: str = FP32_TASK, **kwargs: str) -> dict[str, Finding]:
    source = HEADER + textwrap.dedent(body)
    return {f.name: f for f in source_findings(source, task, **kwargs)}


def lines_of(finding: Finding) -> list[int]:
    return [loc["line"] for loc in finding.evidence["locations"]]


def constructs(finding: Finding) -> str:
    return " | ".join(loc["construct"] for loc in finding.evidence["locations"])


# ------------------------------------------------------------------ pytorch_fallback


def test_fallback_in_except_handler_is_found_with_line_and_snippet() -> None:
    found = check("""
        class ModelNew(nn.Module):
            def forward(self, x):
                try:
                    return _ext.op(x)
                except RuntimeError:
                    return torch.relu(x)
    """)
    f = found["pytorch_fallback"]
    assert f.severity == "fail"
    assert lines_of(f) == [10]  # the `except` line (4 header lines + blank + 5)
    assert f.evidence["locations"][0]["snippet"] == "except RuntimeError:"
    assert "torch.relu" in constructs(f)


def test_fallback_through_a_helper_function_and_tensor_methods() -> None:
    found = check("""
        def slow_path(x):
            return x.clamp(min=0)

        def run(x):
            try:
                return _ext.op(x)
            except Exception:
                return slow_path(x)

        class ModelNew(nn.Module):
            def forward(self, x):
                return run(x)
    """)
    assert "slow_path()" in constructs(found["pytorch_fallback"])


def test_handlers_that_reraise_or_retry_a_kernel_are_not_fallbacks() -> None:
    found = check("""
        try:
            import numpy  # module level, outside ModelNew's code path
        except ImportError:
            numpy = torch.zeros(1)

        class ModelNew(nn.Module):
            def forward(self, x):
                try:
                    return _ext.fast(x)
                except RuntimeError:
                    try:
                        return _ext.safe(x)
                    except RuntimeError as exc:
                        raise ValueError("kernel failed") from exc
    """)
    assert "pytorch_fallback" not in found


def test_super_forward_in_handler_is_a_fallback() -> None:
    found = check("""
        class ModelNew(nn.Module):
            def forward(self, x):
                try:
                    return _ext.op(x)
                except Exception:
                    return super().forward(x)
    """)
    assert "pytorch_fallback" in found


# ------------------------------------------------------------------ calls_reference


@pytest.mark.parametrize("body, construct", [
    ("from cudaforge_task import Model\nclass ModelNew(Model):\n    pass\n", "class ModelNew(Model)"),
    ("from task import Model\nclass ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.ref = Model()\n", "Model(...)"),
    ("import sys\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
     "        return sys.modules['cudaforge_task'].Model()(x)\n", "sys.modules[task module]"),
    ("import importlib\nref = importlib.import_module('task')\nclass ModelNew(nn.Module):\n    pass\n",
     "importlib.import_module(...task...)"),
    ("import task\nclass ModelNew(nn.Module):\n    pass\n", "import task"),
])
def test_reference_use_is_found(body: str, construct: str) -> None:
    f = check(body)["calls_reference"]
    assert f.severity == "fail"
    assert construct in constructs(f)


def test_own_class_named_model_is_not_the_reference() -> None:
    found = check("""
        class Model(nn.Module):
            def forward(self, x):
                return _ext.op(x)

        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = Model()

            def forward(self, x):
                return self.inner(x)
    """)
    assert "calls_reference" not in found


# ------------------------------------------------------------------ threads_or_processes


@pytest.mark.parametrize("body, construct", [
    ("import threading\n", "import threading"),
    ("from concurrent.futures import ThreadPoolExecutor\n", "from concurrent.futures import"),
    ("import multiprocessing as mp\n", "import multiprocessing"),
    ("import os\npid = os.fork()\n", "os.fork()"),
    ("from os import fork\n", "from os import fork"),
    ("import subprocess\n", "import subprocess"),
    ("SRC = '''\n#include <thread>\nvoid f() { std::thread t(g); t.detach(); }\n'''\n", "std::thread"),
])
def test_threads_and_processes_are_found(body: str, construct: str) -> None:
    f = check(body + "class ModelNew(nn.Module):\n    pass\n")["threads_or_processes"]
    assert f.severity == "fail" and construct in constructs(f)


def test_torch_intra_op_threads_are_not_flagged() -> None:
    assert "threads_or_processes" not in check("torch.set_num_threads(2)\nclass ModelNew(nn.Module):\n    pass\n")


# ------------------------------------------------------------------ side_stream


@pytest.mark.parametrize("body, construct", [
    ("s = torch.cuda.Stream()\n", "torch.cuda.Stream"),
    ("def f(s):\n    with torch.cuda.stream(s):\n        pass\n", "torch.cuda.stream"),
    ("SRC = r'''\ncudaStream_t s;\ncudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);\n'''\n",
     "cudaStreamCreateWithFlags"),
    ("SRC = '''\nauto s = at::cuda::getStreamFromPool();\n'''\n", "getStreamFromPool"),
])
def test_side_streams_warn(body: str, construct: str) -> None:
    f = check(body + "class ModelNew(nn.Module):\n    pass\n")["side_stream"]
    assert f.severity == "warn" and construct in constructs(f)


def test_current_stream_is_fine_and_cuda_line_numbers_point_into_the_string() -> None:
    found = check("""
        SRC = r'''
        cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
        // cudaStreamCreate would be wrong here (a comment does not count)
        kernel<<<1, 1, 0, stream>>>();
        auto side = c10::cuda::getStreamFromPool();
        '''
        class ModelNew(nn.Module):
            pass
    """)
    f = found["side_stream"]
    assert lines_of(f) == [10]
    assert "getStreamFromPool" in f.evidence["locations"][0]["snippet"]


# ------------------------------------------------------------------ harness_patching


@pytest.mark.parametrize("body, construct", [
    ("import time\ntime.perf_counter = lambda: 0.0\n", "time.perf_counter"),
    ("import time as t\nt.time = lambda: 0.0\n", "time.time"),
    ("torch.cuda.synchronize = lambda *a: None\n", "torch.cuda.synchronize"),
    ("torch.cuda.Event.elapsed_time = lambda self, other: 0.001\n", "torch.cuda.Event.elapsed_time"),
    ("from torch.cuda import Event\nEvent.record = lambda self, s=None: None\n", "torch.cuda.Event.record"),
    ("torch.Tensor.__eq__ = lambda a, b: True\n", "torch.Tensor.__eq__"),
    ("torch.allclose = lambda *a, **k: True\n", "torch.allclose"),
    ("import builtins\nbuiltins.print = lambda *a: None\n", "builtins.print"),
    ("import sys\nsys.modules['time'] = object()\n", "sys.modules[...]"),
    ("import time\nsetattr(time, 'perf_counter', lambda: 0.0)\n", "setattr(time"),
    ("import cudaforge.engine.integrity as integ\ninteg.source_findings = lambda *a, **k: []\n",
     "cudaforge.engine.integrity.source_findings"),
])
def test_patching_the_harness_is_found(body: str, construct: str) -> None:
    f = check(body + "class ModelNew(nn.Module):\n    pass\n")["harness_patching"]
    assert f.severity == "fail" and construct in constructs(f)


def test_configuration_and_own_attributes_are_not_patching() -> None:
    found = check("""
        import os
        torch.backends.cudnn.benchmark = True
        os.environ["CUDA_LAUNCH_BLOCKING"] = "0"

        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.scale = 2.0
                ModelNew.cached = None
    """)
    assert "harness_patching" not in found


# ------------------------------------------------------------------ harness_introspection


@pytest.mark.parametrize("body, construct", [
    ("import sys\ndef f():\n    return sys._getframe(2).f_locals['expected']\n", "sys._getframe()"),
    ("import gc\nobjs = gc.get_objects()\n", "gc.get_objects()"),
    ("import inspect\ndef f():\n    return inspect.stack()[1]\n", "inspect.stack()"),
])
def test_introspection_is_found(body: str, construct: str) -> None:
    f = check(body + "class ModelNew(nn.Module):\n    pass\n")["harness_introspection"]
    assert construct in constructs(f)


# ------------------------------------------------------------------ tensor_subclass


@pytest.mark.parametrize("body, construct", [
    ("class Lazy(torch.Tensor):\n    pass\n", "class Lazy(torch.Tensor)"),
    ("class W:\n    @classmethod\n    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
     "        return func(*args)\n", "def __torch_function__"),
    ("def f(y):\n    return y.as_subclass(object)\n", "as_subclass"),
    ("from torch.utils._python_dispatch import TorchDispatchMode\nclass M(TorchDispatchMode):\n    pass\n",
     "class M(TorchDispatchMode)"),
])
def test_tensor_subclasses_are_found(body: str, construct: str) -> None:
    f = check(body + "class ModelNew(nn.Module):\n    pass\n")["tensor_subclass"]
    assert f.severity == "fail" and construct in constructs(f)


# ------------------------------------------------------------------ result_cache


@pytest.mark.parametrize("body", [
    # pointer key, instance cache
    """
    class ModelNew(nn.Module):
        def __init__(self):
            super().__init__()
            self.cache = {}
        def forward(self, x):
            key = x.data_ptr()
            if key in self.cache:
                return self.cache[key]
            y = _ext.op(x)
            self.cache[key] = y
            return y
    """,
    # id() key, module-level cache
    """
    _SEEN = {}
    class ModelNew(nn.Module):
        def forward(self, x):
            out = _SEEN.get(id(x))
            if out is None:
                out = _ext.op(x)
                _SEEN[id(x)] = out
            return out
    """,
    # shape key
    """
    _BY_SHAPE = {}
    class ModelNew(nn.Module):
        def forward(self, x):
            k = (tuple(x.shape), x.dtype)
            if k not in _BY_SHAPE:
                _BY_SHAPE[k] = _ext.op(x)
            return _BY_SHAPE[k]
    """,
    # memoised helper
    """
    import functools
    @functools.lru_cache(maxsize=None)
    def compute(x):
        return _ext.op(x)
    class ModelNew(nn.Module):
        def forward(self, x):
            return compute(x)
    """,
])
def test_result_caches_are_found(body: str) -> None:
    f = check(body)["result_cache"]
    assert f.severity == "fail" and f.evidence["locations"][0]["line"] > 4


def test_kernel_caches_and_reused_output_buffers_are_not_result_caches() -> None:
    found = check("""
        _KERNELS = {}

        def kernel_for(x):
            key = (x.dtype, tuple(x.shape))
            if key not in _KERNELS:
                _KERNELS[key] = load_inline(name="k", cpp_sources="")
            return _KERNELS[key]

        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.buffers = {}

            def forward(self, x):
                aligned = x.data_ptr() % 16 == 0
                out = self.buffers.get(x.shape)
                if out is None:
                    out = torch.empty_like(x)
                    self.buffers[x.shape] = out
                kernel_for(x).run(x, out, aligned)
                return out
    """)
    # kernel_for returns a compiled kernel from a shape-keyed cache, not ModelNew's output; the shape-keyed
    # output buffer is handed to the kernel before it is returned (written on every call).
    assert "result_cache" not in found


def test_cached_kernels_through_lru_cache_are_fine_but_memoised_outputs_are_not() -> None:
    kernels = check("""
        import functools

        @functools.lru_cache(maxsize=None)
        def kernel_for(dtype, n):
            return load_inline(name="k", cpp_sources="")

        class ModelNew(nn.Module):
            def forward(self, x):
                y = torch.empty_like(x)
                kernel_for(x.dtype, x.numel()).run(x, y)
                return y
    """)
    assert "result_cache" not in kernels
    outputs = check("""
        from functools import cache

        @cache
        def compute(x):
            return _ext.op(x)

        class ModelNew(nn.Module):
            def forward(self, x):
                y = compute(x)
                return y
    """)
    assert "@cache on compute" in constructs(outputs["result_cache"])


def test_output_buffer_pattern_alone_is_clean() -> None:
    found = check("""
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.buffers = {}

            def forward(self, x):
                out = self.buffers.get(x.shape)
                if out is None:
                    out = torch.empty_like(x)
                    self.buffers[x.shape] = out
                _ext.op(x, out)
                return out
    """)
    assert "result_cache" not in found


# ------------------------------------------------------------------ precision_downgrade


@pytest.mark.parametrize("body, construct", [
    ("def f(x):\n    return x.half()\n", ".half()"),
    ("def f(x):\n    return x.to(torch.bfloat16)\n", "torch.bfloat16"),
    ("def f(x):\n    return torch.empty(3, dtype=torch.float16)\n", "torch.float16"),
    ("torch.backends.cuda.matmul.allow_tf32 = True\n", "allow_tf32 = True"),
    ("torch.set_float32_matmul_precision('high')\n", "set_float32_matmul_precision('high')"),
    ("SRC = '''\n#include <cuda_fp16.h>\n__global__ void k(const __half* x) {}\n'''\n", "__half"),
    ("SRC = '''\n__nv_bfloat162 v = __floats2bfloat162_rn(a, b);\n'''\n", "__nv_bfloat162"),
])
def test_precision_downgrade_warns_on_fp32_tasks(body: str, construct: str) -> None:
    f = check(body + "class ModelNew(nn.Module):\n    pass\n")["precision_downgrade"]
    assert f.severity == "warn" and construct in constructs(f)


def test_precision_is_not_a_finding_on_half_tasks_or_half_runs() -> None:
    body = "def f(x):\n    return x.half()\nclass ModelNew(nn.Module):\n    pass\n"
    assert "precision_downgrade" not in check(body, task=FP16_TASK)
    assert "precision_downgrade" not in check(body, precision="fp16")
    assert "precision_downgrade" not in check("torch.set_float32_matmul_precision('highest')\n"
                                              "class ModelNew(nn.Module):\n    pass\n")


# ------------------------------------------------------------------ result_forgery


@pytest.mark.parametrize("body, construct", [
    ("import sys, json\nspec = json.load(open(sys.argv[1]))\n", "sys.argv"),
    ("from sys import argv\nx = argv\n", "sys.argv"),
    ("import os\nopen(os.path.join('..', 'result.json'), 'w')\n", "'result.json'"),
    ("def f(spec):\n    return spec['result_path']\n", "'result_path'"),
])
def test_reaching_for_the_workers_verdict_is_found(body: str, construct: str) -> None:
    f = check(body + "class ModelNew(nn.Module):\n    pass\n")["result_forgery"]
    assert f.severity == "fail" and construct in constructs(f)


# ------------------------------------------------------------------ general


def test_unparsable_source_gives_no_findings() -> None:
    assert source_findings("def broken(:\n", FP32_TASK) == []


def test_every_name_has_a_documented_severity() -> None:
    for f in source_findings(candidate_source("timer_patch.py"), FP32_TASK):
        assert f.name in REGISTRY and f.evidence["count"] >= 1
        assert all({"line", "snippet", "construct"} <= set(loc) for loc in f.evidence["locations"])


HONEST = sorted(
    [p for p in (REPO / "examples").glob("*/*.py") if p.name != "task.py" and p.parent.name != "broken"]
    + [p for p in (REPO / "tests" / "tasks").glob("*/cpu.py")]
    + [REPO / "tests" / "core_tasks" / "correct.py", ADV / "cuda" / "honest.py"]
)


@pytest.mark.parametrize("path", HONEST, ids=lambda p: str(p.relative_to(REPO)))
def test_honest_candidates_have_no_static_findings(path: Path) -> None:
    task = path.parent / "task.py"
    found = source_findings(path.read_text(), task.read_text() if task.exists() else FP32_TASK)
    assert found == [], [(f.name, f.evidence["locations"]) for f in found]


# What the static checks alone say about each adversarial candidate (the runtime checks add the rest).
ADVERSARIAL_STATIC = {
    "honest.py": set(),
    "honest_tiny.py": set(),
    "empty_output.py": set(),
    "cache_pointer.py": {"result_cache"},
    "cache_shape.py": {"result_cache"},
    "cache_evasive.py": set(),  # hides its key from the AST: only the runtime probe sees it
    "mutates_input.py": set(),
    "returns_input_view.py": set(),
    "pure_pytorch.py": set(),
    "try_fallback.py": {"pytorch_fallback"},
    "subclasses_model.py": {"calls_reference"},
    "thread_pool.py": {"threads_or_processes"},
    "timer_patch.py": {"harness_patching"},
    "tensor_subclass.py": {"tensor_subclass"},
    "precision_bf16.py": {"precision_downgrade"},
    "clamped.py": set(),
    "constant_tiny.py": set(),
    "steals_reference.py": {"harness_introspection"},
    "forges_result.py": {"result_forgery"},
    "containment/fork_setsid.py": {"threads_or_processes"},
    "containment/os_exit.py": set(),
    "cuda/side_stream.py": {"side_stream"},
    "cuda/cached_output.py": set(),
    "cuda/never_launched.py": set(),
    "cuda/stale_output.py": set(),
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL_STATIC))
def test_adversarial_candidates_static_findings(name: str) -> None:
    task = ADV / ("tiny_task.py" if "tiny" in name else "task.py")
    found = {f.name for f in source_findings(candidate_source(name), task.read_text())}
    assert found == ADVERSARIAL_STATIC[name]
