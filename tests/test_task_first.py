"""The task first: a broken task is reported before any candidate is built, for every way get_inputs(),
get_init_inputs() or Model can break, and the report names the user's own line, not the worker's frames
(`--debug` shows them). Real `cudaforge eval` runs with a real worker on the CPU device."""

from __future__ import annotations

from pathlib import Path

import pytest
from cudaforge.engine.cli import main

HEADER = "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def __init__(self):\n" \
         "        super().__init__()\n\n    def forward(self, x):\n        return torch.relu(x)\n\n\n"
BROKEN = {
    "non_sequence": ("def get_inputs():\n    return torch.randn(16)\n\n\ndef get_init_inputs():\n    return []\n",
                     "get_inputs() must return a list or tuple", "def get_inputs"),
    "raises_in_helper": ("def helper():\n    return 1 / 0\n\n\ndef get_inputs():\n    return [torch.randn(16) * helper()]"
                         "\n\n\ndef get_init_inputs():\n    return []\n", "ZeroDivisionError", "return 1 / 0"),
    "init_inputs_raise": ("def get_inputs():\n    return [torch.randn(16)]\n\n\ndef get_init_inputs():\n"
                          "    raise ValueError('no sizes')\n", "ValueError: no sizes", "raise ValueError"),
}
# A candidate whose import (its "build") leaves a mark: a task error must come before it.
CANDIDATE = "from pathlib import Path\nPath({mark!r}).write_text('built')\nimport torch.nn as nn\n\n\n" \
            "class ModelNew(nn.Module):\n    def forward(self, x):\n        return x.clamp_min(0)\n"


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_a_broken_task_is_reported_first_with_its_own_line(kind: str, tmp_path: Path, cache_dir: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    body, error, user_line = BROKEN[kind]
    task = tmp_path / "task.py"
    task.write_text(HEADER + body)
    mark = tmp_path / "built.txt"
    cand = tmp_path / "cand.py"
    cand.write_text(CANDIDATE.format(mark=str(mark)))
    code = main(["eval", str(task), str(cand), "--device", "cpu"])
    out = capsys.readouterr().out
    assert code == 2, out
    assert not mark.exists(), "the candidate was built before the task was checked"
    assert "compile:" not in out
    headline = out.splitlines()[0]
    line_no = next(i for i, text in enumerate(task.read_text().splitlines(), 1) if user_line in text)
    assert headline.startswith("NOT ACCEPTED: task_error") and f"{task}:{line_no}" in headline, headline
    assert error in headline
    assert "pipeline.py" not in out and "memory.py" not in out and "entry.py" not in out
    if kind != "non_sequence":  # the user's frames are shown: their file and line
        assert f'File "{task}", line {line_no}' in out
        main(["eval", str(task), str(cand), "--device", "cpu", "--debug"])
        assert "pipeline.py" in capsys.readouterr().out  # --debug shows the whole traceback
