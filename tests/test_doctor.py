"""`cudaforge doctor` checks with fake tools, fake HTTP, and one real local HTTP server."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from cudaforge.engine.doctor import (
    Check,
    CommandResult,
    check_endpoint,
    check_profile_run,
    doctor_exit_code,
    format_checks,
    http_get,
    run_doctor,
)
from cudaforge.engine.profiling import NcuSettings, interpret_output, plan_metrics

FIX = Path(__file__).parent / "fixtures" / "ncu"
SECRET = "sk-SECRET-do-not-print-123"
TORCH_OK = {
    "torch": "2.11.0+cu130",
    "cuda_build": "13.0",
    "available": True,
    "count": 1,
    "props": {
        "name": "NVIDIA H200",
        "major": 9,
        "minor": 0,
        "multi_processor_count": 132,
        "total_memory": 150_109_880_320,
        "shared_memory_per_block_optin": 232_448,
    },
}


class FakeTools:
    """Fake `which` and command runner for a machine with the given tools."""

    def __init__(self, tools: Sequence[str] = (), torch: dict[str, object] | None = None) -> None:
        self.tools = set(tools)
        self.torch = torch
        self.calls: list[list[str]] = []

    def which(self, name: str) -> str | None:
        return f"/usr/bin/{name}" if name in self.tools else None

    def run(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        self.calls.append(list(argv))
        prog = Path(argv[0]).name
        if prog == "nvidia-smi":
            return CommandResult(0, "NVIDIA H200, 9.0, 143771, 1980, 580.65.06\n")
        if prog == "nvcc":
            return CommandResult(
                0, "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.48\n"
            )
        if prog == "ncu":
            return CommandResult(
                0, "NVIDIA (R) Nsight Compute Command Line Profiler\nVersion 2025.3.1.0 (build 1)\n"
            )
        if "-c" in argv:  # the torch probe
            if self.torch is None:
                return CommandResult(1, "", "ModuleNotFoundError: No module named 'torch'")
            return CommandResult(0, json.dumps(self.torch) + "\n")
        return CommandResult(127, "", "not found")


def _params(admin_only: int | None):  # noqa: ANN202
    def read(path: str) -> str | None:
        if admin_only is None:
            return None
        return f"ResmanDebugLevel: 4294967295\nRmProfilingAdminOnly: {admin_only}\n"

    return read


def _by_name(checks: Sequence[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def test_bare_machine_fails_with_fixes() -> None:
    tools = FakeTools()
    checks = run_doctor(
        run=tools.run,
        which=tools.which,
        env={},
        read_text=_params(None),
        euid=1000,
        python="python3",
        get=lambda *a: (200, b""),
    )
    c = _by_name(checks)
    assert c["gpu"].status == "fail" and "nvidia" in c["gpu"].fix.lower()
    assert c["torch"].status == "fail" and "PyTorch" in c["torch"].fix
    assert c["nvcc"].status == "warn"
    assert c["ncu"].status == "fail" and "[ncu] path" in c["ncu"].fix
    assert c["ncu_permission"].status == "warn"
    assert c["gpu_spec"].status == "skip"
    assert doctor_exit_code(checks) == 3
    text = format_checks(checks)
    assert "[FAIL] ncu" in text and "fix: install Nsight Compute" in text


def test_healthy_machine_passes() -> None:
    tools = FakeTools(["nvidia-smi", "nvcc", "ncu"], TORCH_OK)
    checks = run_doctor(
        run=tools.run, which=tools.which, env={}, read_text=_params(0), euid=1000, python="py"
    )
    c = _by_name(checks)
    assert [x.status for x in checks] == ["pass"] * len(checks), format_checks(checks)
    assert "580.65.06" in c["gpu"].detail
    assert "2025.3.1.0" in c["ncu"].detail and "13.0" in c["nvcc"].detail
    assert "h200_sxm" in c["gpu_spec"].detail
    assert doctor_exit_code(checks) == 0
    assert tools.calls[0][0] == "/usr/bin/nvidia-smi"  # no CUDA in this process: nvidia-smi + a child probe
    assert any(call[:2] == ["py", "-c"] for call in tools.calls)


def test_counter_permission_restricted() -> None:
    tools = FakeTools(["nvidia-smi", "nvcc", "ncu"], TORCH_OK)
    user = _by_name(run_doctor(run=tools.run, which=tools.which, env={}, read_text=_params(1), euid=1000))
    assert user["ncu_permission"].status == "fail"
    assert "NVreg_RestrictProfilingToAdminUsers=0" in user["ncu_permission"].fix
    root = _by_name(run_doctor(run=tools.run, which=tools.which, env={}, read_text=_params(1), euid=0))
    assert root["ncu_permission"].status == "pass"


def test_profiling_disabled_skips_ncu_checks() -> None:
    tools = FakeTools(["nvidia-smi"], TORCH_OK)
    c = _by_name(
        run_doctor(
            ncu_settings=NcuSettings(enabled=False),
            run=tools.run,
            which=tools.which,
            env={},
            read_text=_params(1),
            euid=1000,
        )
    )
    assert c["ncu"].status == "skip" and c["ncu_permission"].status == "skip"


def test_cpu_device_needs_no_gpu() -> None:
    tools = FakeTools([], dict(TORCH_OK, cuda_build=None, available=False, props={}))
    c = _by_name(run_doctor(device="cpu", run=tools.run, which=tools.which, env={}, read_text=_params(None)))
    assert c["gpu"].status == "skip" and c["torch"].status == "pass"
    assert "ncu" not in c and c["gpu_spec"].status == "skip"


def test_cpu_only_torch_on_a_gpu_machine() -> None:
    tools = FakeTools(["nvidia-smi"], {"torch": "2.13.0+cpu", "cuda_build": None, "available": False})
    c = _by_name(run_doctor(run=tools.run, which=tools.which, env={}, read_text=_params(0)))
    assert c["torch"].status == "fail" and "CPU-only" in c["torch"].detail
    assert c["gpu"].status == "pass"  # nvidia-smi still sees the card
    assert c["gpu_spec"].status == "pass"  # from nvidia-smi's name and CC


def test_unknown_card_profile_warns() -> None:
    torch = dict(
        TORCH_OK, props={"name": "NVIDIA Future", "major": 12, "minor": 0, "multi_processor_count": 100}
    )
    tools = FakeTools(["ncu"], torch)
    c = _by_name(run_doctor(run=tools.run, which=tools.which, env={}, read_text=_params(0)))
    assert c["gpu_spec"].status == "warn" and "fp16_tensor_tflops" in c["gpu_spec"].detail


def test_profile_run_check() -> None:
    plan = plan_metrics(("gpu__time_duration.sum",), None)
    perm = interpret_output(
        (FIX / "synth_permission_denied.txt").read_text(), "", returncode=1, timed_out=False, plan=plan
    )
    bad = check_profile_run(perm)
    assert bad.status == "fail" and "NVreg_RestrictProfilingToAdminUsers=0" in bad.fix
    ok = interpret_output(
        (FIX / "ncu_raw_three_kernels.csv").read_text(), "", returncode=0, timed_out=False, plan=plan
    )
    assert check_profile_run(ok).status == "pass"
    tools = FakeTools(["nvidia-smi", "nvcc", "ncu"], TORCH_OK)
    checks = run_doctor(profile_run=perm, run=tools.run, which=tools.which, env={}, read_text=_params(0))
    assert _by_name(checks)["ncu_profile"].status == "fail"


# --- LLM endpoints --------------------------------------------------------------------------------


class FakeHttp:
    def __init__(
        self,
        status: int = 200,
        body: bytes = b'{"data": [{"id": "m1"}, {"id": "m2"}]}',
        raises: Exception | None = None,
    ) -> None:
        self.status, self.body, self.raises = status, body, raises
        self.requests: list[tuple[str, dict[str, str], float]] = []

    def __call__(self, url: str, headers, timeout_s: float) -> tuple[int, bytes]:  # noqa: ANN001
        self.requests.append((url, dict(headers), timeout_s))
        if self.raises:
            raise self.raises
        return self.status, self.body


def test_openai_compatible_endpoint_pass() -> None:
    http = FakeHttp()
    c = check_endpoint(("coder", "http://127.0.0.1:8000/v1/", "MY_KEY"), {"MY_KEY": SECRET}, http)
    assert c.status == "pass" and "2 model(s)" in c.detail and c.name == "llm:coder"
    url, headers, timeout = http.requests[0]
    assert url == "http://127.0.0.1:8000/v1/models" and headers["Authorization"] == f"Bearer {SECRET}"
    assert timeout == 5.0


def test_anthropic_endpoint_headers() -> None:
    http = FakeHttp()
    check_endpoint(
        ("judge", "https://api.anthropic.com", "ANTHROPIC_API_KEY"), {"ANTHROPIC_API_KEY": SECRET}, http
    )
    url, headers, _ = http.requests[0]
    assert url == "https://api.anthropic.com/v1/models"
    assert (
        headers["x-api-key"] == SECRET and "anthropic-version" in headers and "Authorization" not in headers
    )


@pytest.mark.parametrize(
    ("http", "env", "status", "word"),
    [
        (FakeHttp(), {}, "fail", "not set"),
        (FakeHttp(401, b""), {"K": SECRET}, "fail", "rejected"),
        (FakeHttp(404, b""), {"K": SECRET}, "warn", "404"),
        (FakeHttp(503, b""), {"K": SECRET}, "warn", "503"),
        (FakeHttp(raises=OSError("connection refused")), {"K": SECRET}, "fail", "cannot reach"),
    ],
)
def test_endpoint_failures_never_show_the_key(
    http: FakeHttp, env: dict[str, str], status: str, word: str
) -> None:
    c = check_endpoint(("coder", "https://llm.example/v1", "K"), env, http)
    assert c.status == status and word in c.detail
    assert SECRET not in format_checks([c]) and SECRET not in json.dumps(c.to_dict())


def test_local_server_without_a_key() -> None:
    http = FakeHttp()
    c = check_endpoint(("local", "http://127.0.0.1:9/v1", ""), {}, http)
    assert c.status == "pass" and "Authorization" not in http.requests[0][1]


def test_endpoints_are_part_of_run_doctor() -> None:
    tools = FakeTools(["nvidia-smi", "nvcc", "ncu"], TORCH_OK)
    checks = run_doctor(
        endpoints=[("coder", "https://x/v1", "K"), ("judge", "https://y/v1", "J")],
        run=tools.run,
        which=tools.which,
        env={"K": SECRET},
        read_text=_params(0),
        get=FakeHttp(),
    )
    c = _by_name(checks)
    assert c["llm:coder"].status == "pass" and c["llm:judge"].status == "fail"
    assert SECRET not in format_checks(checks)


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        ok = self.headers.get("Authorization") == f"Bearer {SECRET}" and self.path == "/v1/models"
        body = json.dumps({"data": [{"id": "local-model"}]}).encode() if ok else b"{}"
        self.send_response(200 if ok else 401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def models_server() -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 listing one model; yields its base URL."""
    server = HTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_real_urllib_against_a_local_server(models_server: str) -> None:
    good = check_endpoint(("coder", models_server, "K"), {"K": SECRET}, http_get)
    assert good.status == "pass" and "1 model(s)" in good.detail
    bad = check_endpoint(("coder", models_server, "K"), {"K": "wrong"}, http_get)
    assert bad.status == "fail" and "HTTP 401" in bad.detail
    unreachable = check_endpoint(("coder", "http://127.0.0.1:1/v1", ""), {}, http_get)
    assert unreachable.status == "fail" and "cannot reach" in unreachable.detail


def test_the_configured_model_must_be_among_those_listed(models_server: str) -> None:
    listed = check_endpoint(("coder", models_server, "K", "openai-compatible", "local-model"), {"K": SECRET}, http_get)
    assert listed.status == "pass" and "'local-model' among them" in listed.detail
    missing = check_endpoint(("judge", models_server, "K", "openai-compatible", "local-modle"), {"K": SECRET}, http_get)
    assert missing.status == "fail" and "model 'local-modle' is not among the 1 it lists" in missing.detail
    assert "did you mean 'local-model'" in missing.detail and "[judge] model" in missing.fix


def test_cpu_device_checks_the_cpp_compiler_and_ninja() -> None:
    import shutil

    torch_cpu = dict(TORCH_OK, cuda_build=None, available=False, props={})
    bare = FakeTools([], torch_cpu)
    c = _by_name(run_doctor(device="cpu", run=bare.run, which=bare.which, env={}, read_text=_params(None)))
    assert c["c++"].status == "fail" and "apt install g++" in c["c++"].fix
    assert c["ninja"].status == "fail" and "pip install ninja" in c["ninja"].fix
    assert doctor_exit_code(list(c.values())) == 3
    # this machine has both (the CPU tests build with them): the real PATH
    real = _by_name(run_doctor(device="cpu", run=bare.run, which=shutil.which, env={}, read_text=_params(None)))
    assert real["c++"].status == "pass" and real["ninja"].status == "pass"
    gpu = _by_name(run_doctor(run=bare.run, which=bare.which, env={}, read_text=_params(0)))
    assert "c++" not in gpu and "ninja" not in gpu  # the CUDA device has its own checks (nvcc)
