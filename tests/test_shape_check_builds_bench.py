"""bench/shape_check_builds.py on a folder of two small tasks: one the shape check rebuilds at smaller sizes,
one with no size constants (the check is skipped there, and the bench says so)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import shape_check_builds  # noqa: E402

SIZED = '''import torch

FEATURES = 512
BATCH = 64


class Model(torch.nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = torch.nn.Linear(features, features)

    def forward(self, x):
        return self.linear(x)


def get_inputs():
    return [torch.randn(BATCH, FEATURES)]


def get_init_inputs():
    return [FEATURES]
'''

UNSIZED = '''import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(3)]


def get_init_inputs():
    return []
'''


def test_the_bench_times_the_rebuild_and_names_what_it_skips(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    level = tmp_path / "level1"
    level.mkdir()
    (level / "1_Linear.py").write_text(SIZED)
    (level / "2_Double.py").write_text(UNSIZED)
    out = tmp_path / "builds.json"
    assert shape_check_builds.main([str(tmp_path), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("1 of 2 problems built at the shape check's sizes")
    data = {b["problem"]: b for b in json.loads(out.read_text())["builds"]}
    linear = data["level1/1_Linear"]
    assert linear["seconds"] > 0 and not linear["note"]
    assert linear["parameters"] == 257 * 257 + 257  # FEATURES 512 -> 257 (odd, about half): weight and bias
    assert data["level1/2_Double"]["note"].startswith("no size constants")
    assert shape_check_builds.main([str(tmp_path / "missing")]) == 2
