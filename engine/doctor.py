"""`cudaforge doctor`: is this machine ready to evaluate, profile and talk to the LLMs?

Each check returns a `Check` (pass / fail / warn / skip) with a one-line detail and, for anything
not passing, the fix. External commands, HTTP and the environment are parameters so CI can run
every branch with fakes; nothing here changes the system (the counter-permission fix is printed,
never applied).

Counter permission: `ncu --query-metrics` does not touch the counters, so it cannot reveal
ERR_NVGPUCTRPERM. The static check reads the driver parameter NVIDIA documents for this
(`RmProfilingAdminOnly` in /proc/driver/nvidia/params) and the effective user; the definitive check
is a real profile of a one-kernel program through the worker, whose `ProfileResult` is passed in as
`profile_run` (see `check_profile_run`).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from cudaforge.engine.errors import did_you_mean
from cudaforge.engine.gpu.specs import (
    GpuSpec,
    compare_with_properties,
    detect_gpu_spec,
    query_nvidia_smi,
)
from cudaforge.engine.profiling.result import ProfileResult
from cudaforge.engine.profiling.runner import PERMISSION_FIX, resolve_ncu
from cudaforge.engine.profiling.settings import NcuSettings

Status = Literal["pass", "fail", "warn", "skip"]


@dataclass(frozen=True)
class Check:
    """The result of one readiness check; `fix` says what to do when it does not pass."""

    name: str
    status: Status
    detail: str
    fix: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "fix": self.fix}


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    stdout: str = ""
    stderr: str = ""


CommandRunner = Callable[[Sequence[str], float], CommandResult]
HttpGet = Callable[[str, Mapping[str, str], float], tuple[int, bytes]]
# (name, base_url, api_key_env[, provider[, model]]): with a model, the endpoint must list it
Endpoint = tuple[str, str, str] | tuple[str, str, str, str] | tuple[str, str, str, str, str]


def run_command(argv: Sequence[str], timeout_s: float) -> CommandResult:
    """Run a short command; output captured (these commands print little and exit quickly)."""
    try:
        proc = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return CommandResult(returncode=124, stderr=f"timed out after {timeout_s:g} s")
    except OSError as exc:
        return CommandResult(returncode=127, stderr=str(exc))
    return CommandResult(returncode=proc.returncode, stdout=proc.stdout, stderr=proc.stderr)


def http_get(url: str, headers: Mapping[str, str], timeout_s: float) -> tuple[int, bytes]:
    """GET with urllib; returns (status, body). HTTP errors are statuses, not exceptions."""
    request = urllib.request.Request(url, headers=dict(headers), method="GET")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - configured URL
            return response.status, response.read(1 << 20)
    except urllib.error.HTTPError as exc:
        return exc.code, b""


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


# ---------------------------------------------------------------------------------------------
# Individual checks

_TORCH_PROBE = r"""
import json, sys
out = {}
try:
    import torch
    out["torch"] = torch.__version__
    out["cuda_build"] = torch.version.cuda
    out["available"] = bool(torch.cuda.is_available())
    if out["available"]:
        out["count"] = torch.cuda.device_count()
        index = int(sys.argv[1])
        p = torch.cuda.get_device_properties(index)
        keys = ("name", "major", "minor", "multi_processor_count", "total_memory", "L2_cache_size",
                "clock_rate", "memory_clock_rate", "memory_bus_width", "shared_memory_per_block",
                "shared_memory_per_block_optin", "shared_memory_per_multiprocessor",
                "max_threads_per_multi_processor", "regs_per_multiprocessor", "warp_size")
        out["props"] = {k: getattr(p, k) for k in keys if hasattr(p, k)}
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def probe_torch(python: str, gpu_index: int, run: CommandRunner) -> dict[str, Any]:
    """torch version, CUDA build and device properties, read in a child process so this process
    never initialises CUDA. {'error': ...} when the probe itself fails."""
    res = run([python, "-c", _TORCH_PROBE, str(gpu_index)], 120.0)
    line = next((ln for ln in reversed(res.stdout.splitlines()) if ln.startswith("{")), "")
    if not line:
        tail = (res.stderr or res.stdout).strip().splitlines()
        return {"error": tail[-1] if tail else f"python exited with code {res.returncode}"}
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return {"error": "unreadable probe output"}
    return data if isinstance(data, dict) else {"error": "unreadable probe output"}


def check_gpu(smi: Mapping[str, Any] | None, torch_info: Mapping[str, Any], device: str) -> Check:
    """A GPU and its driver, from nvidia-smi (or torch when nvidia-smi is missing)."""
    if device != "cuda":
        return Check("gpu", "skip", f"device is {device!r}; no GPU needed")
    props = torch_info.get("props") or {}
    if smi:
        cc = f", compute capability {smi['major']}.{smi['minor']}" if "major" in smi else ""
        count = f", {torch_info['count']} visible device(s)" if torch_info.get("count") else ""
        return Check("gpu", "pass", f"{smi.get('name')} (driver {smi.get('driver_version', '?')}{cc}){count}")
    if props:
        return Check(
            "gpu",
            "warn",
            f"{props.get('name')} seen by torch, but nvidia-smi is missing",
            "install the NVIDIA driver utilities (nvidia-smi) so the driver version can be checked",
        )
    return Check(
        "gpu",
        "fail",
        "no NVIDIA GPU or driver found (nvidia-smi missing or failing, torch sees no CUDA device)",
        "install the NVIDIA driver and check `nvidia-smi` lists the GPU; in a container, start it with GPU "
        "access (e.g. `--gpus all`); or run with `--device cpu`",
    )


def check_torch(torch_info: Mapping[str, Any], device: str) -> Check:
    """torch importable, built with CUDA, and able to use the GPU."""
    if "torch" not in torch_info:
        return Check(
            "torch",
            "fail",
            f"cannot import torch: {torch_info.get('error', 'unknown error')}",
            "install PyTorch 2.11-2.14 in the environment that runs cudaforge",
        )
    version = torch_info["torch"]
    build = torch_info.get("cuda_build")
    if device != "cuda":
        return Check("torch", "pass", f"torch {version} (CUDA build {build or 'none'})")
    if not build:
        return Check(
            "torch",
            "fail",
            f"torch {version} is a CPU-only build",
            "install a CUDA build of PyTorch (see pytorch.org for the pip index URL of your CUDA version)",
        )
    if not torch_info.get("available"):
        why = torch_info.get("error", "torch.cuda.is_available() is False")
        return Check(
            "torch",
            "fail",
            f"torch {version} (CUDA {build}) cannot use the GPU: {why}",
            "make sure the driver supports CUDA " + str(build) + " (update the driver or install a torch "
            "built for an older CUDA) and that CUDA_VISIBLE_DEVICES does not hide the GPU",
        )
    return Check("torch", "pass", f"torch {version}, CUDA {build}, {torch_info.get('count', '?')} device(s)")


def check_nvcc(
    which: Callable[[str], str | None], run: CommandRunner, env: Mapping[str, str], cuda_build: str | None
) -> Check:
    """nvcc: needed by the `inline` candidate format (load_inline); NVRTC candidates do without."""
    path = which("nvcc")
    if path is None:
        home = env.get("CUDA_HOME") or env.get("CUDA_PATH")
        candidate = os.path.join(home, "bin", "nvcc") if home else ""
        path = candidate if candidate and os.path.isfile(candidate) else None
    if path is None:
        return Check(
            "nvcc",
            "warn",
            "nvcc not found (only the `inline` candidate format needs it)",
            "install the CUDA toolkit and put its bin/ on PATH, or set CUDA_HOME; NVRTC candidates work without it",
        )
    res = run([path, "--version"], 30.0)
    m = re.search(r"release (\d+\.\d+)", res.stdout)
    if res.returncode != 0 or not m:
        return Check(
            "nvcc", "warn", f"{path} did not report a version", "check the CUDA toolkit installation"
        )
    release = m.group(1)
    if cuda_build and release.split(".")[0] != str(cuda_build).split(".")[0]:
        return Check(
            "nvcc",
            "warn",
            f"nvcc {release} at {path}, but torch is built with CUDA {cuda_build}",
            "use a toolkit with the same major version as torch's CUDA build for `inline` candidates",
        )
    return Check("nvcc", "pass", f"nvcc {release} at {path}")


def check_cpu_toolchain(which: Callable[[str], str | None], env: Mapping[str, str]) -> list[Check]:
    """The CPU device builds `cpu` candidates with load_inline: a C++ compiler and ninja must be there."""
    compiler = next((p for p in (env.get("CXX"), "c++", "g++", "clang++") if p and which(p)), None)
    checks = [Check("c++", "pass", f"C++ compiler {which(compiler)}") if compiler else
              Check("c++", "fail", "no C++ compiler found (c++, g++, clang++ or $CXX)",
                    "install one (e.g. apt install g++): `cpu` candidates are built with it")]
    ninja = which("ninja")
    checks.append(Check("ninja", "pass", f"ninja {ninja}") if ninja else
                  Check("ninja", "fail", "ninja not found (torch's load_inline builds with it)",
                        "pip install ninja (or apt install ninja-build)"))
    return checks


def check_ncu(settings: NcuSettings, which: Callable[[str], str | None], run: CommandRunner) -> Check:
    """ncu present and runnable (profiling is optional: absent ncu is a failure only when enabled)."""
    if not settings.enabled:
        return Check("ncu", "skip", "profiling disabled ([ncu] enabled = false)")
    path = resolve_ncu(settings.path, which)
    if path is None:
        return Check(
            "ncu",
            "fail",
            f"ncu not found ('{settings.path}')",
            "install Nsight Compute (it ships with the CUDA toolkit) and put it on PATH, set [ncu] path "
            "in cudaforge.toml, or set [ncu] enabled = false to evaluate without hardware counters",
        )
    res = run([path, "--version"], 30.0)
    m = re.search(r"Version\s+(\S+)", res.stdout)
    if res.returncode != 0 or not m:
        return Check(
            "ncu",
            "fail",
            f"{path} --version failed (exit {res.returncode})",
            "reinstall Nsight Compute or point [ncu] path at a working ncu",
        )
    return Check("ncu", "pass", f"ncu {m.group(1)} at {path}")


def check_counter_permission(
    read_text: Callable[[str], str | None], euid: int | None, settings: NcuSettings
) -> Check:
    """Static check of GPU performance-counter access (see the module docstring for why static)."""
    if not settings.enabled:
        return Check("ncu_permission", "skip", "profiling disabled")
    params = read_text("/proc/driver/nvidia/params")
    if params is None:
        return Check(
            "ncu_permission",
            "warn",
            "cannot read /proc/driver/nvidia/params; a real profile will tell (`cudaforge profile`)",
        )
    m = re.search(r"RmProfilingAdminOnly:\s*(\d+)", params)
    if m is None:
        return Check(
            "ncu_permission",
            "warn",
            "the driver does not report RmProfilingAdminOnly; a real profile will tell",
        )
    if m.group(1) == "0":
        return Check(
            "ncu_permission", "pass", "performance counters open to all users (RmProfilingAdminOnly: 0)"
        )
    if euid == 0:
        return Check("ncu_permission", "pass", "counters restricted to admins, and cudaforge runs as root")
    return Check(
        "ncu_permission",
        "fail",
        "performance counters are restricted to admin users (RmProfilingAdminOnly: 1)",
        PERMISSION_FIX,
    )


def check_profile_run(result: ProfileResult) -> Check:
    """The definitive profiling check, from a real ncu profile of a one-kernel program (the worker)."""
    if result.ok:
        subs = f", {len(result.substitutions)} metric(s) substituted" if result.substitutions else ""
        absent = f", absent: {', '.join(result.absent_metrics)}" if result.absent_metrics else ""
        return Check(
            "ncu_profile",
            "pass",
            f"profiled {len(result.kernels)} kernel(s) in {result.wall_s:.1f} s{subs}{absent}",
        )
    if result.error_kind == "permission_denied":
        return Check(
            "ncu_profile", "fail", "ERR_NVGPUCTRPERM: no access to GPU performance counters", PERMISSION_FIX
        )
    return Check("ncu_profile", "fail", f"profiling failed [{result.error_kind}]", result.message)


def check_gpu_spec(
    smi: Mapping[str, Any] | None, torch_info: Mapping[str, Any], device: str
) -> tuple[Check, GpuSpec | None]:
    """Which GPU spec the analyzer will use, and whether the device contradicts it."""
    if device != "cuda":
        return Check("gpu_spec", "skip", "no GPU in use"), None
    props: dict[str, Any] = dict(torch_info.get("props") or {})
    if not props and smi:
        props = dict(smi)
    if "major" not in props:
        return Check("gpu_spec", "skip", "no GPU properties available"), None
    name = str(props.get("name") or (smi or {}).get("name", ""))
    spec = detect_gpu_spec(name, (int(props["major"]), int(props["minor"])), props)
    if spec.detected_from == "device_properties":
        return Check(
            "gpu_spec",
            "warn",
            f"no GPU spec sheet matches {name!r}; built from device properties, unknown: {', '.join(spec.missing_fields)}",
            "add profiles/gpus/<card>.toml with the vendor's figures (see the existing files) so tensor-core "
            "peaks and the speed-of-light check are known",
        ), spec
    check = compare_with_properties(spec, props)
    if check.mismatches:
        return Check(
            "gpu_spec",
            "warn",
            f"{spec.name} ({spec.key}) differs from the device: " + "; ".join(check.mismatches),
            "check profiles/gpus/" + spec.key + ".toml against the card's datasheet",
        ), spec
    extra = f" ({'; '.join(spec.notes)})" if spec.detected_from != "spec sheet" and spec.notes else ""
    return Check("gpu_spec", "pass", f"{spec.name} [{spec.key}.toml]{extra}"), spec


DEFAULT_BASE_URLS = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
}


def default_base_url(provider: str) -> str | None:
    """The public endpoint of a provider, for configurations that leave base_url empty."""
    return DEFAULT_BASE_URLS.get(provider)


def _models_url(base_url: str, provider: str) -> str:
    base = base_url.rstrip("/")
    if provider == "anthropic" and not base.endswith("/v1"):
        base += "/v1"
    return base + "/models"


def check_endpoint(endpoint: Endpoint, env: Mapping[str, str], get: HttpGet, timeout_s: float = 5.0) -> Check:
    """GET {base_url}/models with the key from its env var: costs nothing, proves URL and key.
    The key is sent only in the request header and never appears in the result."""
    name, base_url, key_env = endpoint[0], endpoint[1], endpoint[2]
    provider = endpoint[3] if len(endpoint) > 3 else ("anthropic" if "anthropic" in base_url else "openai")  # type: ignore[misc]
    model = endpoint[4] if len(endpoint) > 4 else ""  # type: ignore[misc]
    check_name = f"llm:{name}"
    headers = {"User-Agent": "cudaforge-doctor"}
    if key_env:
        key = env.get(key_env, "")
        if not key:
            return Check(
                check_name,
                "fail",
                f"{key_env} is not set",
                f"export {key_env}=<your key> in the shell that runs cudaforge (keys are read only from the environment)",
            )
        if provider == "anthropic":
            headers["x-api-key"] = key
            headers["anthropic-version"] = "2023-06-01"
        else:
            headers["Authorization"] = f"Bearer {key}"
    url = _models_url(base_url, provider)
    try:
        status, body = get(url, headers, timeout_s)
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", exc)
        return Check(
            check_name,
            "fail",
            f"cannot reach {url}: {type(exc).__name__}: {reason}",
            "check base_url, the network or proxy settings, and that the server is running",
        )
    if status == 200:
        count = ""
        listed: list[str] | None = None
        try:
            data = json.loads(body.decode("utf-8", errors="replace") or "{}")
            models = data.get("data") if isinstance(data, dict) else None
            if isinstance(models, list):
                count = f", {len(models)} model(s) listed"
                listed = [str(m.get("id")) for m in models if isinstance(m, dict) and m.get("id")]
        except json.JSONDecodeError:
            pass
        if model and listed is not None and model not in listed:
            return Check(check_name, "fail", f"{url} answered, but model '{model}' is not among the "
                                             f"{len(listed)} it lists{did_you_mean(model, listed)}",
                         f"set [{name}] model to one of: {', '.join(sorted(listed)[:8])}"
                         + (" ..." if len(listed) > 8 else ""))
        return Check(check_name, "pass", f"{url} answered{count}" + (f", '{model}' among them" if model and listed
                                                                     else ""))
    if status in (401, 403):
        return Check(
            check_name,
            "fail",
            f"{url} rejected the key from {key_env} (HTTP {status})",
            f"check that {key_env} holds a valid key for this endpoint",
        )
    if status == 404:
        return Check(
            check_name,
            "warn",
            f"{url} has no models list (HTTP 404)",
            "check base_url (OpenAI-compatible servers usually serve /v1/models); some servers lack it",
        )
    return Check(
        check_name, "warn", f"{url} answered HTTP {status}", "retry later or check the server's status"
    )


# ---------------------------------------------------------------------------------------------
# The whole doctor


def run_doctor(
    *,
    device: str = "cuda",
    gpu_index: int = 0,
    ncu_settings: NcuSettings | None = None,
    endpoints: Sequence[Endpoint] = (),
    profile_run: ProfileResult | None = None,
    python: str = sys.executable,
    run: CommandRunner = run_command,
    which: Callable[[str], str | None] = shutil.which,
    get: HttpGet = http_get,
    env: Mapping[str, str] | None = None,
    read_text: Callable[[str], str | None] = _read_text,
    euid: int | None = None,
) -> list[Check]:
    """All checks, in the order a person fixes them: GPU/driver, torch, nvcc, ncu, counter access,
    GPU spec, then each LLM endpoint (name, base_url, api_key_env[, provider])."""
    env = os.environ if env is None else env
    settings = ncu_settings or NcuSettings()
    if euid is None:
        euid = os.geteuid() if hasattr(os, "geteuid") else None
    smi = (
        query_nvidia_smi(gpu_index, run=lambda argv, t: run(argv, t), which=which)
        if device == "cuda"
        else None
    )
    torch_info = probe_torch(python, gpu_index, run)
    checks = [check_gpu(smi, torch_info, device), check_torch(torch_info, device)]
    if device == "cuda":
        checks.append(check_nvcc(which, run, env, torch_info.get("cuda_build")))
        checks.append(check_ncu(settings, which, run))
        checks.append(check_counter_permission(read_text, euid, settings))
        if profile_run is not None:
            checks.append(check_profile_run(profile_run))
    else:
        checks.extend(check_cpu_toolchain(which, env))
    gp_check, _ = check_gpu_spec(smi, torch_info, device)
    checks.append(gp_check)
    for endpoint in endpoints:
        checks.append(check_endpoint(endpoint, env, get))
    return checks


def doctor_exit_code(checks: Sequence[Check]) -> int:
    """0 when nothing failed, 3 (a needed tool or device is unavailable) otherwise."""
    return 3 if any(c.status == "fail" for c in checks) else 0


def format_checks(checks: Sequence[Check]) -> str:
    """One line per check, the fix indented under anything that did not pass, and a tally."""
    width = max([len(c.name) for c in checks] + [8])
    lines = []
    for c in checks:
        lines.append(f"[{c.status.upper():<4}] {c.name:<{width}}  {c.detail}")
        if c.fix and c.status != "pass":
            lines.append(f"       {'':<{width}}  fix: {c.fix}")
    tally = {s: sum(1 for c in checks if c.status == s) for s in ("pass", "warn", "fail", "skip")}
    lines.append(", ".join(f"{n} {s}" for s, n in tally.items() if n) or "no checks")
    return "\n".join(lines)
