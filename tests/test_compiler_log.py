"""The one compiler-log reader: the first error, the candidate line it points at, its class. The worker,
both Judges and the TUI read logs through it, so they agree on the line."""

from __future__ import annotations

from pathlib import Path

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


# A log load_inline gave for examples/broken/compile_error.py (gcc 12, torch 2.13), paths shortened.
LOAD_INLINE_LOG = """Error building extension 'cf_broken': [1/2] c++ -MMD -MF main.o.d -DTORCH_EXTENSION_NAME=cf_broken \
-isystem /venv/torch/include -fPIC -std=c++20 -c /cache/cf_broken-27/main.cpp -o main.o
FAILED: main.o
c++ -MMD -MF main.o.d -DTORCH_EXTENSION_NAME=cf_broken -isystem /venv/torch/include -fPIC -std=c++20 -c \
/cache/cf_broken-27/main.cpp -o main.o
/cache/cf_broken-27/main.cpp: In function \u2018at::Tensor relu_cpu(at::Tensor)\u2019:
/cache/cf_broken-27/main.cpp:6:5: error: expected \u2018,\u2019 or \u2018;\u2019 before \u2018const\u2019
    6 |     const float* xp = x.data_ptr<float>();
      |     ^~~~~
/cache/cf_broken-27/main.cpp:8:53: error: \u2018xp\u2019 was not declared in this scope; did you mean \u2018yp\u2019?
    8 |     for (int64_t i = 0; i < x.numel(); ++i) yp[i] = xp[i] < 0.f ? 0.f : xp[i];
      |                                                     ^~
      |                                                     yp
ninja: build stopped: subcommand failed.
"""


def test_diagnostics_are_the_compiler_lines_not_the_wrapper_or_ninja() -> None:
    from cudaforge.engine.compiler_log import diagnostics, error_count, headline

    diags = diagnostics(LOAD_INLINE_LOG)
    assert [(d.line, d.column, d.severity) for d in diags] == [(6, 5, "error"), (8, 53, "error")]
    assert diags[0].file.endswith("main.cpp") and diags[0].message.startswith("expected")
    assert LOAD_INLINE_LOG.splitlines()[diags[0].log_index] == diags[0].text
    assert error_count(LOAD_INLINE_LOG) == 2  # two errors, though ten lines say "error" or "FAILED"
    candidate = (Path(__file__).parents[1] / "examples" / "broken" / "compile_error.py").read_text()
    err = first_error(LOAD_INLINE_LOG, candidate)
    assert err is not None and err.kind == "syntax" and err.diagnostic == diags[0]
    assert candidate.splitlines()[err.line].strip().startswith("const float* xp")
    assert headline(LOAD_INLINE_LOG, candidate) == \
        f"line {err.line + 1}: error: expected \u2018,\u2019 or \u2018;\u2019 before \u2018const\u2019 (main.cpp:6:5)"
    assert headline(LOAD_INLINE_LOG) == "main.cpp:6:5: error: expected \u2018,\u2019 or \u2018;\u2019 before \u2018const\u2019"


def test_nvcc_nvrtc_and_ptxas_diagnostics() -> None:
    from cudaforge.engine.compiler_log import diagnostics, error_count

    log = ("/tmp/b/cuda.cu(12): error: identifier \"foo\" is undefined\n"
           "kernel(5): warning #177-D: variable \"x\" was declared but never referenced\n"
           "ptxas error   : Entry function 'k' uses too much shared data (0x10000 bytes, 0xc000 max)\n"
           "2 errors detected in the compilation of \"cuda.cu\".\n")
    diags = diagnostics(log)
    assert [(d.file, d.line, d.severity) for d in diags] == [
        ("/tmp/b/cuda.cu", 12, "error"), ("kernel", 5, "warning"), ("ptxas", None, "error")]
    assert error_count(log) == 2
    assert diags[2].message.startswith("Entry function")
    err = first_error(log)
    assert err is not None and err.kind == "undeclared"


def test_a_wrapper_line_alone_is_not_the_error() -> None:
    log = "Error building extension 'x': [1/2] c++ -c main.cpp\nRuntimeError: the linker failed"
    assert first_error_text(log) == "RuntimeError: the linker failed"


def test_the_line_belongs_to_the_first_error_itself() -> None:
    candidate = "import torch\ncpp = '''\nint f(int x) {\n  return y * 2;\n}\n'''\n"
    log = ("ptxas error   : Entry function 'k' uses too much shared data\n"
           "main.cpp:3:10: error: 'y' was not declared in this scope\n"
           "    3 |   return y * 2;\n")
    err = first_error(log, candidate)
    assert err is not None and err.text.startswith("ptxas error") and err.line is None
    assert err.headline.startswith("ptxas error") and err.kind == "shared_memory"
