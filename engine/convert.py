"""Export `nvrtc`-format candidates: to a standalone file, or to KernelBench's `inline` format.

- `to_standalone(source)`: the same candidate with our NVRTC helper (engine/nvrtc.py, which needs only
  torch) pasted in place of its `cudaforge` import, so the file runs where cudaforge is not installed.
- `to_inline(source)`: the kernels are compiled by `torch.utils.cpp_extension.load_inline` instead.
  For each `load_kernel(SOURCE, "name")` the kernel's signature is parsed and a C++/CUDA launcher is
  generated (`cudaLaunchKernel` on PyTorch's current stream, one argument slot per parameter, the
  ≥ 48 KB dynamic shared memory attribute raised first, exactly like the NVRTC helper). The import of
  `load_kernel` is replaced by a small shim of the same name whose kernel objects call the extension,
  so the Python model code (`ModelNew`, grid/block arithmetic, argument order) stays the same.

- `triton_standalone(source)`: a Triton candidate already needs only torch and triton; this checks that
  it imports nothing of cudaforge and returns it unchanged.

All raise `ConversionError`, naming the line and what cannot be converted, instead of emitting a
file that would fail later.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from cudaforge.engine import nvrtc
from cudaforge.engine.errors import CudaforgeError

_HELPER_MODULES = ("cudaforge.engine.nvrtc",)


class ConversionError(CudaforgeError):
    """The candidate cannot be converted; the message says which line and why."""


# ------------------------------------------------------------------ shared parsing


@dataclass(frozen=True)
class _HelperImport:
    node: ast.stmt
    bindings: tuple[tuple[str, str], ...]  # (local name, helper attribute or "" for the module itself)


def _parse(source: str) -> ast.Module:
    try:
        return ast.parse(source)
    except SyntaxError as exc:
        raise ConversionError(f"line {exc.lineno}: the candidate does not parse: {exc.msg}") from None


def _helper_imports(tree: ast.Module) -> list[_HelperImport]:
    """Top-level imports of the NVRTC helper; any other cudaforge import is an error."""
    found: list[_HelperImport] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "cudaforge":
            if node.module in _HELPER_MODULES:
                found.append(_HelperImport(node, tuple((a.asname or a.name, a.name) for a in node.names)))
            elif node.module == "cudaforge.engine" and all(a.name == "nvrtc" for a in node.names):
                found.append(_HelperImport(node, tuple((a.asname or a.name, "") for a in node.names)))
            else:
                raise ConversionError(f"line {node.lineno}: imports {node.module}, which only the NVRTC helper "
                                      "(cudaforge.engine.nvrtc) can be replaced for")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "cudaforge":
                    continue
                if alias.name in _HELPER_MODULES and alias.asname and len(node.names) == 1:
                    found.append(_HelperImport(node, ((alias.asname, ""),)))
                else:
                    raise ConversionError(f"line {node.lineno}: `import {alias.name}` cannot be converted; "
                                          "use `from cudaforge.engine.nvrtc import load_kernel`")
    for imp in found:
        if imp.node not in tree.body:
            raise ConversionError(f"line {imp.node.lineno}: the NVRTC helper must be imported at module level")
    if not found:
        raise ConversionError("the candidate does not import cudaforge.engine.nvrtc: it is not in the nvrtc format")
    return found


def _replace_lines(source: str, replacements: dict[ast.stmt, str]) -> str:
    lines = source.splitlines(keepends=True)
    for node in sorted(replacements, key=lambda n: n.lineno, reverse=True):
        end = node.end_lineno or node.lineno
        lines[node.lineno - 1:end] = [replacements[node]]
    return "".join(lines)


def _hoist_future(source: str, tree: ast.Module) -> tuple[str, list[str]]:
    """Remove `from __future__` imports (they must come first in the output); return them."""
    futures = [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "__future__"]
    names = [a.name for n in futures for a in n.names]
    return _replace_lines(source, {n: "" for n in futures}), names


def _docstring_end(tree: ast.Module) -> int:
    """The line after the module docstring (0 when there is none)."""
    if tree.body and isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Constant) \
            and isinstance(tree.body[0].value.value, str):
        return tree.body[0].end_lineno or 0
    return 0


def _aliases(imp: _HelperImport, module_value: str, attr_value: dict[str, str]) -> str:
    out = []
    for local, attr in imp.bindings:
        value = module_value if attr == "" else attr_value.get(attr)
        if value is None:
            raise ConversionError(f"line {imp.node.lineno}: the helper has no `{attr}` that can be exported")
        if local != value:
            out.append(f"{local} = {value}\n")
    return "".join(out)


# ------------------------------------------------------------------ standalone


def _helper_source() -> str:
    text = Path(nvrtc.__file__).read_text(encoding="utf-8")
    tree = ast.parse(text)
    start = _docstring_end(tree)
    body = text.splitlines(keepends=True)[start:]
    return "".join(line for line in body if not line.startswith("from __future__ import"))


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


_STANDALONE_BANNER = "# " + "-" * 20 + " cudaforge NVRTC helper (engine/nvrtc.py), inlined: needs only torch " \
    + "-" * 20 + "\n"
_CANDIDATE_BANNER = "# " + "-" * 40 + " the candidate " + "-" * 40 + "\n"


def to_standalone(source: str) -> str:
    """The nvrtc candidate with the helper inlined: a file that imports torch but no cudaforge."""
    tree = _parse(source)
    imports = _helper_imports(tree)
    helper = _helper_source()
    helper_tree = ast.parse(helper)
    public = {"load_kernel", "Kernel", "NvrtcError", "parse_signature", "LAUNCH_COUNTS", "CACHE_STATS", "ArgLayout"}
    clash = sorted((_top_level_names(tree) & _top_level_names(helper_tree)) - public)
    if clash:
        raise ConversionError(f"the candidate defines {', '.join(clash)}, which the inlined helper also defines")
    replacements = {imp.node: _aliases(imp, "_cf_helper_module", {n: n for n in public}) for imp in imports}
    needs_module = any(attr == "" for imp in imports for _, attr in imp.bindings)
    body = _replace_lines(source, replacements)
    body, futures = _hoist_future(body, ast.parse(body))
    doc_end = _docstring_end(ast.parse(body))
    lines = body.splitlines(keepends=True)
    head, rest = "".join(lines[:doc_end]), "".join(lines[doc_end:])
    future_names = sorted(set(futures) | {"annotations"})
    out = [head, f"from __future__ import {', '.join(future_names)}\n\n", _STANDALONE_BANNER, helper.strip("\n"),
           "\n\n"]
    if needs_module:
        out.append("import sys as _cf_sys\n_cf_helper_module = _cf_sys.modules[__name__]\n\n")
    out += [_CANDIDATE_BANNER, rest.lstrip("\n")]
    text = "".join(out)
    _check_output(text, "standalone")
    return text


# ------------------------------------------------------------------ inline


@dataclass(frozen=True)
class _KernelUse:
    line: int
    source: str  # the CUDA source text
    name: str  # as passed to load_kernel (may carry template arguments)
    options: tuple[str, ...]


def _module_strings(tree: ast.Module) -> dict[str, str]:
    """Module-level names bound once to a string that can be computed statically."""
    values: dict[str, str] = {}
    counts: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    counts[t.id] = counts.get(t.id, 0) + 1
                    value = _static_str(node.value, values)
                    if value is not None:
                        values[t.id] = value
    return {k: v for k, v in values.items() if counts.get(k) == 1}


def _static_str(node: ast.expr, known: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return known.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _static_str(node.left, known), _static_str(node.right, known)
        return left + right if left is not None and right is not None else None
    return None


def _kernel_uses(tree: ast.Module, loader_names: set[str], module_names: set[str]) -> list[_KernelUse]:
    strings = _module_strings(tree)
    uses: list[_KernelUse] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        is_loader = (isinstance(func, ast.Name) and func.id in loader_names) or (
            isinstance(func, ast.Attribute) and func.attr == "load_kernel" and isinstance(func.value, ast.Name)
            and func.value.id in module_names)
        if not is_loader:
            continue
        args = list(node.args)
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        src_node = args[0] if args else kw.get("source")
        name_node = args[1] if len(args) > 1 else kw.get("name")
        if src_node is None or name_node is None:
            raise ConversionError(f"line {node.lineno}: load_kernel needs its source and kernel name")
        src = _static_str(src_node, strings)
        name = _static_str(name_node, strings)
        if src is None or name is None:
            raise ConversionError(f"line {node.lineno}: the kernel source and name must be string constants (or "
                                  "module-level names bound once to one) to be converted")
        options: tuple[str, ...] = ()
        if "options" in kw:
            try:
                options = tuple(ast.literal_eval(kw["options"]))
            except (ValueError, TypeError):
                raise ConversionError(f"line {node.lineno}: load_kernel options must be a literal list of strings") \
                    from None
        if "device" in kw:
            raise ConversionError(f"line {node.lineno}: load_kernel(device=...) cannot be converted (inline "
                                  "extensions launch on the current device)")
        uses.append(_KernelUse(node.lineno, src, name, options))
    if not uses:
        raise ConversionError("the candidate calls no load_kernel(...): nothing to convert")
    return uses


_PARAM_QUALIFIERS = re.compile(r"\b(?:__restrict__|__restrict|restrict)\b")


def _param_decls(source: str, name: str) -> list[str]:
    base = name.split("<", 1)[0].strip()
    match = re.search(r"__global__[^;{(]*?\b" + re.escape(base) + r"\s*\(([^)]*)\)", source, re.S)
    if match is None:
        raise ConversionError(f"kernel {name}: no `__global__ ... {base}(...)` found in its source")
    params = re.sub(r"/\*.*?\*/|//[^\n]*", " ", match.group(1), flags=re.S).strip()
    if not params or params == "void":
        return []
    if "<" in params:
        raise ConversionError(f"kernel {name}: template types in parameters cannot be converted")
    return [p.strip() for p in params.split(",")]


def _launcher(index: int, use: _KernelUse, qualified: str) -> tuple[str, str, str]:
    """(C++ declaration, CUDA definition, function name) of the launcher for one kernel."""
    kinds = nvrtc.parse_signature(use.source, use.name)
    decls = _param_decls(use.source, use.name)
    if kinds is None or len(kinds) != len(decls):
        raise ConversionError(f"line {use.line}: cannot read the signature of kernel {use.name}")
    fname = f"cf_launch_{index}_" + re.sub(r"\W+", "_", use.name).strip("_")
    params = ["int64_t gx", "int64_t gy", "int64_t gz", "int64_t bx", "int64_t by", "int64_t bz", "int64_t smem",
              "int64_t stream_handle"]
    slots, body = [], []
    for i, (kind, decl) in enumerate(zip(kinds, decls, strict=True)):
        if kind == "pointer":
            if "&" in decl:
                raise ConversionError(f"line {use.line}: kernel {use.name} parameter {i} ({decl}) is a reference")
            params.append(f"int64_t a{i}")
            body.append(f"    void* v{i} = reinterpret_cast<void*>(a{i});")
        elif kind in nvrtc._SCALAR_TYPES and kind != "char":
            params.append(f"{kind} a{i}")
            body.append(f"    {kind} v{i} = a{i};")
        else:
            raise ConversionError(f"line {use.line}: kernel {use.name} parameter {i} has type '{kind}', which the "
                                  "inline launcher cannot take from Python")
        slots.append(f"&v{i}")
    signature = f"void {fname}({', '.join(params)})"
    fn = f"reinterpret_cast<const void*>(&{qualified})"
    definition = "\n".join([
        signature + " {",
        *body,
        f"    void* args[] = {{{', '.join(slots) or 'nullptr'}}};",
        f"    const void* fn = {fn};",
        "    if (smem >= 48 * 1024) {",
        "        C10_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));",
        "    }",
        "    cudaStream_t stream = stream_handle ? reinterpret_cast<cudaStream_t>(stream_handle)",
        "                                        : c10::cuda::getCurrentCUDAStream().stream();",
        "    C10_CUDA_CHECK(cudaLaunchKernel(fn, dim3((unsigned)gx, (unsigned)gy, (unsigned)gz),",
        "                                    dim3((unsigned)bx, (unsigned)by, (unsigned)bz), args, (size_t)smem, stream));",
        "}",
    ])
    return signature + ";", definition, fname


_INCLUDE = re.compile(r"^\s*#\s*include\s*[<\"][^>\"]+[>\"]\s*$", re.M)


def _cuda_module(uses: list[_KernelUse]) -> tuple[str, str, dict[str, str], tuple[str, ...]]:
    sources = list(dict.fromkeys(u.source for u in uses))
    options = sorted({o for u in uses for o in u.options})
    for o in options:
        if not re.fullmatch(r"(-D\w+(=[\w.+\-]*)?|--use_fast_math|-use_fast_math|--std=c\+\+\d+|-std=c\+\+\d+|"
                            r"-lineinfo|--fmad=(true|false)|-maxrregcount=\d+|--maxrregcount=\d+)", o):
            raise ConversionError(f"NVRTC option {o!r} has no checked nvcc equivalent; convert it by hand")
    includes: list[str] = []
    wrapped: list[str] = []
    namespaces: list[str] = []
    for i, src in enumerate(sources):
        includes += [m.group(0).strip() for m in _INCLUDE.finditer(src)]
        body = _INCLUDE.sub("", src)
        ns = f"cf_src{i}" if len(sources) > 1 else ""
        namespaces.append(ns)
        wrapped.append(f"namespace {ns} {{\n{body}\n}}  // namespace {ns}" if ns else body)
    decls, defs, names = [], [], {}
    for i, use in enumerate(uses):
        ns = namespaces[sources.index(use.source)]
        if use.name in names:
            continue
        decl, definition, fname = _launcher(i, use, f"{ns}::{use.name}" if ns else use.name)
        decls.append(decl)
        defs.append(definition)
        names[use.name] = fname
    header = ["#include <cstdint>", "#include <cuda_runtime.h>", "#include <c10/cuda/CUDAException.h>",
              "#include <c10/cuda/CUDAStream.h>", *dict.fromkeys(includes)]
    cuda = "\n".join(header) + "\n\n" + "\n\n".join(wrapped) + "\n\n// launchers (generated by cudaforge export)\n" \
        + "\n\n".join(defs) + "\n"
    cpp = "#include <cstdint>\n" + "\n".join(decls) + "\n"
    flags = tuple(["-O3", *[o.replace("--use_fast_math", "-use_fast_math") for o in options]])
    return cpp, cuda, names, flags


_INLINE_SHIM = '''
# ---- kernels built with torch.utils.cpp_extension.load_inline (exported from an nvrtc candidate) ----
import torch as _cf_torch
from torch.utils.cpp_extension import load_inline

_CF_CPP_SOURCE = {cpp!r}

_CF_CUDA_SOURCE = r\'\'\'
{cuda}\'\'\'

_cf_ext = load_inline(
    name={ext_name!r},
    cpp_sources=_CF_CPP_SOURCE,
    cuda_sources=_CF_CUDA_SOURCE,
    functions={functions!r},
    extra_cuda_cflags={flags!r},
    verbose=False,
)
_CF_LAUNCHERS = {launchers!r}


def _cf_dims(dims, what):
    dims = (dims,) if isinstance(dims, int) else tuple(int(d) for d in dims)
    if not 1 <= len(dims) <= 3 or any(d < 1 for d in dims):
        raise ValueError(f"{{what}} must be 1 to 3 positive integers, got {{dims}}")
    return dims + (1,) * (3 - len(dims))


class _CfInlineKernel:
    """Stands in for the NVRTC helper's kernel: same call, launched by the inline extension."""

    def __init__(self, name):
        self.name = name.split("<", 1)[0]
        self._launch = getattr(_cf_ext, _CF_LAUNCHERS[name])

    def __call__(self, grid=(1,), block=(1,), args=(), shared_mem=0, stream=None):
        values = []
        for i, a in enumerate(args):
            if isinstance(a, _cf_torch.Tensor):
                if not a.is_cuda:
                    raise ValueError(f"{{self.name}}: argument {{i}} is a {{a.device}} tensor; kernels need CUDA tensors")
                values.append(a.data_ptr())
            elif hasattr(a, "value") and not isinstance(a, (int, float, bool)):
                values.append(a.value)  # a ctypes scalar
            else:
                values.append(a)
        handle = 0 if stream is None else int(stream.cuda_stream)  # 0: PyTorch's current stream
        self._launch(*_cf_dims(grid, "grid"), *_cf_dims(block, "block"), int(shared_mem), handle, *values)


def load_kernel(source, name, *, options=(), device=None):
    """The kernels were compiled above by load_inline; this returns the launcher for `name`."""
    if name not in _CF_LAUNCHERS:
        raise KeyError(f"kernel {{name}} was not exported; known: {{sorted(_CF_LAUNCHERS)}}")
    return _CfInlineKernel(name)
# ---- end of the generated part ----
'''


def to_inline(source: str) -> str:
    """The nvrtc candidate in KernelBench's `inline` format (load_inline), Python model code unchanged."""
    tree = _parse(source)
    imports = _helper_imports(tree)
    for imp in imports:
        for _local, attr in imp.bindings:
            if attr not in ("", "load_kernel"):
                raise ConversionError(f"line {imp.node.lineno}: the candidate uses the helper's `{attr}`; only "
                                      "load_kernel has an inline equivalent")
    loader_names = {local for imp in imports for local, attr in imp.bindings if attr == "load_kernel"}
    module_names = {local for imp in imports for local, attr in imp.bindings if attr == ""}
    uses = _kernel_uses(tree, loader_names, module_names)
    cpp, cuda, launchers, flags = _cuda_module(uses)
    digest = hashlib.sha256((cpp + cuda + repr(flags)).encode()).hexdigest()[:12]
    if "'''" in cuda:
        raise ConversionError("the kernel source contains ''' and cannot be embedded as a raw string")
    shim = _INLINE_SHIM.format(cpp=cpp, cuda=cuda, ext_name=f"cf_export_{digest}", functions=list(launchers.values()),
                               flags=list(flags), launchers=launchers)
    first, *rest = sorted(imports, key=lambda i: i.node.lineno)
    replacements: dict[ast.stmt, str] = {first.node: shim + _inline_aliases(first)}
    replacements.update({imp.node: _inline_aliases(imp) for imp in rest})
    text = _replace_lines(source, replacements)
    _check_output(text, "inline")
    return text


def _inline_aliases(imp: _HelperImport) -> str:
    """Other spellings of the helper import, bound to the shim."""
    out = []
    for local, attr in imp.bindings:
        if attr == "":
            out.append(f"\n\nclass {local}:  # stands in for the helper module\n"
                       "    load_kernel = staticmethod(load_kernel)\n")
        elif local != "load_kernel":
            out.append(f"{local} = load_kernel\n")
    return "".join(out)


def _check_output(text: str, what: str) -> None:
    """The converted file must parse, define ModelNew and import nothing from cudaforge."""
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:  # a bug here, not in the candidate: say so plainly
        raise ConversionError(f"internal error: the {what} conversion produced invalid Python "
                              f"(line {exc.lineno}: {exc.msg})") from None
    if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body):
        raise ConversionError("the candidate defines no module-level class ModelNew")
    for node in ast.walk(tree):
        mods = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
            [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if any(m.split(".")[0] == "cudaforge" for m in mods):
            raise ConversionError(f"internal error: the {what} conversion still imports cudaforge (line {node.lineno})")


# ------------------------------------------------------------------ triton


def triton_standalone(source: str) -> str:
    """A Triton candidate as an exported module: unchanged, once it is known to import no cudaforge."""
    tree = _parse(source)
    for node in ast.walk(tree):
        modules = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        for name in modules:
            if name.split(".")[0] == "cudaforge":
                raise ConversionError(f"line {node.lineno}: the Triton candidate imports {name}; an exported module "
                                      "may need only torch and triton")
    return source
