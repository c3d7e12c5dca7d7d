"""ONNX's own node tests (its conformance suite) on each runtime: every case whose ops the
runtime lists passes or is refused by name; none gives a wrong answer or another exception.
The cases and their comparison are in ``_onnx_node.py`` (also a script that prints the
counts per runtime).  The CPU runtime must pass at least 90 % of the cases it lists."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

pytest.importorskip("onnx")

import _onnx_node as nt  # noqa: E402


def _opencl_missing():
    try:
        from tensorlayout.opencl import get_context

        get_context()
    except Exception as exc:  # noqa: BLE001 - no usable platform, whatever the reason
        return str(exc).splitlines()[0]
    return None


def _simulator_missing():
    from _simulator import MISSING

    return MISSING


def _runtime_param(runtime):
    if runtime == "cpu":
        return pytest.param("cpu", id="cpu")
    missing = _opencl_missing() if runtime == "opencl" else _simulator_missing()
    marks = [pytest.mark.skipif(missing is not None, reason=f"{runtime}: {missing}")]
    return pytest.param(runtime, id=runtime, marks=marks)


@pytest.mark.parametrize("runtime", [_runtime_param(r) for r in ("cpu", "opencl", "npu")])
def test_node_tests_pass_or_are_refused_by_name(runtime):
    results = nt.run_all(runtime)
    print(nt.table_row(runtime, results))
    bad = {name: r for name, r in sorted(results.items()) if r[0] in ("wrong", "crashed")}
    assert results and not bad, "\n".join(f"{o} {n}: {why}" for n, (o, why) in bad.items())
    if runtime == "cpu":
        c = Counter(o for o, _ in results.values())
        assert c["pass"] >= 0.9 * len(results), nt.table_row(runtime, results)
        _docs_say(len(results), c["pass"])


def _docs_say(listed, passed):
    """docs/models.md's counts are the ones measured here, for the onnx it names."""
    import re
    from pathlib import Path

    import onnx

    text = (Path(__file__).resolve().parents[1] / "docs" / "models.md").read_text("utf-8")
    m = re.search(r"With onnx (\S+) the CPU runtime lists\s+(\d+) of its (\d+) cases and "
                  r"passes (\d+)", text)
    assert m, "docs/models.md no longer gives the node-test counts"
    if onnx.__version__.startswith(m.group(1)):
        assert (int(m.group(2)), int(m.group(3)), int(m.group(4))) == \
            (listed, len(nt.cases()), passed), "docs/models.md's node-test counts are stale"


def _case(name):
    return next(c for c in nt.cases() if c.name == name)


def test_the_comparison_sees_a_wrong_value_a_wrong_type_and_a_crash(monkeypatch):
    """The harness itself can fail: a changed expected value, an expected output of another
    type, a refusal that names nothing of the graph and a plain exception are each told apart."""
    case = _case("test_relu")
    assert nt.outcome(case) == ("pass", "")
    want = np.array(nt._array(case.outputs[0]), copy=True)
    want.reshape(-1)[0] += 1
    assert nt.outcome(nt.Case(case.name, case.model, case.inputs, [want]))[0] == "wrong"
    assert nt.outcome(nt.Case(case.name, case.model, case.inputs,
                              [want.astype(np.float64)]))[1].startswith("output 0: type")
    from tensorlayout.errors import ModelError
    from tensorlayout.model import _model

    def refuse(self, *a, **k):
        raise ModelError("something went wrong")
    monkeypatch.setattr(_model.Model, "run", refuse)
    assert nt.outcome(case)[0] == "wrong"

    def crash(self, *a, **k):
        raise IndexError("tuple index out of range")
    monkeypatch.setattr(_model.Model, "run", crash)
    assert nt.outcome(case) == ("crashed", "IndexError: tuple index out of range")
