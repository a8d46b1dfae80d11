"""Triton candidates on the CPU, through Triton's interpreter (`TRITON_INTERPRET=1`): the real worker,
evaluator, CLI, session (the real SDKs against the scripted LLM server) and export.

Correctness is real; the interpreter's time is reported but never as a speedup."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from cudaforge.engine.candidate import Candidate, load_candidate
from cudaforge.engine.cli import exit_code_for
from cudaforge.engine.evaluation.evaluator import Evaluator
from cudaforge.engine.result_text import format_result
from cudaforge.engine.results import NO_SPEED_CLAIM, EvalResult
from cudaforge.engine.task import load_task

pytest.importorskip("triton", reason="the triton extra is not installed: pip install 'cudaforge-tui[triton]'")

HERE = Path(__file__).resolve().parent
TASKS = HERE / "tasks" / "triton_gelu"
TASK = TASKS / "task.py"
EXAMPLES = HERE.parent / "examples"
SMALL = {"relu": {"BATCH": 4, "DIM": 300}, "gelu": {"BATCH": 4, "DIM": 300}, "softmax": {"BATCH": 4, "DIM": 300},
         "layernorm": {"BATCH": 4, "HIDDEN": 300}}


def evaluate(options, candidate: str | Path | Candidate, task: Path = TASK) -> EvalResult:
    cand = candidate if isinstance(candidate, Candidate) else load_candidate(TASKS / candidate)
    return asyncio.run(Evaluator(options).evaluate(load_task(task), cand))


@pytest.fixture(scope="module")
def honest(cpu_options) -> EvalResult:
    return evaluate(cpu_options, "honest.py")


def test_honest_triton_candidate_is_accepted_without_a_speed_claim(honest: EvalResult) -> None:
    r = honest
    assert r.outcome == "ok" and r.accepted, f"{r.message}\n{r.traceback}\n{r.stderr_tail}"
    assert r.format == "triton" and r.correctness is not None and r.correctness.passed
    # its own interpreted launches are what ran: the kernel check counts them as custom code
    assert any(k.custom and k.name == "triton:gelu_scale_bias" and k.count >= 1 for k in r.kernels)
    assert not any(f.name == "no_custom_kernel" for f in r.findings)
    # timed, labelled as interpreter time, and no speedup anywhere
    t = r.timing
    assert t is not None and t.candidate.method == "triton_interpreter" and t.candidate.median_ms > 0
    assert t.speedup is None and r.speedup is None and t.speedup_vs_compile is None
    assert NO_SPEED_CLAIM in r.message and "x vs eager" not in r.message
    text = format_result(r)
    assert NO_SPEED_CLAIM in text and "speedup   " in text and "x  (spread" not in text
    # the autotuner's choice is recorded with the build
    assert r.compile is not None and r.compile.triton["interpreter"] is True
    tuned = r.compile.triton["autotune"]["gelu_scale_bias"]
    assert tuned["configs"] == 2 and tuned["best"]["kwargs"]["BLOCK"] in (256, 512)
    assert r.compile.triton["kernels"] == ["gelu_scale_bias"]
    assert EvalResult.from_dict(json.loads(json.dumps(r.to_dict()))) == r


def test_wrong_triton_candidate_is_a_wrong_result(cpu_options) -> None:
    r = evaluate(cpu_options, "wrong.py")
    assert r.outcome == "wrong_result" and not r.accepted
    assert r.correctness is not None and r.correctness.trials_passed == 0 and r.timing is None


def test_triton_kernel_error_is_a_compile_error_with_the_line(cpu_options) -> None:
    from cudaforge.tui.format import failing_source_line

    r = evaluate(cpu_options, "compile_error.py")
    assert r.outcome == "compile_error" and not r.accepted, r.message
    assert "line 11" in r.message and "power of 2" in r.message
    assert r.compile is not None and not r.compile.ok
    assert "candidate.py:11: error:" in r.compile.log
    source = (TASKS / "compile_error.py").read_text()
    # the TUI finds the failing line from the log, as for a C++ compiler's
    assert failing_source_line(r.compile.log, source) == 10
    assert "tl.arange(0, 300)" in source.splitlines()[10]


@pytest.mark.parametrize(("bad_line", "expected"), [
    ("y = x + undefined_thing", "undefined_thing"),  # a name error (a type error is reported the same way)
    ("y = [x for _ in range(2)][0]", "comprehension"),  # Python that is no Triton: a syntax error to Triton
])
def test_compilation_error_of_the_gpu_path_maps_to_the_candidate_line(bad_line: str, expected: str,
                                                                      tmp_path: Path) -> None:
    """Triton's compiler front end (no GPU needed) raises CompilationError with a line counted from the
    kernel's `def`; the worker turns it into the candidate's line."""
    cand = tmp_path / "candidate.py"
    cand.write_text(textwrap.dedent('''\
        import triton
        import triton.language as tl


        @triton.autotune(configs=[triton.Config({})], key=[])
        @triton.jit
        def cf_broken(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offs, mask=offs < n)
            BAD_LINE
            tl.store(y_ptr + offs, y, mask=offs < n)
        ''').replace("BAD_LINE", bad_line))
    script = textwrap.dedent(f'''\
        import json
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        from cudaforge.engine.worker import triton_support
        from cudaforge.engine.worker.harness import import_file

        module = import_file({str(cand)!r}, triton_support.CANDIDATE_MODULE)
        src = ASTSource(module.cf_broken.fn, signature={{"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32",
                        "BLOCK": "constexpr"}}, constexprs={{"BLOCK": 128}})
        try:
            triton.compile(src, target=GPUTarget("cuda", 90, 32))
        except Exception as exc:
            print(json.dumps(triton_support.compile_failure(exc, {str(cand)!r})))
        ''')
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    first, log = json.loads(out.stdout.strip().splitlines()[-1])
    assert first.startswith("compile error: line 10: CompilationError") and expected in first
    assert log.startswith("candidate.py:10: error:") and f"    10 |     {bad_line}\n" in log


def test_token_triton_kernel_while_pytorch_does_the_work_is_not_accepted(cpu_options) -> None:
    r = evaluate(cpu_options, "fallback.py")
    assert r.correctness is not None and r.correctness.passed  # the numbers are PyTorch's, so they match
    assert not r.accepted
    assert "pytorch_fallback" in {f.name for f in r.failing_findings()}


def test_missing_triton_is_unavailable_with_the_install_command(cpu_options, tmp_path: Path) -> None:
    """The worker's Python cannot import triton (a finder refuses it, as if it were not installed)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent('''\
        import sys

        class _NoTriton:
            def find_spec(self, name, path=None, target=None):
                if name == "triton" or name.startswith("triton."):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None

        sys.meta_path.insert(0, _NoTriton())
        '''))
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{site}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    r = evaluate(replace(cpu_options, python=str(python)), "honest.py")
    assert r.outcome == "unavailable", r.message
    assert r.message == "triton is not installed (the candidate imports it): pip install 'cudaforge-tui[triton]'"
    assert exit_code_for(r) == 3


def test_cli_json_prints_no_speedup(cache_dir: Path) -> None:
    cli = Path(sys.executable).with_name("cudaforge")
    out = subprocess.run([str(cli), "eval", str(TASK), str(TASKS / "honest.py"), "--device", "cpu", "--trials", "1",
                          "--timing-trials", "3", "--json"], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "CUDAFORGE_CACHE_DIR": str(cache_dir)})
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["outcome"] == "ok" and data["timing"]["speedup"] is None
    assert data["timing"]["candidate"]["method"] == "triton_interpreter"
    assert "x vs eager" not in out.stderr and NO_SPEED_CLAIM in data["message"]


def _small_task(name: str, tmp_path: Path) -> Path:
    """The example task with small sizes (the interpreter runs every program of the grid in Python)."""
    text = (EXAMPLES / name / "task.py").read_text()
    for const, value in SMALL[name].items():
        assert f"\n{const} = " in text, (name, const)
        text = "\n".join(f"{const} = {value}" if line.startswith(f"{const} = ") else line
                         for line in text.splitlines()) + "\n"
    path = tmp_path / f"{name}_task.py"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", sorted(SMALL))
def test_triton_examples_are_correct_in_the_interpreter(name: str, cpu_options, tmp_path: Path) -> None:
    cand = load_candidate(EXAMPLES / name / "triton_kernel.py")
    assert cand.format == "triton"
    r = evaluate(cpu_options, cand, _small_task(name, tmp_path))
    assert r.outcome == "ok", f"{name}: {r.message}\n{r.traceback}"
    assert any(k.custom for k in r.kernels) and r.speedup is None


# ------------------------------------------------------------------ a scripted session, then export


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    from llm_server import ScriptedLLMServer
    from session_kit import KEY, KEY_ENV

    monkeypatch.setenv(KEY_ENV, KEY)
    with ScriptedLLMServer() as srv:
        yield srv


async def test_scripted_triton_session_then_export(server, cache_dir: Path, tmp_path: Path) -> None:
    from cudaforge.engine.session import JudgeRecommended, RoundFinished, RunStore, create_session
    from cudaforge.engine.session.run_report import export_best, format_rounds
    from session_kit import coder_reply, judge_correct_reply, judge_optimize_reply, session_config

    broken = (TASKS / "compile_error.py").read_text()
    honest = (TASKS / "honest.py").read_text()
    # round three without autotuning: the exported module is then run in the bare interpreter below, and
    # Triton's own autotuner needs a GPU to time its configurations (the worker gives it a CPU timer)
    plain = honest.replace('@triton.autotune(configs=[triton.Config({"BLOCK": 256}), triton.Config({"BLOCK": 512})], '
                           'key=["n"])\n', "").replace('[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)]', "[(triton.cdiv(n, 256),)]")
    plain = plain.replace("self.scale)\n", "self.scale, BLOCK=256)\n")
    assert plain.count("autotune") == 1 and "BLOCK=256)" in plain  # (the docstring still names it)
    server.push(coder_reply(broken), judge_correct_reply("tl.arange(0, 300) is not a power of two"),
                coder_reply(honest), judge_optimize_reply("fuse more per program"),
                coder_reply(plain))
    events: list[object] = []
    config = session_config(server, cache_dir, **{"session.format": "triton", "session.rounds": 3,
                                                  "session.mode": "auto"})
    session = create_session(TASK, config, on_event=events.append, run_root=tmp_path / "runs")
    stopped = await session.run()

    finished = [e for e in events if isinstance(e, RoundFinished)]
    assert [e.outcome for e in finished] == ["compile_error", "ok", "ok"]
    assert all(e.speedup is None for e in finished)
    assert stopped.reason == "max_rounds" and stopped.best_round == 3 and stopped.best_speedup is None
    # the Coder was asked for Triton, and its repair prompt carried the failing line
    seed = server.requests[0]
    assert "Candidate format: triton" in json.dumps(seed.body)
    assert "candidate.py:11: error:" in server.requests[2].last_user_text
    judged = [e for e in events if isinstance(e, JudgeRecommended)]
    assert [e.mode for e in judged] == ["correct", "optimize"]
    assert NO_SPEED_CLAIM in server.requests[3].last_user_text  # the Judge is told there is no speed claim
    table = format_rounds(RunStore.open(session.store.path, read_only=True))
    assert "best: round 3, accepted, " + NO_SPEED_CLAIM in table

    out, report = export_best(session.store.path, tmp_path / "exported.py")
    assert report.exists() and "interpreter time" in report.read_text()
    check = textwrap.dedent(f'''\
        import sys, importlib.util, torch
        sys.path.insert(0, {str(TASKS)!r})
        import task
        spec = importlib.util.spec_from_file_location("exported", {str(out)!r})
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        torch.manual_seed(0)
        ref = task.Model(*task.get_init_inputs())
        new = mod.ModelNew(*task.get_init_inputs())
        new.load_state_dict(ref.state_dict())
        x = task.get_inputs()[0]
        torch.testing.assert_close(new(x), ref(x), atol=1e-4, rtol=1e-4)
        assert not [m for m in sys.modules if m.startswith("cudaforge")], "the export needs cudaforge"
        print("exported module ok")
        ''')
    env = {**os.environ, "TRITON_INTERPRET": "1", "TRITON_CACHE_DIR": str(tmp_path / "triton")}
    run = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, env=env, timeout=120,
                         cwd=tmp_path)
    assert run.returncode == 0 and "exported module ok" in run.stdout, run.stderr


async def test_workbench_shows_a_triton_compile_error_at_its_line(server, cache_dir: Path, tmp_path: Path) -> None:
    """The TUI, auto mode, Triton replies: round 1's kernel does not compile (its line is selected in the
    Source pane, the error line marked in the Compiler pane), round 2 is accepted with no speed claim."""
    from cudaforge.tui.widgets.compiler import CompilerPane
    from cudaforge.tui.widgets.correctness import CorrectnessPane
    from rich.console import Console
    from session_kit import coder_reply, judge_correct_reply
    from tui_kit import SIZE, task_app, wait_until, write_config

    server.push(coder_reply((TASKS / "compile_error.py").read_text()), judge_correct_reply("tl.arange(0, 300)"),
                coder_reply((TASKS / "honest.py").read_text()))
    config = write_config(tmp_path, cache_dir, server, rounds=2)
    config.write_text(config.read_text().replace('format = "cpu"', 'format = "triton"'))
    app = task_app(tmp_path, config, task=TASK, mode="auto")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.model.stopped is not None, timeout=240, what="the session to stop")
        assert [app.model.rounds[n].status for n in (1, 2)] == ["compile_error", "ok"]
        assert app.model.best_round == 2 and app.model.best_speedup is None
        app.selected = 1
        app._refresh_all()
        await pilot.pause()
        selection = app.source_pane.editor.selection
        assert selection.start == (10, 0), selection  # line 11 of the candidate, 0-based
        compiler = app.query_one(CompilerPane)
        assert compiler.current is not None
        assert "candidate.py:11: error:" in compiler.lines[compiler.errors[compiler.current]].text
        app.selected = 2
        app._refresh_all()
        await pilot.pause()
        console = Console(width=400, record=True, file=io.StringIO())
        for widget in app.query_one(CorrectnessPane).query("Static"):
            console.print(widget.content)
        shown = console.export_text()
        assert "triton_interpreter" in shown and NO_SPEED_CLAIM in shown and "speedup" not in shown


def test_the_coders_triton_example_is_accepted(cpu_options, tmp_path: Path) -> None:
    """The example in the Coder's Triton prompt is ours and must itself pass (autotuned, in the interpreter)."""
    import re

    from cudaforge.engine.agents.prompts import load_template

    code = re.search(r"```python\n(.*?)```", load_template("format_triton"), re.S)
    assert code is not None
    task = tmp_path / "scale_add_task.py"
    task.write_text(textwrap.dedent('''\
        import torch
        import torch.nn as nn

        COLS = 37


        class Model(nn.Module):
            def __init__(self, cols, alpha):
                super().__init__()
                self.bias = nn.Parameter(torch.randn(cols))
                self.alpha = alpha

            def forward(self, x):
                return self.alpha * x + self.bias


        def get_inputs():
            return [torch.randn(5, COLS)]


        def get_init_inputs():
            return [COLS, 0.5]
        '''))
    r = evaluate(cpu_options, Candidate.from_source(code.group(1)), task)
    assert r.outcome == "ok" and r.format == "triton", r.message
    assert r.compile is not None and r.compile.triton["autotune"]["cf_scale_add"]["best"] is not None
