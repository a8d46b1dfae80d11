"""Static integrity checks: the candidate's source (and the task's) read without running anything.

`source_findings` names constructs that let a candidate pass without doing the work honestly: a PyTorch
fallback in an exception handler, use of the reference `Model`, threads or processes, side streams,
patching of timers or of torch, tensor subclasses, result caches keyed on pointers or shapes, precision
downgrades, introspection of the harness's frames and access to the worker's spec/result files.
It is pure (AST only, the standard library), so the app can run it on `candidate.source` itself, where a
candidate that forges the worker's result file cannot hide it. Each finding carries the line numbers
and source snippets as evidence; names, severities and messages come from the registry (registry.py).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from cudaforge.engine.integrity.registry import REGISTRY, finding
from cudaforge.engine.results import Finding

_MAX_LOCATIONS = 10

# ---------------------------------------------------------------------------------------- helpers


@dataclass
class _Hit:
    line: int
    construct: str


@dataclass
class _Collector:
    lines: list[str]
    hits: dict[str, list[_Hit]] = field(default_factory=dict)

    def add(self, name: str, line: int, construct: str) -> None:
        bucket = self.hits.setdefault(name, [])
        if not any(h.line == line and h.construct == construct for h in bucket):
            bucket.append(_Hit(line, construct))

    def findings(self) -> list[Finding]:
        out = []
        for name in (k.name for k in REGISTRY.values() if k.where == "static"):
            hits = sorted(self.hits.get(name, []), key=lambda h: h.line)
            if not hits:
                continue
            locations = [{"line": h.line, "snippet": self.snippet(h.line), "construct": h.construct}
                         for h in hits[:_MAX_LOCATIONS]]
            where = ", ".join(f"line {h.line} ({h.construct})" for h in hits[:3])
            out.append(finding(name, f"{REGISTRY[name].message}: {where}",
                               {"locations": locations, "count": len(hits)}))
        return out

    def snippet(self, line: int) -> str:
        if 1 <= line <= len(self.lines):
            return self.lines[line - 1].strip()[:160]
        return ""


def _dotted(node: ast.AST) -> str | None:
    """`a.b.c` for a Name/Attribute chain, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


class _Aliases:
    """Local names bound by imports, resolved to the dotted path they stand for."""

    def __init__(self, tree: ast.Module) -> None:
        self.names: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.names[a.asname] = a.name
                    else:
                        root = a.name.split(".")[0]
                        self.names[root] = root
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    if a.name != "*":
                        self.names[a.asname or a.name] = f"{node.module}.{a.name}"

    def resolve(self, node: ast.AST) -> str | None:
        """The dotted path an expression refers to, with its root import alias expanded."""
        dotted = _dotted(node)
        if dotted is None:
            return None
        root, _, rest = dotted.partition(".")
        if root in self.names:
            base = self.names[root]
            return f"{base}.{rest}" if rest else base
        if root == "__builtins__":
            return "builtins" + (f".{rest}" if rest else "")
        return dotted

    def is_imported(self, node: ast.AST) -> bool:
        dotted = _dotted(node)
        return dotted is not None and (dotted.split(".")[0] in self.names or dotted.startswith("__builtins__"))


def _strings(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(first line, value) of every string constant: CUDA and C++ sources live here."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def _string_hits(tree: ast.Module, pattern: re.Pattern[str]) -> Iterator[tuple[int, str]]:
    for line, text in _strings(tree):
        for m in pattern.finditer(text):
            # Comments inside C++ sources do not count.
            start_of_line = text.rfind("\n", 0, m.start()) + 1
            if "//" in text[start_of_line:m.start()]:
                continue
            yield line + text.count("\n", 0, m.start()), m.group(0)


# ---------------------------------------------------------------------------------------- call graph


def _module_defs(tree: ast.Module) -> tuple[dict[str, ast.FunctionDef | ast.AsyncFunctionDef], dict[str, ast.ClassDef]]:
    funcs: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    classes: dict[str, ast.ClassDef] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            funcs[node.name] = node
        elif isinstance(node, ast.ClassDef):
            classes[node.name] = node
    return funcs, classes


def _called_names(node: ast.AST) -> set[str]:
    """Names of module-level functions/classes referenced from `node` (calls and bare references)."""
    names = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
            names.add(sub.id)
    return names


def _reachable(tree: ast.Module) -> list[ast.AST]:
    """ModelNew plus every module-level function or class its code refers to, transitively."""
    funcs, classes = _module_defs(tree)
    start = classes.get("ModelNew")
    if start is None:
        return []
    seen: dict[str, ast.AST] = {"ModelNew": start}
    stack: list[ast.AST] = [start]
    while stack:
        node = stack.pop()
        for name in _called_names(node):
            target = funcs.get(name) or classes.get(name)
            if target is not None and name not in seen:
                seen[name] = target
                stack.append(target)
    return list(seen.values())


_TENSOR_METHODS = {
    "matmul", "mm", "bmm", "addmm", "relu", "relu_", "sigmoid", "tanh", "softmax", "log_softmax", "sum", "mean",
    "max", "min", "exp", "log", "clamp", "clamp_", "clamp_min", "clip", "mul", "add", "sub", "div", "pow", "sqrt",
    "rsqrt", "conv2d", "linear", "layer_norm", "gelu", "silu", "norm", "var", "std", "cumsum", "argmax", "topk",
    "masked_fill", "where", "t", "transpose", "permute", "einsum", "amax", "amin", "abs", "neg", "erf",
}


def _calls_torch(node: ast.AST, aliases: _Aliases, torch_funcs: set[str]) -> str | None:
    """The first PyTorch op called inside `node`, if any (torch.*, F.*, tensor methods, helpers using them)."""
    for sub in ast.walk(node):
        if not isinstance(sub, ast.Call):
            continue
        path = aliases.resolve(sub.func) or ""
        if path.startswith("torch.") and not path.startswith(("torch.utils.cpp_extension", "torch.cuda.synchronize")):
            return path
        if isinstance(sub.func, ast.Name) and sub.func.id in torch_funcs:
            return sub.func.id + "()"
        if isinstance(sub.func, ast.Attribute):
            attr = sub.func.attr
            if attr == "forward" and isinstance(sub.func.value, ast.Call) and _dotted(sub.func.value.func) == "super":
                return "super().forward"
            if attr in _TENSOR_METHODS and not aliases.is_imported(sub.func.value):
                return f".{attr}()"
    return None


def _torch_helpers(tree: ast.Module, aliases: _Aliases) -> set[str]:
    """Module-level functions that (transitively) call PyTorch ops."""
    funcs, _ = _module_defs(tree)
    result: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, fn in funcs.items():
            if name not in result and _calls_torch(fn, aliases, result):
                result.add(name)
                changed = True
    return result


# ---------------------------------------------------------------------------------------- checks


def _check_fallback(reachable: list[ast.AST], aliases: _Aliases, helpers: set[str], c: _Collector) -> None:
    for root in reachable:
        for node in ast.walk(root):
            if not isinstance(node, ast.Try):
                continue
            for handler in node.handlers:
                body = ast.Module(body=handler.body, type_ignores=[])
                op = _calls_torch(body, aliases, helpers)
                if op:
                    c.add("pytorch_fallback", handler.lineno, f"except handler calls {op}")


_TASK_MODULES = re.compile(r"^(cudaforge_task|task|__main__)$|\.task$|^reference$")


def _check_reference(tree: ast.Module, aliases: _Aliases, c: _Collector) -> None:
    _, classes = _module_defs(tree)
    own_model = "Model" in classes or any(
        isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "Model" for t in n.targets)
        and not _mentions_task_module(n.value) for n in tree.body)
    imported_model = "Model" in aliases.names
    new = classes.get("ModelNew")
    if new is not None:
        for base in new.bases:
            d = _dotted(base) or ""
            if d == "Model" or d.endswith(".Model"):
                c.add("calls_reference", new.lineno, f"class ModelNew({d})")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if _TASK_MODULES.search(node.module):
                c.add("calls_reference", node.lineno, f"from {node.module} import ...")
            elif any(a.name == "Model" for a in node.names) and not node.module.startswith("torch"):
                c.add("calls_reference", node.lineno, f"from {node.module} import Model")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if _TASK_MODULES.search(a.name):
                    c.add("calls_reference", node.lineno, f"import {a.name}")
        elif isinstance(node, ast.Call):
            path = aliases.resolve(node.func) or ""
            if path in ("importlib.import_module", "importlib.util.spec_from_file_location", "runpy.run_path",
                        "runpy.run_module", "__import__") and _mentions_task_module(node):
                c.add("calls_reference", node.lineno, f"{path}(...task...)")
            if isinstance(node.func, ast.Name) and node.func.id == "Model" and (imported_model or not own_model):
                c.add("calls_reference", node.lineno, "Model(...)")
        elif isinstance(node, ast.Subscript) and (aliases.resolve(node.value) or "") == "sys.modules":
            if _mentions_task_module(node.slice):
                c.add("calls_reference", node.lineno, "sys.modules[task module]")
        elif isinstance(node, ast.Attribute) and node.attr == "Model" and isinstance(node.ctx, ast.Load) \
                and not (aliases.resolve(node.value) or "").startswith("torch"):
            c.add("calls_reference", node.lineno, f"{_dotted(node) or '...'}")


def _mentions_task_module(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and _TASK_MODULES.search(sub.value.strip()):
            return True
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub.value.endswith("task.py"):
            return True
    return False


_THREAD_MODULES = ("threading", "_thread", "multiprocessing", "concurrent.futures", "concurrent", "subprocess",
                   "torch.multiprocessing", "pty")
_PROCESS_CALLS = {"os.fork", "os.forkpty", "os.system", "os.popen", "os.posix_spawn", "os.posix_spawnp",
                  "os.spawnl", "os.spawnv", "os.spawnve", "os.spawnvp", "os.execv", "os.execve", "pty.fork",
                  "torch.jit.fork", "torch.jit._fork"}
_CXX_THREADS = re.compile(r"\bpthread_create\b|\bstd::thread\b|\bstd::async\b|\bstd::jthread\b|\bfork\s*\(\s*\)")


def _check_threads(tree: ast.Module, aliases: _Aliases, c: _Collector) -> None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in _THREAD_MODULES or a.name.split(".")[0] in ("threading", "_thread", "multiprocessing"):
                    c.add("threads_or_processes", node.lineno, f"import {a.name}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module in _THREAD_MODULES or node.module.split(".")[0] in ("threading", "_thread",
                                                                              "multiprocessing"):
                c.add("threads_or_processes", node.lineno, f"from {node.module} import ...")
            elif node.module == "os" and any(f"os.{a.name}" in _PROCESS_CALLS for a in node.names):
                c.add("threads_or_processes", node.lineno, "from os import " + ", ".join(a.name for a in node.names))
        elif isinstance(node, ast.Call):
            path = aliases.resolve(node.func) or ""
            if path in _PROCESS_CALLS:
                c.add("threads_or_processes", node.lineno, f"{path}()")
    for line, text in _string_hits(tree, _CXX_THREADS):
        c.add("threads_or_processes", line, text)


_STREAM_CALLS = {"torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.ExternalStream", "torch.cuda.set_stream",
                 "torch.Stream", "torch.cuda.streams.Stream"}
_CXX_STREAMS = re.compile(r"\bcudaStreamCreate\w*|\bcuStreamCreate\w*|\bcudaStreamNonBlocking\b|"
                          r"\bgetStreamFromPool\b|\bcudaStreamPerThread\b|\bcudaStreamLegacy\b")


def _check_streams(tree: ast.Module, aliases: _Aliases, c: _Collector) -> None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            path = aliases.resolve(node.func) or ""
            if path in _STREAM_CALLS:
                c.add("side_stream", node.lineno, f"{path}(...)")
    for line, text in _string_hits(tree, _CXX_STREAMS):
        c.add("side_stream", line, text)


# Attribute roots whose assignment patches the harness. torch.backends.* is configuration (precision
# flags are reported as precision_downgrade).
_PATCH_ROOTS = ("time", "torch", "builtins", "sys", "gc", "threading", "os", "statistics", "json", "math",
                "numpy", "importlib", "cudaforge")
_PATCH_ALLOWED = ("torch.backends.",)


def _patch_target(node: ast.AST, aliases: _Aliases) -> str | None:
    """The dotted module attribute an assignment target patches, if any."""
    if isinstance(node, ast.Attribute):
        if not aliases.is_imported(node.value) and not (_dotted(node.value) or "").startswith("__builtins__"):
            return None
        path = aliases.resolve(node) or ""
    elif isinstance(node, ast.Subscript):
        base = aliases.resolve(node.value) or ""
        if base == "sys.modules" or base.endswith(".__dict__") and aliases.is_imported(node.value) \
                or _dotted(node.value) == "__builtins__":
            return f"{base}[...]"
        return None
    else:
        return None
    if path.split(".")[0] in _PATCH_ROOTS and not path.startswith(_PATCH_ALLOWED):
        return path
    return None


def _check_patching(tree: ast.Module, aliases: _Aliases, c: _Collector) -> None:
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        for t in targets:
            for sub in ast.walk(t) if isinstance(t, (ast.Tuple, ast.List)) else [t]:
                path = _patch_target(sub, aliases)
                if path:
                    c.add("harness_patching", node.lineno, f"{path} = ...")
        if isinstance(node, ast.Call):
            path = aliases.resolve(node.func) or ""
            if path in ("setattr", "builtins.setattr", "delattr", "builtins.delattr") and node.args:
                target = aliases.resolve(node.args[0]) or ""
                if aliases.is_imported(node.args[0]) and target.split(".")[0] in _PATCH_ROOTS \
                        and not target.startswith(_PATCH_ALLOWED):
                    c.add("harness_patching", node.lineno, f"{path}({target}, ...)")
            elif path.startswith("ctypes.pythonapi") or (
                    (path in ("ctypes.memmove", "ctypes.memset") or
                     isinstance(node.func, ast.Attribute) and node.func.attr == "from_address")
                    and any(isinstance(s, ast.Call) and isinstance(s.func, ast.Name) and s.func.id == "id"
                            for a in node.args for s in ast.walk(a))):
                c.add("harness_patching", node.lineno, f"{path or '...from_address'}(...): writes into Python objects")
            elif path in ("sys.modules.update", "sys.modules.__setitem__", "sys.modules.setdefault",
                          "sys.settrace", "sys.setprofile", "threading.settrace", "threading.setprofile",
                          "sys.addaudithook", "builtins.__dict__.update") or \
                    path.startswith("sys.meta_path."):
                c.add("harness_patching", node.lineno, f"{path}(...)")


_INTROSPECTION_CALLS = {"sys._getframe", "inspect.currentframe", "inspect.stack", "inspect.getouterframes",
                        "inspect.trace", "gc.get_objects", "gc.get_referrers", "gc.get_referents",
                        "traceback.extract_stack", "traceback.walk_stack", "sys._current_frames"}
_FRAME_ATTRS = {"f_back", "f_locals", "f_globals", "tb_frame", "gi_frame"}


def _check_introspection(tree: ast.Module, aliases: _Aliases, c: _Collector) -> None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            path = aliases.resolve(node.func) or ""
            if path in _INTROSPECTION_CALLS:
                c.add("harness_introspection", node.lineno, f"{path}()")
        elif isinstance(node, ast.Attribute) and node.attr in _FRAME_ATTRS:
            c.add("harness_introspection", node.lineno, f".{node.attr}")


_SUBCLASS_BASES = {"torch.Tensor", "torch._C._TensorBase", "torch._C.TensorBase", "torch.nn.Parameter",
                   "torch.nn.parameter.Parameter", "torch.overrides.TorchFunctionMode",
                   "torch.utils._python_dispatch.TorchDispatchMode"}
_SUBCLASS_CALLS = {"torch.Tensor._make_subclass", "torch.Tensor._make_wrapper_subclass",
                   "torch._C._set_torch_function_mode", "torch._C._push_on_torch_function_stack"}


def _check_subclass(tree: ast.Module, aliases: _Aliases, c: _Collector) -> None:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                path = aliases.resolve(base) or ""
                if path in _SUBCLASS_BASES or path.endswith(("TorchFunctionMode", "TorchDispatchMode")):
                    c.add("tensor_subclass", node.lineno, f"class {node.name}({_dotted(base)})")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                node.name in ("__torch_function__", "__torch_dispatch__"):
            c.add("tensor_subclass", node.lineno, f"def {node.name}")
        elif isinstance(node, ast.Call):
            path = aliases.resolve(node.func) or ""
            if path in _SUBCLASS_CALLS or isinstance(node.func, ast.Attribute) and node.func.attr == "as_subclass":
                c.add("tensor_subclass", node.lineno, f"{path or node.func.attr}(...)")


_KEY_CALLS = {"id", "hash", "builtins.id", "builtins.hash"}
_KEY_ATTRS = {"data_ptr", "shape", "size", "_version", "storage", "untyped_storage", "storage_offset", "_cdata"}
_CACHE_DECORATORS = {"functools.lru_cache", "functools.cache", "lru_cache", "cache"}


def _keyish(node: ast.AST, aliases: _Aliases, tainted: set[str]) -> str | None:
    """The pointer/identity/shape construct an expression is built from, if any."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and (aliases.resolve(sub.func) or "") in _KEY_CALLS:
            return f"{aliases.resolve(sub.func)}()"
        if isinstance(sub, ast.Attribute) and sub.attr in _KEY_ATTRS:
            return f".{sub.attr}"
        if isinstance(sub, ast.Name) and sub.id in tainted:
            return sub.id
    return None


def _builds_key(value: ast.AST, aliases: _Aliases) -> bool:
    """Whether an assigned value is a key itself (`x.data_ptr()`, `(id(x), x.shape)`), not a computed result."""
    if not isinstance(value, ast.Call):
        return True
    func = value.func
    if isinstance(func, ast.Attribute) and func.attr in _KEY_ATTRS:
        return True
    return (aliases.resolve(func) or "") in ("tuple", "str", "hash", "id", "frozenset", "builtins.id", "builtins.hash")


def _lookup(node: ast.AST, aliases: _Aliases, keys: set[str]) -> str | None:
    """`C[key]` or `C.get(key)` with a pointer/shape-derived key: the construct, else None."""
    if isinstance(node, ast.Subscript):
        k = _keyish(node.slice, aliases, keys)
        if k:
            return f"{_dotted(node.value) or 'cache'}[{k}]"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "setdefault") \
            and node.args:
        k = _keyish(node.args[0], aliases, keys)
        if k:
            return f"{_dotted(node.func.value) or 'cache'}.{node.func.attr}({k})"
    return None


def _output_functions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """ModelNew.forward and the functions/methods whose results it returns, transitively.

    Only these can return a cached *output*; a shape-keyed cache of compiled kernels elsewhere is fine.
    """
    funcs, classes = _module_defs(tree)
    new = classes.get("ModelNew")
    if new is None:
        return []
    methods = {n.name: n for n in new.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    start = methods.get("forward") or methods.get("__call__")
    if start is None:
        return []

    def callee(call: ast.Call) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        f = call.func
        if isinstance(f, ast.Name):
            return funcs.get(f.id)
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
            return methods.get(f.attr)
        return None

    out: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
    stack = [start]
    while stack:
        fn = stack.pop()
        if any(fn is o for o in out):
            continue
        out.append(fn)
        assigned: dict[str, list[ast.Call]] = {}
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        assigned.setdefault(t.id, []).append(node.value)
        for ret in (n for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None):
            for sub in ast.walk(ret.value):
                calls = [sub] if isinstance(sub, ast.Call) else assigned.get(sub.id, []) \
                    if isinstance(sub, ast.Name) else []
                for call in calls:
                    target = callee(call)
                    if target is not None:
                        stack.append(target)
    return out


def _check_cache(tree: ast.Module, aliases: _Aliases, c: _Collector) -> None:
    for fn in _output_functions(tree):
        for dec in fn.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            if (aliases.resolve(target) or "") in _CACHE_DECORATORS:
                c.add("result_cache", fn.lineno, f"@{_dotted(target)} on {fn.name}")
        _check_cache_in_function(fn, aliases, c)


def _check_cache_in_function(fn: ast.FunctionDef | ast.AsyncFunctionDef, aliases: _Aliases, c: _Collector) -> None:
    keys: set[str] = set()  # locals holding pointer/shape-derived keys
    cached: dict[str, tuple[int, str]] = {}  # locals read from or stored into a keyed cache: line, construct
    returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None]
    in_return = {id(sub) for r in returns for sub in ast.walk(r)}
    call_uses: dict[str, list[int]] = {}  # local -> lines where it is an argument of a call (a kernel writes it)
    for sub in ast.walk(fn):
        if isinstance(sub, ast.Call) and id(sub) not in in_return:
            for arg in list(sub.args) + [k.value for k in sub.keywords]:
                if isinstance(arg, ast.Name):
                    call_uses.setdefault(arg.id, []).append(sub.lineno)
    statements = sorted((n for n in ast.walk(fn) if isinstance(n, ast.Assign)), key=lambda n: (n.lineno, n.col_offset))
    for node in statements:
        value = node.value
        construct = _lookup(value, aliases, keys)
        for t in node.targets:
            if isinstance(t, ast.Name):
                if construct:
                    cached[t.id] = (node.lineno, construct)
                elif _keyish(value, aliases, keys) and _builds_key(value, aliases):
                    keys.add(t.id)
            elif isinstance(t, ast.Subscript):
                key = _keyish(t.slice, aliases, keys)
                if key:
                    for sub in ast.walk(value):
                        if isinstance(sub, ast.Name):
                            cached.setdefault(sub.id, (node.lineno, f"{_dotted(t.value) or 'cache'}[{key}] = {sub.id}"))
    for ret in returns:
        direct = next((d for d in (_lookup(sub, aliases, keys) for sub in ast.walk(ret.value)) if d), None)
        if direct:
            c.add("result_cache", ret.lineno, f"return {direct}")
            continue
        for sub in ast.walk(ret.value):
            if isinstance(sub, ast.Name) and sub.id in cached:
                line, construct = cached[sub.id]
                if not any(line < use <= ret.lineno for use in call_uses.get(sub.id, [])):
                    c.add("result_cache", line, f"{construct}, returned at line {ret.lineno}")


_LOW_DTYPES = {"torch.float16", "torch.half", "torch.bfloat16"}
_CXX_LOW = re.compile(r"\b__half2?\b|\bhalf2\b|\b__nv_bfloat162?\b|\bnv_bfloat162?\b|\b__float2half\w*|"
                      r"\b__float22half2\w*|\b__float2bfloat16\w*|\b__floats2bfloat162\w*|\b(?:at|torch|c10)::k"
                      r"(?:Half|BFloat16)\b|\bc10::(?:Half|BFloat16)\b|\bat::(?:Half|BFloat16)\b|"
                      r"\bwmma::precision::tf32\b|\b__float_to_tf32\b|\bcvt\.rna\.tf32\b|<cuda_fp16\.h>|<cuda_bf16\.h>")
_LOW_TASK = re.compile(r"float16|bfloat16|\bhalf\b|\.half\(\)|torch\.half")


def _check_precision(tree: ast.Module, aliases: _Aliases, c: _Collector) -> None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            path = aliases.resolve(func) or ""
            if isinstance(func, ast.Attribute) and func.attr in ("half", "bfloat16") and not node.args and \
                    not aliases.is_imported(func.value):
                c.add("precision_downgrade", node.lineno, f".{func.attr}()")
            if path in ("torch.set_float32_matmul_precision",) and node.args and \
                    isinstance(node.args[0], ast.Constant) and node.args[0].value != "highest":
                c.add("precision_downgrade", node.lineno, f"set_float32_matmul_precision({node.args[0].value!r})")
            if path.endswith("autocast") and (path.startswith("torch") or aliases.is_imported(func)):
                c.add("precision_downgrade", node.lineno, f"{path}(...)")
            for arg in list(node.args) + [k.value for k in node.keywords]:
                if (aliases.resolve(arg) or "") in _LOW_DTYPES:
                    c.add("precision_downgrade", node.lineno, f"{_dotted(func) or 'call'}(..., {aliases.resolve(arg)})")
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                path = aliases.resolve(t) or ""
                if path.endswith(("allow_tf32", "allow_fp16_reduced_precision_reduction",
                                  "allow_bf16_reduced_precision_reduction")) and \
                        isinstance(node.value, ast.Constant) and node.value.value is True:
                    c.add("precision_downgrade", node.lineno, f"{path} = True")
    for line, text in _string_hits(tree, _CXX_LOW):
        c.add("precision_downgrade", line, text)


_WORKER_FILES = re.compile(r"\b(?:result|progress|worker|outcome|sandbox|job|ready)\.json\b|\b(?:result|progress)_path\b")


def _check_forgery(tree: ast.Module, aliases: _Aliases, c: _Collector) -> None:
    """The worker's verdict is a file whose path is in its spec (argv[1]); code in the worker can overwrite it."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Attribute, ast.Name)) and (aliases.resolve(node) or "") == "sys.argv":
            c.add("result_forgery", node.lineno, "sys.argv")
    for line, text in _string_hits(tree, _WORKER_FILES):
        c.add("result_forgery", line, repr(text))


# ---------------------------------------------------------------------------------------- entry point


def source_findings(candidate_source: str, task_source: str, *, precision: str = "fp32") -> list[Finding]:
    """Static integrity findings for a candidate's source (nothing is executed).

    `task_source` decides whether the task is fp32 (precision findings are raised only then, and only
    when `precision` is "fp32"). A candidate that does not parse yields no findings: the build reports it.
    """
    try:
        tree = ast.parse(candidate_source)
    except (SyntaxError, ValueError):
        return []
    c = _Collector(candidate_source.splitlines())
    aliases = _Aliases(tree)
    reachable = _reachable(tree)
    helpers = _torch_helpers(tree, aliases)
    _check_fallback(reachable, aliases, helpers, c)
    _check_reference(tree, aliases, c)
    _check_threads(tree, aliases, c)
    _check_streams(tree, aliases, c)
    _check_patching(tree, aliases, c)
    _check_introspection(tree, aliases, c)
    _check_subclass(tree, aliases, c)
    _check_cache(tree, aliases, c)
    _check_forgery(tree, aliases, c)
    if precision == "fp32" and not _LOW_TASK.search(_code_only(task_source)):
        _check_precision(tree, aliases, c)
    return c.findings()


def _code_only(source: str) -> str:
    """Task source without comments and docstrings (a docstring saying 'not fp16' is not an fp16 task)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return source
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            body[0].value.value = ""
    return ast.unparse(tree)
