"""The convolution planner: placements checked with tensorlayout's layout code, slices checked to cover
the output once with the right halos, fewest slices checked by brute force, and plans run on Sophgo's
simulator compared with PyTorch's float64 convolution."""

import itertools
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from tensorlayout.errors import ConvolutionError, FootprintError
from tensorlayout.npu import Chip, cmodel, compact_stride, tensor_layout
from tensorlayout.npu.planner import plan_conv, run_conv_plan, timeline_svg

SMALL = Chip(4, 8192, 128, "small")


def _span(chip, shape, mode=None, layout="aligned"):
    """Bytes per NPU of a tensor placed at NPU 0, from tensorlayout's own placement."""
    try:
        return _span_or_raise(chip, shape, mode, layout)
    except FootprintError:
        return chip.lmem_bytes + 1  # larger than one NPU by itself


def _span_or_raise(chip, shape, mode, layout):
    if mode == "2IC":
        return tensor_layout(chip, 0, shape, compact_stride(chip, shape, 0, mode="2IC"), "fp32", "2IC").span
    return tensor_layout(chip, 0, shape, layout=layout).span


CASES = [((1, 5, 30, 17), 9, 3, 1, None, 1), ((3, 6, 40, 9), 5, (3, 2), 2, (0, 2, 1, 0), 1),
         ((2, 3, 50, 11), 11, 3, 1, 2, 2), ((2, 9, 12, 12), 13, 1, 1, 0, 1), ((1, 2, 64, 30), 3, 5, 3, 2, 1)]


@pytest.mark.parametrize("case", CASES)
def test_plan_fits_covers_output_once_with_halos(case):
    shape, k, kernel, stride, padding, dilation = case
    p = plan_conv(shape, k, kernel, stride, padding, dilation, chip=SMALL)
    n, c, h, w = shape
    kh, kw = p.kernel
    # buffers: sizes from tensorlayout's placements, disjoint, inside one NPU
    b = p.buffers
    x_rows = max(s.ih1 - s.ih0 for s in p.slices)
    assert b["input"].bytes >= _span(SMALL, (b["input"].shape[0], c, x_rows, w))
    assert b["weight"].bytes == _span(SMALL, (c, b["weight"].shape[1], kh, kw), mode="2IC")
    assert b["output"].bytes == _span(SMALL, b["output"].shape)
    assert b["bias"].bytes == _span(SMALL, b["bias"].shape, layout="compact")
    ranges = sorted((x.offset, x.end) for x in b.values())
    assert all(r[1] <= s[0] for r, s in zip(ranges, ranges[1:]))
    assert all(x.offset % SMALL.align_bytes == 0 for x in b.values())
    assert p.bytes_per_npu <= SMALL.lmem_bytes
    # every output element in exactly one slice; each slice's input rows and padding give its rows
    cover = np.zeros(p.output_shape[:3], int)
    for s in p.slices:
        cover[s.n0:s.n1, s.k0:s.k1, s.h0:s.h1] += 1
        ext = (kh - 1) * p.dilation[0] + 1
        assert (s.ih1 - s.ih0 + s.pad_top + s.pad_bottom - ext) // p.stride[0] + 1 == s.h1 - s.h0
        assert s.ih0 - s.pad_top == s.h0 * p.stride[0] - p.padding[0]
        assert 0 <= s.ih0 < s.ih1 <= h
        assert s.ih1 - s.ih0 <= x_rows
    assert (cover == 1).all()
    assert p.gdma_bytes >= p.minimum_gdma_bytes


@pytest.mark.parametrize("case", CASES)
def test_no_split_with_fewer_slices_fits(case):
    """Brute force: every (batch, channel, row) split with fewer slices overflows one NPU."""
    shape, k, kernel, stride, padding, dilation = case
    p = plan_conv(shape, k, kernel, stride, padding, dilation, chip=SMALL)
    n, c, h, w = shape
    kh, kw = p.kernel
    ho, wo = p.output_shape[2:]
    ext = (kh - 1) * p.dilation[0] + 1
    for ns, ks, hs in itertools.product(range(1, n + 1), range(1, k + 1), range(1, ho + 1)):
        count = -(-n // ns) * -(-k // ks) * -(-ho // hs)
        if count >= p.slices_count:
            continue
        rows = min((hs - 1) * p.stride[0] + ext, h)
        parts = [_span(SMALL, (ns, c, rows, w)), _span(SMALL, (c, ks, kh, kw), mode="2IC"),
                 _span(SMALL, (1, ks, 1, 1), layout="compact"), _span(SMALL, (ns, ks, hs, wo))]
        assert sum(-(-x // 128) * 128 for x in parts) > SMALL.lmem_bytes, (ns, ks, hs)


def test_plan_errors():
    with pytest.raises(FootprintError, match="does not fit"):
        plan_conv((1, 600, 100, 100), 4, 3, chip=SMALL)
    with pytest.raises(ConvolutionError, match="at most 15"):
        plan_conv((1, 3, 100, 100), 4, 3, stride=16)
    with pytest.raises(ConvolutionError, match="no output"):
        plan_conv((1, 3, 2, 2), 4, 5, padding=0)
    with pytest.raises(ConvolutionError, match="4095"):
        plan_conv((1, 5000, 2, 2), 4, 1)


def test_timeline_svg_is_xml():
    p = plan_conv((4, 3, 300, 300), 2, 3)
    root = ET.fromstring(timeline_svg(p))
    assert root.tag.endswith("svg")
    assert len(root.findall("{http://www.w3.org/2000/svg}rect")) > len(p.steps)


from _simulator import needs_sim  # noqa: E402

RUNS = [((2, 3, 500, 160), 2, 3, 1, None, 1, (1, 1, 3)),      # H slices of both images, halo rows
        ((1, 2000, 1, 1), 512, 3, 1, 1, 1, (1, 2, 1)),        # output-channel slices
        ((1, 3, 2500, 24), 3, 3, 2, (1, 2, 0, 1), 2, None),   # H slices: the instruction's 2048-row limit
        ((2, 70, 9, 11), 130, 3, (2, 1), (1, 0, 2, 1), (1, 2), (1, 1, 1))]


@needs_sim
@pytest.mark.parametrize("case", RUNS)
def test_plan_runs_on_the_simulator_like_float64_conv(case):
    torch = pytest.importorskip("torch")
    shape, k, kernel, stride, padding, dilation, split = case
    p = plan_conv(shape, k, kernel, stride, padding, dilation)
    if split:
        assert p.split == split
    else:
        assert p.split[2] > 1
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape, dtype=np.float32)
    w = rng.standard_normal((k, shape[1]) + p.kernel, dtype=np.float32)
    b = rng.standard_normal(k, dtype=np.float32)
    y = run_conv_plan(p, x, w, b)
    pt, pb, pl, pr = p.padding
    xt = torch.nn.functional.pad(torch.from_numpy(x).double(), (pl, pr, pt, pb))
    want = torch.nn.functional.conv2d(xt, torch.from_numpy(w).double(), torch.from_numpy(b).double(),
                                      stride=p.stride, dilation=p.dilation).numpy()
    assert np.abs(y - want).max() / np.abs(want).max() < 1e-5


def _cli(*args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-m", "tensorlayout", "npu", "plan-conv", *args],
                          capture_output=True, text=True, env=env)


def test_cli_plan_conv(tmp_path):
    svg = tmp_path / "t.svg"
    r = _cli("--input", "4,3,300,300", "--out-channels", "2", "--kernel", "3", "--svg", str(svg), "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["split"] == [2, 1, 3] and info["slices"] == 6
    assert ET.parse(svg).getroot().tag.endswith("svg")
    r = _cli("--input", "1,3,8,8", "--out-channels", "2", "--kernel", "3", "--padding", "1,2,3")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--padding" in r.stderr


@needs_sim
def test_cli_plan_conv_run():
    r = _cli("--input", "2,5,40,30", "--out-channels", "7", "--kernel", "3", "--run")
    assert r.returncode == 0, r.stderr
    assert "against float64 direct convolution (ok)" in r.stdout
