"""The module a person starts from in manual mode: a `ModelNew` with the task's constructor and forward
signatures and a commented kernel stub in the chosen candidate format.

Read from the task's source (no import, no torch): `Model.__init__`'s parameters are what
`get_init_inputs()` feeds, `Model.forward`'s what `get_inputs()` feeds. A pure function of the text, so
the workbench, tests and any other front end get the same skeleton.
"""

from __future__ import annotations

import ast

_STUBS = {
    "cpu": '''# A C++ kernel built with load_inline (the CPU device):
# from torch.utils.cpp_extension import load_inline
# CPP_SOURCE = r"""
# #include <torch/extension.h>
# torch::Tensor my_kernel(torch::Tensor x) {
#     auto y = torch::empty_like(x);
#     // ... your loop over x.data_ptr<float>() ...
#     return y;
# }
# """
# _ext = load_inline(name="my_ext", cpp_sources=CPP_SOURCE, functions=["my_kernel"])
''',
    "inline": '''# A CUDA kernel built with load_inline (KernelBench style):
# from torch.utils.cpp_extension import load_inline
# CUDA_SOURCE = r"""
# #include <torch/extension.h>
# __global__ void my_kernel(const float* x, float* y, long n) {
#     long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
#     if (i < n) y[i] = x[i];
# }
# torch::Tensor run(torch::Tensor x) {
#     auto y = torch::empty_like(x);
#     long n = x.numel();
#     my_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
#     return y;
# }
# """
# CPP_SOURCE = "torch::Tensor run(torch::Tensor x);"
# _ext = load_inline(name="my_ext", cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE, functions=["run"])
''',
    "nvrtc": '''# A CUDA kernel compiled at import through NVRTC (the fast path):
# from cudaforge.engine.nvrtc import load_kernel
# SOURCE = r"""
# extern "C" __global__ void my_kernel(const float* x, float* y, long long n) {
#     long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
#     if (i < n) y[i] = x[i];
# }
# """
# _kernel = load_kernel(SOURCE, "my_kernel")
# in forward: _kernel(grid=((n + 255) // 256,), block=(256,), args=(x, y, n))
''',
    "triton": '''# A Triton kernel (on --device cpu it runs in Triton's interpreter):
# import triton
# import triton.language as tl
#
# @triton.jit
# def my_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
#     offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
#     mask = offs < n
#     tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)
#
# in forward: my_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
''',
}


def _params(func: ast.FunctionDef | None) -> str:
    """The parameters after `self`, as written (defaults and annotations kept)."""
    if func is None:
        return ""
    args = func.args
    text = ast.unparse(ast.arguments(posonlyargs=[], args=args.posonlyargs + args.args, vararg=args.vararg,
                                     kwonlyargs=args.kwonlyargs, kw_defaults=args.kw_defaults, kwarg=args.kwarg,
                                     defaults=args.defaults))
    parts = text.split(", ", 1)
    return parts[1] if len(parts) > 1 and parts[0] == "self" else ("" if parts[0] == "self" else text)


def _model_methods(task_source: str) -> tuple[ast.FunctionDef | None, ast.FunctionDef | None]:
    try:
        tree = ast.parse(task_source)
    except SyntaxError:
        return None, None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            found = {n.name: n for n in node.body if isinstance(n, ast.FunctionDef)}
            return found.get("__init__"), found.get("forward")
    return None, None


def manual_skeleton(task_source: str, fmt: str, round: int = 1) -> str:
    """A ModelNew to start from: Model's constructor and forward signatures, a commented kernel stub in
    `fmt` (cpu, inline, nvrtc or triton; another format gets the cpu stub's shape with its name)."""
    init, forward = _model_methods(task_source)
    init_params = _params(init)
    forward_params = _params(forward) or "*inputs"
    stub = _STUBS.get(fmt, _STUBS["cpu"])
    init_sig = f"self, {init_params}" if init_params else "self"
    return f'''"""Your candidate for round {round} ({fmt or "cpu"} format): a ModelNew with Model's constructor and forward
signatures, running your own kernels. Parameters whose names and shapes match Model's are copied from it."""
import torch
import torch.nn as nn

{stub}

class ModelNew(nn.Module):
    def __init__({init_sig}):
        super().__init__()
        # the parameters Model.__init__ creates, under the same names (their values are copied from Model)

    def forward(self, {forward_params}):
        # call your kernel here and return what Model.forward returns
        raise NotImplementedError("ModelNew.forward: call your kernel")
'''
