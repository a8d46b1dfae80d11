"""The runtime findings decided from what the worker's pipeline recorded (engine/integrity/evidence.py),
on hand-made evidence; the adversarial candidates (tests/test_adversarial.py) show them end to end."""

from __future__ import annotations

import types

from cudaforge.engine.integrity import evidence
from cudaforge.engine.results import TimingStats


def _ms(median: float) -> TimingStats:
    return TimingStats(median_ms=median, iqr_ms=0.0, min_ms=median, max_ms=median, mean_ms=median, trials=5,
                       method="cuda_event")


def test_correctness_evidence() -> None:
    assert evidence.correctness_findings(set(), False, set()) == []
    found = {f.name: f for f in evidence.correctness_findings({2, 0}, True, {"Lazy"})}
    assert found["input_mutation"].evidence == {"inputs": [0, 2]} and found["input_mutation"].severity == "fail"
    assert "output_aliases_input" in found and found["tensor_subclass_output"].evidence == {"types": ["Lazy"]}


def test_custom_code_speed_of_light_and_hidden_work() -> None:
    assert evidence.custom_code_finding(True, ["k"]) is None
    f = evidence.custom_code_finding(False, [f"aten{i}" for i in range(20)])
    assert f is not None and f.name == "no_custom_kernel" and len(f.evidence["launched"]) == 10
    # 1 MB at 1000 GB/s takes 1 µs: 0.5 µs is too fast, 2 µs is not, and a margin of 3 lets 0.5 µs pass.
    assert evidence.speed_of_light_finding(0.0005, 10**6, 1000.0, 1.0).name == "faster_than_memory_bound"  # type: ignore[union-attr]
    assert evidence.speed_of_light_finding(0.002, 10**6, 1000.0, 1.0) is None
    assert evidence.speed_of_light_finding(0.0005, 10**6, 1000.0, 3.0) is None
    # The candidate's host-minus-event gap exceeds the reference's by 0.5 ms on a 0.6 ms call.
    hidden = evidence.hidden_work_finding(_ms(1.0), _ms(0.6), _ms(1.0), _ms(0.1))
    assert hidden is not None and hidden.name == "hidden_async_work"
    assert evidence.hidden_work_finding(_ms(1.0), _ms(0.6), _ms(1.0), _ms(0.59)) is None


def test_subclass_tampering_and_threads() -> None:
    class Model:
        pass

    class ModelNew(Model):
        pass

    task, cand = types.SimpleNamespace(Model=Model), types.SimpleNamespace(ModelNew=ModelNew)
    assert evidence.subclass_finding(task, cand).name == "subclasses_reference"  # type: ignore[union-attr]
    assert evidence.subclass_finding(task, types.SimpleNamespace(ModelNew=object)) is None
    before = evidence.harness_identity()
    assert evidence.tampering_finding(before, evidence.harness_identity()) is None
    f = evidence.tampering_finding(before, {**before, "time.perf_counter": 1})
    assert f is not None and f.evidence == {"replaced": ["time.perf_counter"]}
    assert evidence.threads_finding(set()) is None
    assert evidence.threads_finding({"t2", "t1"}).evidence == {"threads": ["t1", "t2"]}  # type: ignore[union-attr]
