"""The ncu command line, the runner (with fake and real processes) and the [ncu] settings."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from cudaforge.engine.errors import ConfigError
from cudaforge.engine.profiling import (
    CUDAFORGE_METRICS,
    MINIMAL_METRICS,
    NcuSettings,
    build_ncu_command,
    run_process,
    run_profile,
)

FIX = Path(__file__).parent / "fixtures" / "ncu"
TARGET = [sys.executable, "-m", "cudaforge.engine.worker", "spec.json"]


def test_command_has_clock_control_nvtx_filter_and_launch_bound() -> None:
    cmd = build_ncu_command(TARGET, metrics=["a.sum", "b.pct"], ncu_path="/opt/ncu", launch_count=7)
    assert cmd[0] == "/opt/ncu"
    joined = " ".join(cmd)
    assert "--clock-control none" in joined
    i = cmd.index("--nvtx-include")
    assert "--nvtx" in cmd[:i] and cmd[i + 1] == "candidate/"
    assert cmd[cmd.index("--launch-count") + 1] == "8"  # + a profile spare's warm-up kernel
    assert "--csv" in cmd and cmd[cmd.index("--page") + 1] == "raw"
    assert cmd[cmd.index("--metrics") + 1] == "a.sum,b.pct"
    assert cmd[-len(TARGET) :] == TARGET  # the target comes last, untouched


def test_command_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        build_ncu_command([], metrics=["x"])
    with pytest.raises(ValueError):
        build_ncu_command(TARGET, metrics=["x"], launch_count=0)


class FakeNcu:
    """Answers `--query-metrics` with the real gh100 list and a profile with a given fixture."""

    def __init__(self, profile_output: str, *, returncode: int = 0, timed_out: bool = False) -> None:
        self.profile_output, self.returncode, self.timed_out = profile_output, returncode, timed_out
        self.calls: list[dict[str, object]] = []

    def __call__(self, argv, *, cwd, env, timeout_s, stdout_path, stderr_path):  # noqa: ANN001, ANN204
        self.calls.append({"argv": list(argv), "cwd": cwd, "env": env, "timeout_s": timeout_s})
        if "--query-metrics" in argv:
            text, rc, to = (FIX / "query_metrics_gh100.txt").read_text(encoding="utf-8"), 0, False
        else:
            text, rc, to = self.profile_output, self.returncode, self.timed_out
        Path(stdout_path).write_text(text, encoding="utf-8")
        Path(stderr_path).write_text("", encoding="utf-8")
        return SimpleNamespace(returncode=None if to else rc, timed_out=to)


def _which(name: str) -> str | None:
    return f"/usr/local/cuda/bin/{name}" if name == "ncu" else None


def test_run_profile_end_to_end_with_a_fake_ncu(tmp_path: Path) -> None:
    fake = FakeNcu((FIX / "ncu_raw_three_kernels.csv").read_text(encoding="utf-8"))
    settings = NcuSettings(launch_count=5, timeout_s=33)
    env = {"PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "0"}
    r = run_profile(
        TARGET,
        settings=settings,
        chip="gh100",
        env=env,
        cwd=tmp_path,
        cache_dir=tmp_path / "c",
        work_dir=tmp_path / "w",
        run=fake,
        which=_which,
    )
    assert r.ok and len(r.kernels) == 3 and r.chip == "gh100"
    profile_call = fake.calls[-1]
    assert profile_call["env"] == env and profile_call["cwd"] == tmp_path and profile_call["timeout_s"] == 33
    assert r.command == tuple(profile_call["argv"])  # type: ignore[arg-type]
    assert r.command[0] == "/usr/local/cuda/bin/ncu" and r.command[-len(TARGET) :] == tuple(TARGET)
    metrics = r.command[r.command.index("--metrics") + 1].split(",")
    assert (
        "sm__inst_executed_pipe_fp32.avg.pct_of_peak_sustained_active" not in metrics
    )  # substituted up front
    assert r.requested_metrics == CUDAFORGE_METRICS
    assert set(r.substitutions) == {
        "sm__inst_executed_pipe_fp32.avg.pct_of_peak_sustained_active",
        "smsp__warp_issue_stalled_memory_dependency_per_warp_active.pct",
    }
    assert (tmp_path / "w" / "ncu_stdout.txt").is_file()  # output kept where asked


def test_run_profile_minimal_set(tmp_path: Path) -> None:
    fake = FakeNcu((FIX / "ncu_raw_three_kernels.csv").read_text(encoding="utf-8"))
    r = run_profile(
        TARGET,
        settings=NcuSettings(metric_set="minimal"),
        chip="gh100",
        cache_dir=tmp_path,
        run=fake,
        which=_which,
    )
    assert r.ok and r.requested_metrics == MINIMAL_METRICS and r.substitutions == {}


def test_missing_ncu() -> None:
    r = run_profile(TARGET, run=FakeNcu(""), which=lambda name: None)
    assert r.error_kind == "ncu_missing" and not r.ok
    assert "[ncu] path" in r.message and "Nsight Compute" in r.message


def test_ncu_that_cannot_start(tmp_path: Path) -> None:
    def broken(argv, **kw):  # noqa: ANN001, ANN003, ANN202
        raise PermissionError("not executable")

    r = run_profile(TARGET, cache_dir=tmp_path, run=broken, which=_which)
    assert r.error_kind == "ncu_missing" and "not executable" in r.message


def test_timeout_and_permission_through_run_profile(tmp_path: Path) -> None:
    r = run_profile(TARGET, cache_dir=tmp_path, run=FakeNcu("", timed_out=True), which=_which)
    assert r.error_kind == "timeout"
    perm = (FIX / "synth_permission_denied.txt").read_text(encoding="utf-8")
    r = run_profile(TARGET, cache_dir=tmp_path, run=FakeNcu(perm, returncode=1), which=_which)
    assert r.error_kind == "permission_denied"


def test_real_process_runner_writes_files(tmp_path: Path) -> None:
    out, err = tmp_path / "o.txt", tmp_path / "e.txt"
    code = "import sys; print('x' * 200000); print('err', file=sys.stderr); sys.exit(4)"
    outcome = run_process(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=dict(os.environ),
        timeout_s=30,
        stdout_path=out,
        stderr_path=err,
    )
    assert outcome.returncode == 4 and not outcome.timed_out
    assert len(out.read_text()) > 200000 and err.read_text().strip() == "err"


def test_real_process_runner_kills_the_group_on_timeout(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    code = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(60)\n"
    )
    start = time.monotonic()
    outcome = run_process(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=None,
        timeout_s=1.5,
        stdout_path=tmp_path / "o",
        stderr_path=tmp_path / "e",
    )
    assert outcome.timed_out and outcome.returncode is None
    assert time.monotonic() - start < 20
    child = int(pid_file.read_text())
    for _ in range(50):  # the grandchild must be gone too (killed with the group)
        if not _alive(child):
            break
        time.sleep(0.1)
    else:
        pytest.fail("grandchild survived the timeout")


def _alive(pid: int) -> bool:
    """Running and not a zombie (an unreaped corpse counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


# --- settings ---------------------------------------------------------------------------------


def test_settings_defaults() -> None:
    s = NcuSettings.from_table({}, source="cudaforge.toml")
    assert (s.enabled, s.path, s.metric_set, s.launch_count, s.timeout_s) == (
        True,
        "ncu",
        "cudaforge",
        20,
        120.0,
    )
    assert s.metrics() == CUDAFORGE_METRICS


def test_settings_values_and_round_trip() -> None:
    table = {
        "enabled": False,
        "path": "/opt/ncu",
        "metric_set": "minimal",
        "extra_metrics": ["l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum", "gpu__time_duration.sum"],
        "launch_count": 3,
        "timeout_s": 30,
    }
    s = NcuSettings.from_table(table, source="x.toml")
    assert s.metrics()[: len(MINIMAL_METRICS)] == MINIMAL_METRICS
    assert s.metrics()[-1] == "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum"  # no duplicate of duration
    assert NcuSettings.from_table(s.to_table(), source="x.toml") == s


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"bogus": 1}, "cfg.toml: [ncu] unknown key 'bogus'"),
        ({"enabled": "yes"}, "cfg.toml: [ncu] 'enabled' must be true or false"),
        (
            {"metric_set": "full"},
            "cfg.toml: [ncu] 'metric_set' must be \"cudaforge\" | \"minimal\", not 'full'",
        ),
        ({"launch_count": 0}, "cfg.toml: [ncu] 'launch_count' must be a positive integer"),
        ({"launch_count": True}, "cfg.toml: [ncu] 'launch_count' must be a positive integer"),
        ({"timeout_s": -1}, "cfg.toml: [ncu] 'timeout_s' must be a positive number of seconds"),
        ({"extra_metrics": "a,b"}, "cfg.toml: [ncu] 'extra_metrics' must be a list of metric names"),
        ({"extra_metrics": ["a,b"]}, "cfg.toml: [ncu] 'extra_metrics' entry 'a,b' must be one metric name"),
        ({"path": ""}, "cfg.toml: [ncu] 'path' must be a non-empty string"),
    ],
)
def test_settings_errors_are_one_line_and_name_file_and_key(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        NcuSettings.from_table(table, source="cfg.toml")
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value) and info.value.exit_code == 2
