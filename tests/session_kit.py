"""Shared pieces of the session tests: the CI task's candidates as Coder replies, Judge replies, and
a configuration whose Coder and Judge talk to the scripted LLM server through the real SDKs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cudaforge.engine.config import Config, load_config
from llm_server import Reply, ScriptedLLMServer

CORE = Path(__file__).parent / "core_tasks"
TASK = CORE / "task.py"
KEY_ENV = "CF_TEST_LLM_KEY"
KEY = "sk-session-test-0123456789"

CORRECT = (CORE / "correct.py").read_text()
WRONG = (CORE / "wrong.py").read_text()
BROKEN = (CORE / "compile_error.py").read_text()
# The same extension (so the build is cached) called 200 times: correct and clearly slower.
SLOW = CORRECT.replace(
    "        return _ext.relu_scale_bias(x.contiguous(), self.bias.contiguous(), 0.5, 0.0)",
    "        y = None\n        for _ in range(200):\n"
    "            y = _ext.relu_scale_bias(x.contiguous(), self.bias.contiguous(), 0.5, 0.0)\n        return y",
).replace('"""Correct C++ candidate for the CI task."""', '"""Correct but slow: the kernel runs 200 times."""')
assert SLOW != CORRECT


def coder_reply(source: str, note: str = "Here is the module.") -> Reply:
    return Reply(text=f"{note}\n\n```python\n{source}```\n", input_tokens=1200, output_tokens=800)


def judge_correct_reply(issue: str = "the C++ source does not compile") -> Reply:
    return Reply(text=json.dumps({"critical_issue": issue, "why_it_matters": "no module, no result",
                                  "minimal_fix_hint": "add the missing semicolon"}),
                 input_tokens=900, output_tokens=120)


def judge_optimize_reply(method: str = "vectorize the loop") -> Reply:
    return Reply(text=json.dumps({"bottleneck": "scalar loop", "method": method,
                                  "plan": "process 8 floats per iteration", "evidence": []}),
                 input_tokens=900, output_tokens=120)


def session_config(server: ScriptedLLMServer | None, cache_dir: Path, *, judge: str = "llm",
                   **overrides: Any) -> Config:
    """CPU device, fast trials, the scripted server as Coder (and Judge unless judge='heuristic')."""
    values: dict[str, Any] = {
        "eval.device": "cpu", "eval.trials": 2, "timing.warmup": 1, "timing.trials": 5, "timing.host_trials": 3,
        "timing.l2_flush": False, "run.cache_dir": str(cache_dir), "session.format": "cpu",
        "budget.dollars": 100.0,
        # The shared 2-core CI machine makes every CPU timing noisy (spreads of 0.4-10 measured); these tests
        # are about the loop, so the noisy-timing rule is off here (tests/test_noisy_timing.py covers it).
        "timing.noise_threshold": 0.0,
    }
    if server is not None:
        llm = {"provider": "openai-compatible", "model": "gpt-5", "base_url": server.base_url_compat,
               "api_key_env": KEY_ENV, "timeout_s": 10.0, "max_retries": 0}
        values["coder"] = llm
        values["judge"] = llm if judge == "llm" else {"provider": "heuristic"}
    flat: dict[str, Any] = {}
    for key, value in {**values, **overrides}.items():
        if isinstance(value, dict):
            for k, v in value.items():
                flat[f"{key}.{k}"] = v
        else:
            flat[key] = value
    return load_config(None, flat, cwd=cache_dir, use_user_config=False)
