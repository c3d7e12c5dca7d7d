"""Small networks end to end on Sophgo's simulator against the same networks in PyTorch float64."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from tensorlayout.errors import LayoutError  # noqa: E402
from tensorlayout.npu import network as nw  # noqa: E402

from _simulator import skip_module_without_simulator  # noqa: E402

skip_module_without_simulator()


def _torch_net(layers, x):
    vals = {"x": torch.from_numpy(np.asarray(x, np.float64))}
    for layer in layers:
        a = [vals[n] for n in layer.inputs]
        p = layer.params
        if layer.op == "conv":
            ph, pw = p["padding"]
            y = F.conv2d(a[0], torch.from_numpy(p["weight"].astype(np.float64)),
                         torch.from_numpy(p["bias"].astype(np.float64)), stride=p["stride"], padding=(ph, pw))
        elif layer.op == "relu":
            y = F.relu(a[0])
        elif layer.op == "max_pool":
            y = F.max_pool2d(a[0], p["kernel"], p["stride"])
        elif layer.op == "avg_pool":
            y = F.avg_pool2d(a[0], p["kernel"], p["stride"])
        else:
            y = a[0] + a[1]
        vals[layer.name] = y
    return vals[layers[-1].name].numpy()


@pytest.mark.parametrize("which", ["resnet", "vgg"])
def test_network_on_the_simulator_equals_float64(which):
    rng = np.random.default_rng(1)
    if which == "resnet":
        net, x = nw.resnet_basic_block(24, rng), rng.standard_normal((2, 24, 12, 12), dtype=np.float32)
    else:
        net, x = nw.small_vgg(3, rng), rng.standard_normal((2, 3, 24, 24), dtype=np.float32)
    y, report = nw.run_on_simulator(net, x)
    want = _torch_net(net, x)
    assert y.shape == want.shape
    assert np.abs(y - want).max() / np.abs(want).max() < 1e-5
    assert [r["op"] for r in report] == [layer.op for layer in net]
    assert all(r["where"] == "simulator" for r in report)
    assert np.abs(nw.run_reference(net, x) - want).max() / np.abs(want).max() < 1e-12


def test_bad_networks():
    rng = np.random.default_rng(0)
    with pytest.raises(LayoutError, match="no earlier layer"):
        nw.run_reference([nw.relu("a", "b")], np.ones((1, 1, 2, 2)))
    with pytest.raises(LayoutError, match="used twice"):
        nw.run_reference([nw.relu("a", "x"), nw.relu("a", "x")], np.ones((1, 1, 2, 2)))
    with pytest.raises(LayoutError, match="must match"):
        net = [nw.max_pool("p", "x", 2), nw.add("s", "p", "x")]
        nw.run_on_simulator(net, rng.standard_normal((1, 2, 4, 4)).astype(np.float32))


def test_tour_part_runs_on_the_simulator(tmp_path):
    import io

    from tensorlayout.cli import Tour
    from tensorlayout.cli_parts import npusim

    buf = io.StringIO()
    npusim.demo(Tour(str(tmp_path), stream=buf))
    text = buf.getvalue()
    assert "local bytes identical" in text
    assert "refused before the simulator runs" in text
    errors = [float(t.rstrip(".")) for t in text.split() if "e-0" in t]
    import importlib.util

    with_onnx = importlib.util.find_spec("onnx") is not None   # the ONNX model part of the tour
    assert len(errors) == 3 + with_onnx and max(errors) < 1e-5
    assert ("Conv npu" in text and "Flatten view" in text) == with_onnx
