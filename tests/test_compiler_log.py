"""The one compiler-log reader: the first error, the candidate line it points at, its class. The worker,
both Judges and the TUI read logs through it, so they agree on the line."""

from __future__ import annotations

from cudaforge.engine.compiler_log import classify, first_error, first_error_text, line_kind

CANDIDATE = '''import torch
from cudaforge.engine.nvrtc import load_kernel

SOURCE = r"""
extern "C" __global__ void cf_scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * 2.0f
}
"""
'''


def test_nvrtc_error_is_placed_inside_the_kernel_string() -> None:
    log = "nvrtc: compilation failed\nkernel.cu(4): error: expected a \";\"\n1 error detected"
    err = first_error(log, CANDIDATE)
    assert err is not None and err.text == 'kernel.cu(4): error: expected a ";"'
    assert err.line == 6 and CANDIDATE.splitlines()[6].strip().startswith("if (i < n)")
    assert err.kind == "syntax" and err.hint and "syntax" in err.hint


def test_gcc_excerpt_places_the_line_exactly() -> None:
    candidate = "import torch\ncpp = '''\nint f(int x) {\n  return y * 2;\n}\n'''\n"
    log = ("c++ -c main.cpp -o main.o -Werror\n"
           "main.cpp:3:10: error: 'y' was not declared in this scope\n"
           "    3 |   return y * 2;\n"
           "      |          ^\n")
    err = first_error(log, candidate)
    assert err is not None and err.text.startswith("main.cpp:3:10: error")  # the c++ command line is no error
    assert err.line == 3 and err.kind == "undeclared"


def test_triton_error_names_its_candidate_line() -> None:
    log = "candidate.py:10: error: CompilationError: at 3:8: unsupported operand\n    10 |     y = x @ w"
    source = "\n".join(f"line{k}" for k in range(12))
    err = first_error(log, source)
    assert err is not None and err.line == 9


def test_without_an_error_line_the_last_line_stands_in() -> None:
    assert first_error_text("building...\nKilled") == "Killed"
    assert first_error("") is None and first_error_text("") == ""
    assert first_error_text("Traceback (most recent call last):\n  File x\nRuntimeError: boom") == "RuntimeError: boom"


def test_line_kinds_and_classes() -> None:
    assert line_kind("foo.cu(3): error: bad") == "error"
    assert line_kind("foo.cu(3): warning: unused") == "warning"
    assert line_kind("c++ -Werror -c a.cpp") == "plain"
    assert classify("CUDA error: out of memory")[0] == "out_of_memory"
    assert classify("something odd") == ("other", None)
