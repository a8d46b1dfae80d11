"""Export of nvrtc candidates: standalone (helper inlined) and KernelBench inline (load_inline launchers)."""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from cudaforge.engine.candidate import detect_format
from cudaforge.engine.convert import ConversionError, to_inline, to_standalone
from cudaforge.engine.integrity.static import source_findings

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NVRTC = sorted(EXAMPLES.glob("*/nvrtc.py"))
IDS = [p.parent.name for p in NVRTC]


def _imports(tree: ast.Module) -> set[str]:
    mods: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            mods.add(node.module or "")
        elif isinstance(node, ast.Import):
            mods.update(a.name for a in node.names)
    return mods


@pytest.mark.parametrize("path", NVRTC, ids=IDS)
def test_standalone_parses_defines_modelnew_and_imports_no_cudaforge(path: Path) -> None:
    out = to_standalone(path.read_text())
    tree = ast.parse(out)
    assert any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)
    assert not any(m.split(".")[0] == "cudaforge" for m in _imports(tree))
    assert any(isinstance(n, ast.FunctionDef) and n.name == "load_kernel" for n in tree.body)
    assert detect_format(out) == "nvrtc"
    assert source_findings(out, (path.parent / "task.py").read_text()) == []
    assert out.index("from __future__ import annotations") < out.index("import torch")


@pytest.mark.parametrize("path", NVRTC, ids=IDS)
def test_inline_has_a_launcher_per_kernel_and_keeps_the_model_code(path: Path) -> None:
    src = path.read_text()
    out = to_inline(src)
    tree = ast.parse(out)
    assert detect_format(out) == "inline"
    assert not any(m.split(".")[0] == "cudaforge" for m in _imports(tree))
    assert "torch.utils.cpp_extension" in _imports(tree)
    src_tree = ast.parse(src)
    model = next(n for n in src_tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew")
    assert ast.unparse(model) in ast.unparse(tree)  # the Python model code is unchanged
    kernels = {c.args[1].value for c in ast.walk(src_tree) if isinstance(c, ast.Call)
               and getattr(c.func, "id", "") == "load_kernel"}
    launchers = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                     and getattr(n.targets[0], "id", "") == "_CF_LAUNCHERS")
    assert set(launchers) == kernels
    assert out.count("cudaLaunchKernel(") == len(kernels)
    assert "cudaFuncAttributeMaxDynamicSharedMemorySize" in out and "getCurrentCUDAStream" in out
    assert source_findings(out, (path.parent / "task.py").read_text()) == []


def test_standalone_runs_without_cudaforge_installed(tmp_path: Path) -> None:
    """With cudaforge unimportable the exported file gets as far as the helper's own device check."""
    out = tmp_path / "standalone.py"
    out.write_text(to_standalone((EXAMPLES / "relu" / "nvrtc.py").read_text()))
    code = ("import sys; sys.modules['cudaforge'] = None\n"
            "import importlib.util as u\n"
            f"s = u.spec_from_file_location('cand', {str(out)!r}); m = u.module_from_spec(s); sys.modules['cand'] = m\n"
            "try:\n    s.loader.exec_module(m)\nexcept Exception as e:\n    print(type(e).__name__, e)\n"
            "else:\n    print('loaded', hasattr(m, 'ModelNew'))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    line = res.stdout.strip().splitlines()[-1]
    import torch

    if torch.cuda.is_available():
        assert line == "loaded True"
    else:
        assert line.startswith("NvrtcError") and "need a CUDA device" in line


MODULE_IMPORT = '''
import torch
import torch.nn as nn
from cudaforge.engine import nvrtc as nv

SRC = "extern \\"C\\" __global__ void k(float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = 1.f; }"
_k = nv.load_kernel(SRC, "k")


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _k(grid=(1,), block=(32,), args=(y, y.numel()))
        return y
'''


def test_module_style_import_converts_both_ways() -> None:
    inline = to_inline(MODULE_IMPORT)
    assert "class nv:" in inline and "load_kernel = staticmethod(load_kernel)" in inline
    standalone = to_standalone(MODULE_IMPORT)
    assert "nv = _cf_helper_module" in standalone


@pytest.mark.parametrize("source, message", [
    ("import torch\nclass ModelNew: pass\n", "does not import cudaforge.engine.nvrtc"),
    ("from cudaforge.engine.nvrtc import load_kernel\nimport os\n_k = load_kernel(os.environ['S'], 'k')\n"
     "class ModelNew: pass\n", "line 3: the kernel source and name must be string constants"),
    ("from cudaforge.engine.nvrtc import load_kernel\nS = '__global__ void k(Params p) {}'\n"
     "_k = load_kernel(S, 'k')\nclass ModelNew: pass\n", "parameter 0 has type 'Params'"),
    ("from cudaforge.engine.nvrtc import load_kernel\nS = '__global__ void k(float* y) {}'\n"
     "_k = load_kernel(S, 'k', options=['--gpu-architecture=sm_90'])\nclass ModelNew: pass\n",
     "has no checked nvcc equivalent"),
    ("from cudaforge.engine.evaluation.profiler import Profiler\nclass ModelNew: pass\n", "line 1: imports cudaforge.engine.evaluation.profiler"),
    ("def f(:\n", "does not parse"),
])
def test_unconvertible_candidates_raise_a_clear_error(source: str, message: str) -> None:
    with pytest.raises(ConversionError, match=None) as info:
        to_inline(source)
    assert message in str(info.value)


def test_standalone_refuses_a_name_clash_with_the_helper() -> None:
    src = MODULE_IMPORT.replace("_k = nv.load_kernel", "def _check(): pass\n_k = nv.load_kernel")
    with pytest.raises(ConversionError, match="_check"):
        to_standalone(src)


# ------------------------------------------------------------------ GPU: the converted files are equivalent


def _import(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _outputs(task, module, seed: int = 42):
    import torch

    init = task.get_init_inputs()
    torch.manual_seed(seed)
    model = task.Model(*init).cuda().eval()
    torch.manual_seed(seed)
    new = module.ModelNew(*init).cuda().eval()
    with torch.no_grad():
        state = new.state_dict()
        for k, v in model.state_dict().items():
            if k in state and state[k].shape == v.shape:
                state[k].copy_(v)
    torch.manual_seed(seed + 1)
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
    with torch.no_grad():
        out = new(*inputs)
    torch.cuda.synchronize()
    return out


GPU_STANDALONE = [p for p in NVRTC if p.parent.name in ("relu", "softmax", "matmul")]


@pytest.mark.gpu
@pytest.mark.parametrize("path", GPU_STANDALONE, ids=[p.parent.name for p in GPU_STANDALONE])
def test_gpu_standalone_is_accepted_and_bit_identical(path: Path, gpu_options, tmp_path: Path) -> None:
    import torch
    from cudaforge.engine.candidate import Candidate
    from cudaforge.engine.evaluation.evaluator import Evaluator
    from cudaforge.engine.task import load_task

    text = to_standalone(path.read_text())
    r = asyncio.run(Evaluator(gpu_options).evaluate(load_task(path.parent / "task.py"), Candidate.from_source(text)))
    assert r.accepted, r.message + r.stderr_tail
    conv = tmp_path / "standalone.py"
    conv.write_text(text)
    task = _import(path.parent / "task.py", f"cv_task_{path.parent.name}")
    a = _outputs(task, _import(path, f"cv_orig_{path.parent.name}"))
    b = _outputs(task, _import(conv, f"cv_standalone_{path.parent.name}"))
    assert torch.equal(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["relu"])
def test_gpu_inline_export_is_accepted_and_bit_identical(name: str, gpu_options, tmp_path: Path) -> None:
    import torch
    from cudaforge.engine.candidate import Candidate
    from cudaforge.engine.evaluation.evaluator import Evaluator
    from cudaforge.engine.task import load_task

    path = EXAMPLES / name / "nvrtc.py"
    text = to_inline(path.read_text())
    conv = tmp_path / "inline.py"
    conv.write_text(text)

    async def both():
        # the worker's build and this process's build of the same extension run side by side
        evaluation = asyncio.ensure_future(
            Evaluator(gpu_options).evaluate(load_task(path.parent / "task.py"), Candidate.from_source(text)))
        module = await asyncio.to_thread(_import, conv, f"cv_inline_{name}")
        return await evaluation, module

    r, module = asyncio.run(both())
    assert r.accepted and r.format == "inline", r.message + r.stderr_tail
    task = _import(path.parent / "task.py", f"cv_task_i_{name}")
    a = _outputs(task, _import(path, f"cv_orig_i_{name}"))
    b = _outputs(task, module)
    assert torch.equal(a, b)
