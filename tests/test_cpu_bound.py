"""The CPU runtime's bound run: compiled steps bound once to one arena laid out from
liveness, run in segments with no Python between them.  Checked against onnxruntime, against
the liveness the program's steps imply (computed here from the steps' reads and writes), and
for results that outlive the next run."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("torch")

from _model_util import ort_session, rel_l2  # noqa: E402

from tensorlayout.backends import cpu_kernels  # noqa: E402
from tensorlayout.backends.cpu_bound import ALIGN, BoundRun  # noqa: E402
from tensorlayout.model import load, zoo  # noqa: E402

pytestmark = pytest.mark.skipif(not cpu_kernels.ready(), reason="compiled kernels not ready")

NETS = [("mobilenet_v3_small", 40), ("shufflenet_v2", 32), ("squeezenet1_1", 35),
        ("resnet18", 32), ("efficientnet_b0", 32)]


@pytest.fixture(scope="module", params=NETS, ids=lambda c: f"{c[0]}-{c[1]}")
def net(request):
    name, size = request.param
    data, _ = zoo.export(name, size=size, classes=50)
    return name, size, data, load(data)


def _bound(model, threads=2):
    model.run(np.zeros((1, 3) + model.cpu().graph.inputs["input"][2:], np.float32),
              threads=threads)
    return model.cpu()._bound_runs[threads]


def test_bound_run_agrees_with_onnxruntime(net):
    name, size, data, model = net
    sess = ort_session(data, threads=2)
    bound = _bound(model)
    assert bound is not None and bound.bound_steps >= len(model.cpu().steps) // 3
    for seed in range(2):
        x = np.random.default_rng(seed).standard_normal((1, 3, size, size)).astype(np.float32)
        y = model.run(x, threads=2)
        ref = sess.run(None, {"input": x})[0]
        assert rel_l2(y, ref) <= 1e-4
        assert int(np.argmax(y)) == int(np.argmax(ref))


def test_results_outlive_the_next_run(net):
    name, size, data, model = net
    rng = np.random.default_rng(7)
    x1, x2 = (rng.standard_normal((1, 3, size, size)).astype(np.float32) for _ in range(2))
    y1 = model.run(x1, threads=2)
    keep = y1.copy()
    y2 = model.run(x2, threads=2)
    np.testing.assert_array_equal(y1, keep)
    assert not np.array_equal(y1, y2)
    np.testing.assert_array_equal(model.run(x1, threads=2), keep)


def test_no_two_live_tensors_share_arena_bytes(net):
    name, size, data, model = net
    prog = model.cpu()
    bound = _bound(model)
    graph, steps = prog.graph, prog.steps
    # each tensor's live steps, from the steps' own inputs and outputs
    born, dies = {}, {}
    for i, st in enumerate(steps):
        for n in st.outputs:
            if n:
                born.setdefault(n, i)
        for n in st.inputs:
            if n and n not in graph.consts:
                dies[n] = i
    for n in graph.outputs:
        dies[n] = len(steps)
    base = bound.views and min(v.ctypes.data for v in bound.views.values())
    # a view (a reshape's output) lies inside its root's bytes and keeps the root alive
    for n, root in bound.roots.items():
        v, r = bound.views[n], bound.views[root]
        assert r.ctypes.data <= v.ctypes.data and v.ctypes.data + v.nbytes <= r.ctypes.data + r.nbytes
        dies[root] = max(dies.get(root, -1), dies.get(n, born.get(n, -1)))
    spans = []
    for n, v in bound.views.items():
        if n in bound.roots:
            continue
        lo = v.ctypes.data - base
        assert v.ctypes.data % ALIGN == 0, n
        spans.append((n, born.get(n, -1), dies.get(n, born.get(n, -1)), lo, lo + v.nbytes))
    assert len(spans) > 3
    for i, (a, a0, a1, alo, ahi) in enumerate(spans):
        for b, b0, b1, blo, bhi in spans[i + 1:]:
            if a0 <= b1 and b0 <= a1:                      # live at a common step
                assert ahi <= blo or bhi <= alo, (a, b)


def test_each_thread_count_has_its_own_binding():
    data, _ = zoo.export("mobilenet_v3_small", size=32, classes=10)
    model = load(data)
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    ys = [model.run(x, threads=t) for t in (1, 2, 1)]
    assert set(model.cpu()._bound_runs) >= {1, 2}
    ref = ort_session(data, threads=1).run(None, {"input": x})[0]
    for y in ys:
        assert rel_l2(y, ref) <= 1e-4


def test_a_busy_binding_sends_the_caller_to_the_step_loop():
    data, _ = zoo.export("squeezenet1_1", size=35, classes=10)
    model = load(data)
    x = np.random.default_rng(2).standard_normal((1, 3, 35, 35)).astype(np.float32)
    alone = model.run(x, threads=2)
    bound = model.cpu()._bound_runs[2]
    assert isinstance(bound, BoundRun)
    with bound._lock:                       # as if another thread were inside it
        np.testing.assert_allclose(model.run(x, threads=2), alone, rtol=1e-5, atol=1e-6)


def test_views_live_in_their_roots_slot_and_outputs_are_copied_out():
    """Reshapes and slices of whole leading blocks become views of their input's arena slot
    (no step runs), chains of them included; a strided slice stays a Python step.  The
    results agree with onnxruntime, outputs that are views outlive the next run, and the
    liveness test above holds with the views."""
    from onnx import helper

    from _model_util import make_model

    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 8, 6, 6)).astype(np.float32)
    inits = {"w1": rng.standard_normal((8, 8, 1, 1)).astype(np.float32),
             "w2": rng.standard_normal((5, 4, 1, 1)).astype(np.float32),
             "s5": np.array([1, 2, 4, 6, 6], np.int64), "s4": np.array([1, 8, 6, 6], np.int64),
             "a0": np.array([0], np.int64), "a4": np.array([4], np.int64),
             "a8": np.array([8], np.int64), "ax": np.array([1], np.int64),
             "st": np.array([2], np.int64)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"]),
             helper.make_node("Reshape", ["c", "s5"], ["r"]),
             helper.make_node("Reshape", ["r", "s4"], ["r2"]),
             helper.make_node("Slice", ["r2", "a0", "a4", "ax"], ["s"]),
             helper.make_node("Conv", ["s", "w2"], ["y1"]),
             helper.make_node("Relu", ["y1"], ["y1r"]),
             helper.make_node("Flatten", ["y1r"], ["f"]),
             helper.make_node("Slice", ["r2", "a4", "a8", "ax"], ["s2"]),
             helper.make_node("Slice", ["r2", "a0", "a8", "ax", "st"], ["odd"]),
             helper.make_node("Conv", ["odd", "w2"], ["y2"])]
    data = make_model(nodes, {"x": x}, ["f", "s2", "y2"], inits).SerializeToString()
    model = load(data)
    ys = [[v.copy() for v in model.run({"x": x}, threads=2)]]
    ys.append(model.run({"x": x * 2}, threads=2))
    bound = model.cpu()._bound_runs[2]
    assert bound.view_steps == 5 and set(bound.roots) == {"r", "r2", "s", "f", "s2"}
    assert {bound.roots[n] for n in bound.roots} == {"c", "y1r"}
    assert [st.node.op for st in model.cpu().steps if ("python", model.cpu().steps.index(st))
            in bound.segments] == ["Slice"]
    sess = ort_session(data)
    for scale, got in zip((1, 2), ys):
        ref = sess.run(None, {"x": x * scale})
        for a, b in zip(got, ref):
            assert a.shape == b.shape and rel_l2(a, b) <= 1e-5


def test_concat_inputs_are_written_in_place_into_its_output():
    """A Concat whose inputs are whole blocks of its output (nothing before the axis but ones)
    makes no step: its compiled producers write straight into their places in its slot (a
    Concat's output a part of the next Concat, its own parts with it); an input also read
    elsewhere is read there; a Concat with an input that is already a part or a view of
    another tensor, and one over a batch of two, copy; results against onnxruntime, twice
    (outputs outlive the next run)."""
    from onnx import helper

    from _model_util import make_model

    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 4, 5, 6)).astype(np.float32)
    x2 = rng.standard_normal((2, 4, 5, 6)).astype(np.float32)
    inits = {"w1": rng.standard_normal((3, 4, 1, 1)).astype(np.float32),
             "w2": rng.standard_normal((5, 4, 3, 3)).astype(np.float32),
             "w3": rng.standard_normal((2, 11, 1, 1)).astype(np.float32),
             "sh": np.array([1, 8, 15], np.int64), "s0": np.array([0], np.int64),
             "s4": np.array([4], np.int64), "ax": np.array([1], np.int64)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),                   # 3 channels
             helper.make_node("Conv", ["x", "w2"], ["b"], pads=[1, 1, 1, 1]),  # 5 channels
             helper.make_node("Sigmoid", ["x"], ["s"]),                      # a Python step
             helper.make_node("Slice", ["s", "s0", "s4", "ax"], ["sv"]),     # a view of s
             helper.make_node("Conv", ["x", "w1"], ["d"]),
             helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
             helper.make_node("Concat", ["c", "d"], ["c3"], axis=1),         # c a part of c3
             helper.make_node("Concat", ["c", "sv"], ["c2"], axis=1),        # copies
             helper.make_node("Relu", ["a"], ["ar"]),                        # a read elsewhere
             helper.make_node("Conv", ["c3", "w3"], ["y"]),
             helper.make_node("Conv", ["x2", "w1"], ["a2"]),
             helper.make_node("Conv", ["x2", "w1"], ["b2"]),
             helper.make_node("Concat", ["a2", "b2"], ["y2"], axis=1)]         # batch 2: copies
    feeds = {"x": x, "x2": x2}
    data = make_model(nodes, feeds, ["y", "ar", "c2", "y2"], inits).SerializeToString()
    model = load(data)
    got = [[v.copy() for v in model.run(feeds, threads=2)]]
    got.append(model.run({"x": -x, "x2": x2}, threads=2))
    bound = model.cpu()._bound_runs[2]
    assert {n: bound.roots.get(n) for n in ("a", "b", "c", "d", "sv", "c2", "a2", "b2")} == {
        "a": "c3", "b": "c3", "c": "c3", "d": "c3", "sv": "s", "c2": None, "a2": None,
        "b2": None}
    sess = ort_session(data)
    for sign, out in zip((1, -1), got):
        ref = sess.run(None, {"x": sign * x, "x2": x2})
        for a, b in zip(out, ref):
            assert a.shape == b.shape and rel_l2(a, b) <= 1e-5


def test_a_pooling_layer_of_a_small_network_takes_more_than_one_thread():
    """A step's threads come from its work: a MaxPool's window elements count
    ``POOL_WORK`` multiply-adds each, so 128 channels of 23 x 23 pooled 3 x 3 / 2 (139,392
    window elements) take two threads, as the convolutions around it do, and the result
    still equals onnxruntime's."""
    from onnx import helper

    from _model_util import make_model
    from tensorlayout.backends.cpu import WORK_PER_THREAD
    from tensorlayout.backends.cpu_steps import POOL_WORK

    x = np.random.default_rng(3).standard_normal((1, 128, 23, 23)).astype(np.float32)
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                            ceil_mode=1)
    m = make_model([node], {"x": x}, ["y"]).SerializeToString()
    model = load(m)
    (step,) = model.cpu().steps
    assert step.max_threads == 128 * 11 * 11 * 9 * POOL_WORK // WORK_PER_THREAD >= 2
    got = model.run(x, threads=2)
    want = ort_session(m).run(None, {"x": x})[0]
    assert np.array_equal(got, want)


def test_a_matrix_vector_product_takes_threads_by_the_weights_it_reads():
    """A squeeze-and-excite block's 1 x 1 convolutions on one position (32 -> 96 -> 32
    channels: 3,072 multiply-adds each, every one a weight read from memory) count
    ``GEMV_WORK`` each, so they take more than one thread where a GEMM of as many
    multiply-adds takes one; the block still equals onnxruntime."""
    from onnx import helper

    from _model_util import make_model
    from tensorlayout.backends.cpu import WORK_PER_THREAD
    from tensorlayout.backends.cpu_steps import GEMV_WORK

    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 32, 1, 1)).astype(np.float32)
    inits = {"w1": rng.standard_normal((96, 32, 1, 1)).astype(np.float32) / 6,
             "w2": rng.standard_normal((32, 96, 1, 1)).astype(np.float32) / 10}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["g"]),
             helper.make_node("Sigmoid", ["g"], ["y"])]
    m = make_model(nodes, {"x": x}, ["y"], inits).SerializeToString()
    model = load(m)
    convs = [s for s in model.cpu().steps if s.node.op == "Conv"]
    assert [s.max_threads for s in convs] == [32 * 96 * GEMV_WORK // WORK_PER_THREAD] * 2
    assert convs[0].max_threads >= 2 > 32 * 96 // WORK_PER_THREAD
    got = model.run(x, threads=2)
    want = ort_session(m).run(None, {"x": x})[0]
    assert rel_l2(got, want) <= 1e-5


def test_a_plane_mean_takes_threads_by_what_it_reads():
    """A GlobalAveragePool writes one float per plane but reads every input element: 32
    planes of 112 x 112 (401,408 floats) take more than one thread, and the means still
    equal the float64 means to float32's rounding of a long sum (onnxruntime's too)."""
    from onnx import helper

    from _model_util import make_model
    from tensorlayout.backends.cpu import WORK_PER_THREAD

    x = np.random.default_rng(4).standard_normal((1, 32, 112, 112)).astype(np.float32)
    node = helper.make_node("GlobalAveragePool", ["x"], ["y"])
    m = make_model([node], {"x": x}, ["y"]).SerializeToString()
    model = load(m)
    (step,) = model.cpu().steps
    assert step.max_threads == x.size // WORK_PER_THREAD >= 2
    got = model.run(x, threads=2)
    want = x.astype(np.float64).mean(axis=(2, 3), keepdims=True)
    assert got.shape == want.shape and np.abs(got - want).max() <= 1e-6
    assert np.abs(ort_session(m).run(None, {"x": x})[0] - want).max() <= 1e-6
