"""The command line refuses what it does not understand, never guesses, never shows a traceback.

One test (or a parametrized group) per class of problem: comma lists, options that do not apply,
ambiguous depthwise shapes, sizes too large to allocate, broken pipes, the shared spelling of
options (--shape, --dtype, --json, case), errors as JSON, help text, and the new conv, image
and npu features.  Expected values come from the formulas of the seeds, written out here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from tensorlayout import errors
from tensorlayout.cli import build_parser

from _cli_util import run

SRC = Path(__file__).resolve().parents[1] / "src"


def refused(*argv, match=None):
    rc, out, err = run(*argv)
    assert rc == 2, (rc, out, err)
    assert "Traceback" not in err and err.count("\n") == 1, err
    if match:
        assert match in err, err
    return err


NPU = ("npu", "--npus", "4", "--lmem", "1024")


# ----------------------------------------------------------------- comma lists
@pytest.mark.parametrize("value,item", [
    ("1,,2,3", "item 2 is empty"), ("1,2,3,", "item 4 is empty"), (",1,2,3", "item 1 is empty"),
    ("1,\uff12,3,4", "item 2"),            # full-width digit two
    ("1,2,3,1_0", "item 4"), ("1,2,3,0x4", "item 4"), ("1,2,3,4.0", "item 4"),
])
def test_malformed_lists_are_refused_everywhere(value, item):
    for argv in (("image", "IN_OUT_CHANNEL", "--shape", value),
                 ("buffer", "NCHW", "--shape", value),
                 NPU + ("--shape", value),
                 ("conv", "--shape", value, "--out-channels", "2"),
                 ("opencl", "roundtrip", "IN_OUT_CHANNEL", "--shape", value),
                 ("draw", "image", "IN_OUT_CHANNEL", "--shape", value, "-o", "x.svg")):
        refused(*argv, match=item)


def test_points_and_integer_options_are_strict():
    refused("winograd", "--m", "2", "--points", "0,,1,-1", match="item 2 is empty")
    refused("winograd", "--m", "2", "--points", "0,1,-1,", match="item 4 is empty")
    for bad in ("\uff12", "1_0", " 2x"):
        refused("winograd", "--m", bad, match="--m")
        refused("image", "WINOGRAD_FILTER", "--shape", "8,8,3,3", "--tile", bad, match="--tile")
        refused(*NPU, "--shape", "1,2,3,4", "--address", bad, match="--address")


# ----------------------------------------------------------------- options that do not apply
def test_npu_offset_needs_start_npu():
    refused(*NPU, "--shape", "2,3,4,5", "--address", "0", "--offset", "128", match="--offset")
    rc, out, _ = run(*NPU, "--shape", "2,3,4,5", "--start-npu", "1", "--offset", "128", "--json")
    info = json.loads(out)
    assert rc == 0 and (info["address"], info["start_npu"], info["offset"]) == (1024 + 128, 1, 128)


def test_npu_where_and_at_repeat():
    rc, out, _ = run(*NPU, "--shape", "2,3,4,5", "--where", "1,2,3,4", "--where", "0,0,0,0",
                     "--at", "0,4", "--at", "2,0", "--json")
    info = json.loads(out)
    # aligned from NPU 0: strides n=32 c=32 h=5 w=1 (fp32 words); channel c on NPU c % 4
    assert [(w["npu"], w["offset"]) for w in info["where"]] == [(2, 4 * (32 + 15 + 4)), (0, 0)]
    assert [a["element"] for a in info["at"]] == [[0, 0, 0, 1], [0, 2, 0, 0]]
    for opt in ("--where", "--at"):
        rc, out, _ = run(*NPU, "--shape", "2,3,4,5", opt, "1,2,3,4" if opt == "--where" else "0,4",
                         opt, "1,0,0,0" if opt == "--where" else "0,8")
        assert out.count(opt[2:].ljust(12)) == 2


def test_filter_format_on_an_activation_is_refused():
    import tensorlayout as tl

    refused("image", "IN_OUT_CHANNEL", "--shape", "1,2,3,4", "--filter-format", "HWOI",
            match="only filters take a filter format")
    with pytest.raises(errors.LayoutError, match="only filters"):
        tl.to_image(np.ones((1, 2, 3, 4), np.float32), "IN_OUT_CHANNEL", filter_format="HWOI")
    with pytest.raises(errors.LayoutError, match="only filters"):
        tl.pixel_of("IN_OUT_WIDTH", (1, 2, 3, 4), (0, 0, 0, 0), filter_format="OIHW")


def test_draw_npu_blocks_per_row_must_be_positive(tmp_path):
    refused("draw", "npu", *NPU[1:], "--shape", "1,2,3,4", "--blocks-per-row", "0",
            "-o", tmp_path / "x.svg", match="--blocks-per-row")
    from tensorlayout.draw import npu_figure
    from tensorlayout.npu import Chip, tensor_layout

    with pytest.raises(errors.LayoutError, match="blocks_per_row"):
        npu_figure(tensor_layout(Chip(4, 1024, 128), 0, (1, 2, 3, 4)), blocks_per_row=0)


# ----------------------------------------------------------------- depthwise weight order
def test_pytorch_depthwise_order_is_c1hw():
    import tensorlayout as tl

    rng = np.random.default_rng(0)
    w = rng.standard_normal((32, 1, 3, 3)).astype(np.float32)   # PyTorch: (C, 1, KH, KW)
    img = tl.to_image(w, "DW_CONV2D_FILTER", filter_format="C1HW")
    # MACE's DW image (seed 002): pixel (kh * KW + kw, c // 4), lane c % 4 holds w[c, 0, kh, kw]
    assert img.shape == (8, 9, 4)
    for c in range(32):
        for kh in range(3):
            for kw in range(3):
                assert img[c // 4, kh * 3 + kw, c % 4] == w[c, 0, kh, kw]
    assert np.array_equal(tl.from_image(img, "DW_CONV2D_FILTER", w.shape, filter_format="c1hw"), w)
    err = refused("image", "DW_CONV2D_FILTER", "--shape", "32,1,3,3", match="ambiguous")
    assert "C1HW" in err
    refused("image", "DW_CONV2D_FILTER", "--shape", "1,32,3,3", "--filter-format", "OIHW", match="C1HW")
    refused("image", "DW_CONV2D_FILTER", "--shape", "32,2,3,3", "--filter-format", "C1HW", match="1 in the second")
    rc, out, _ = run("image", "DW_CONV2D_FILTER", "--shape", "32,1,3,3", "--filter-format", "C1HW", "--json")
    assert rc == 0 and json.loads(out)["image"] == [9, 8] and json.loads(out)["padding_waste"] == 0
    rc, out, _ = run("image", "DW_CONV2D_FILTER", "--shape", "32,1,3,3", "--filter-format", "MIHW", "--json")
    assert rc == 0 and json.loads(out)["image"] == [288, 1]     # a multiplier of 32, as asked


# ----------------------------------------------------------------- no traceback, sizes checked
@pytest.mark.parametrize("argv", [
    ("conv", "--input", "1,-16,8,8", "--out-channels", "4"),
    ("conv", "--shape", "1,16,8,8", "--out-channels=-4"),
    ("conv", "--shape", "1,16,8,8", "--out-channels", "4", "--kernel=-3"),
    ("conv", "--shape", "1,16,8,8", "--out-channels", "4", "--kernel", "11", "--padding", "0"),
    ("conv", "--shape", "1,16,8,8", "--out-channels", "6", "--groups", "4"),
    ("conv", "--shape", "1,16,8,8", "--out-channels", "4", "--repeat", "0"),
    ("opencl", "roundtrip", "IN_OUT_CHANNEL", "--shape", "1,-2,3,4"),
    ("opencl", "conv", "--input", "1,-32,28,28"),
    ("opencl", "conv", "--kernel", "0"),
])
def test_bad_numbers_are_one_line_errors(argv):
    refused(*argv)


@pytest.mark.parametrize("value", ["\r", "a\nb", "\x1b[31m", "\u2028", "\x85"])
def test_control_characters_in_a_value_are_escaped(value):
    """An error echoing the user's value stays one line: control characters come back escaped."""
    err = refused("opencl", "conv", "--", f"--algorithm={value}")
    assert len(err.splitlines()) == 1 and value.encode("unicode_escape").decode() in err, repr(err)


@pytest.mark.parametrize("argv", [
    ("conv", "--input", "1,16,100000,100000", "--out-channels", "4"),
    ("conv", "--shape", "1,16,8,8", "--out-channels", "4", "--kernel", "3", "--padding", "100000"),
    ("conv", "--shape", "1,1,8,8", "--out-channels", "4000000000"),
    ("opencl", "roundtrip", "ARGUMENT", "--shape", "1099511627776"),
    ("opencl", "conv", "--shape", "1,16,100000,100000", "--algorithm", "direct"),
])
def test_sizes_are_checked_before_allocating(argv):
    refused(*argv, match="bytes")


def test_local_memory_too_large_to_simulate():
    from tensorlayout.npu import Chip, LocalMemory

    with pytest.raises(errors.DeviceLimitError, match="MAX_SIMULATED_BYTES"):
        LocalMemory(Chip(4, 2 ** 40, 128))


def test_opencl_conv_kernel_message_names_the_rule():
    refused("opencl", "conv", "--kernel", "5", match="Winograd on images takes 3x3 kernels")


def test_demo_into_a_closed_pipe_is_quiet(tmp_path):
    import os

    env = dict(os.environ, PYTHONPATH=str(SRC))
    p = subprocess.Popen([sys.executable, "-m", "tensorlayout", "demo", "--out", "gal"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    first = p.stdout.readline()
    p.stdout.close()                           # what `| head -1` does
    err = p.stderr.read().decode()
    rc = p.wait(timeout=120)
    assert first.startswith(b"tensorlayout:")
    assert rc == 0 and err == "", err


# ----------------------------------------------------------------- messages
def test_messages_are_clear_and_short():
    import tensorlayout as tl

    with pytest.raises(errors.IndexOutOfRange, match="out of range"):
        tl.pixel_of("IN_OUT_CHANNEL", (1, 2, 3, 5), (0, 0, 0, 2 ** 70))
    with pytest.raises(errors.IndexOutOfRange, match="out of range"):
        tl.pixel_of("IN_OUT_CHANNEL", (1, 2, 3, 5), (0, 0, 0, 1e300))
    with pytest.raises(errors.DTypeError) as exc:
        tl.to_image(np.ones(5, np.float32), "ARGUMENT", dtype=np.int8)
    assert "dtype = int8 " in str(exc.value) and "class" not in str(exc.value)
    from tensorlayout.npu import Chip, tensor_layout

    with pytest.raises(errors.DTypeError) as exc:
        tensor_layout(Chip(4, 1024, 128), 0, (1, 2, 3, 4), dtype=np.dtype("int64"))
    assert "dtype = int64 " in str(exc.value)
    assert "an activation tensor" in refused("buffer", "NCHW", "--shape", "1,2,3,4", "--to", "OIHW")
    huge = ",".join(["7"] * 50000)                             # a 100 KB argument
    assert len(refused("image", "IN_OUT_CHANNEL", "--shape", huge)) < 400
    assert len(refused("npu", "--chip", "x" * 100000, "--shape", "1")) < 700
    with pytest.raises(errors.LayoutError) as exc:
        tl.to_image(np.ones(5, np.float32), "ARGUMENT", layout="N" * 100000)
    assert len(str(exc.value)) < 700


def test_drawing_functions_check_their_arguments():
    from tensorlayout.draw import address_figure, npu_figure
    from tensorlayout.npu import Chip

    with pytest.raises(errors.LayoutError, match="NpuTensor"):
        npu_figure("t")
    svg = address_figure(Chip(4, 1024, 128), [340])          # a list: named A, B, ...
    assert 'data-npu="0" data-offset="340" data-kind="mark" data-address="340"' in svg
    with pytest.raises(errors.LayoutError, match="Chip"):
        address_figure("chip", [340])


# ----------------------------------------------------------------- one command line
def _commands():
    """(words, parser) of every command and sub-action."""
    found = []

    def walk(words, parser):
        subs = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
        if not subs:
            found.append((words, parser))
        for a in subs:
            for name, p in a.choices.items():
                walk(words + [name], p)

    walk([], build_parser())
    return found


def test_every_command_takes_json_and_every_option_has_help():
    cmds = _commands()
    assert len(cmds) >= 12
    for words, parser in cmds:
        opts = {s for a in parser._actions for s in a.option_strings}
        assert "--json" in opts, words
        for a in parser._actions:
            assert a.help and a.help.strip(), (words, a.dest)


def test_no_command_prints_help_and_exits_2():
    rc, out, err = run()
    assert rc == 2 and "usage: tensorlayout" in err and "COMMAND" in err


@pytest.mark.parametrize("argv", [
    ("image", "IN_OUT_CHANNEL", "--shape", "1,0,2,8"),
    ("npu", "--chip", "BM9999", "--shape", "1,2,3,4"),
    ("conv", "--shape", "1,2,3", "--out-channels", "4"),
    ("conv", "--shape", "1,2,8,8", "--out-channels", "x"),
    ("winograd", "--bogus"),
    ("draw", "image", "NOPE", "--shape", "1", "-o", "x.svg"),
    ("figures",),
])
def test_errors_are_json_under_json(argv):
    rc, out, err = run(*argv, "--json")
    assert rc == 2 and out == ""
    obj = json.loads(err)
    assert set(obj) == {"error", "argument"} and obj["error"]
    rc, out2, err2 = run(*argv)
    assert rc == 2 and obj["error"] in err2


def test_json_error_names_the_argument():
    _, _, err = run("image", "IN_OUT_CHANNEL", "--shape", "1,0,2,8", "--json")
    assert json.loads(err)["argument"] == "shape"
    _, _, err = run("conv", "--shape", "1,2,8,8", "--out-channels", "x", "--json")
    assert json.loads(err)["argument"] == "--out-channels"
    _, _, err = run("npu", "--shape", "1,2,3,4", "--chip", "BM1684", "--offset", "1", "--address", "0", "--json")
    assert json.loads(err)["argument"] == "--offset"


def test_every_command_prints_json(tmp_path):
    for argv in (("demo", "--out", tmp_path / "g"), ("figures", "--out", tmp_path / "f"),
                 ("draw", "image", "CONV2D_FILTER", "--shape", "5,3,3,3", "-o", tmp_path / "a.svg"),
                 ("draw", "npu", "--chip", "BM1684", "--shape", "1,96,8,8", "-o", tmp_path / "b.svg"),
                 ("winograd", "--m", "2"), ("buffer", "NCHW", "--shape", "1,2,3,4"),
                 ("image", "ARGUMENT", "--shape", "5"), ("npu", "--chip", "BM1684", "--shape", "1,2,3,4"),
                 ("conv", "--shape", "1,4,6,6", "--out-channels", "4", "--repeat", "1")):
        rc, out, err = run(*argv, "--json")
        assert rc == 0, err
        json.loads(out)


@pytest.mark.parametrize("spelling,name", [("fp16", "float16"), ("float16", "float16"), ("HALF", "float16"),
                                           ("fp32", "float32"), ("Float32", "float32"), ("single", "float32")])
def test_dtype_spellings_are_the_same_everywhere(spelling, name):
    rc, out, _ = run("image", "ARGUMENT", "--shape", "5", "--dtype", spelling, "--json")
    assert rc == 0 and json.loads(out)["dtype"] == name and json.loads(out)["bytes"] == 2 * 16 // (
        2 if name == "float16" else 1)
    rc, out, _ = run("npu", "--chip", "bm1684", "--shape", "1,2,3,4", "--dtype", spelling, "--json")
    assert rc == 0 and json.loads(out)["dtype"] == {"float16": "fp16", "float32": "fp32"}[name]
    if name == "float32":
        rc, out, err = run("conv", "--shape", "1,4,6,6", "--out-channels", "4", "--repeat", "1",
                           "--dtype", spelling, "--json")
        assert rc == 0, err
    refused("image", "ARGUMENT", "--shape", "5", "--dtype", "fp8", match="float16, fp16, f16, half")


def test_names_are_case_insensitive():
    rc, out, _ = run("IMAGE", "in_out_channel", "--shape", "1,2,3,4", "--layout", "nchw", "--json")
    assert rc == 0 and json.loads(out)["buffer_format"] == "NCHW"
    rc, out, _ = run("npu", "--chip", "bm1688", "--shape", "8,4,2,2", "--dtype", "INT8", "--mode", "4n",
                     "--layout", "Aligned", "--json")
    assert rc == 0 and json.loads(out)["mode"] == "4N" and json.loads(out)["chip"]["name"] == "BM1688"
    rc, out, _ = run("buffer", "nchw", "--shape", "1,2,3,4", "--to", "nhwc", "--json")
    assert rc == 0 and json.loads(out)["to"]["format"] == "NHWC"


def test_conv_takes_shape_and_the_old_input():
    a = json.loads(run("conv", "--shape", "1,4,9,9", "--out-channels", "3", "--repeat", "1", "--json")[1])
    b = json.loads(run("conv", "--input", "1,4,9,9", "--out-channels", "3", "--repeat", "1", "--json")[1])
    assert a["output"] == b["output"] == [1, 3, 9, 9]


@pytest.mark.parametrize("k,d,s,p", [(3, 2, 1, None), (3, 3, 2, 1), (5, 2, 1, 0)])
def test_conv_dilation(k, d, s, p):
    argv = ["conv", "--shape", "2,6,17,13", "--out-channels", "4", "--kernel", k, "--dilation", d,
            "--stride", s, "--repeat", "1", "--json"]
    if p is not None:
        argv += ["--padding", p]
    rc, out, err = run(*argv)
    assert rc == 0, err
    info = json.loads(out)
    pad = d * (k - 1) // 2 if p is None else p
    span = d * (k - 1) + 1                      # PyTorch's output size formula
    assert info["output"] == [2, 4, (17 + 2 * pad - span) // s + 1, (13 + 2 * pad - span) // s + 1]
    assert info["rel_l2_error_vs_float64_direct"] < 1e-5


def test_conv_compare_runs_every_applicable_algorithm():
    rc, out, err = run("conv", "--shape", "1,16,20,20", "--out-channels", "16", "--compare",
                       "--repeat", "1", "--json")
    assert rc == 0, err
    info = json.loads(out)
    ran = {r["algorithm"]: r for r in info["results"]}
    assert set(ran) == {"auto", "winograd:2", "winograd:4", "winograd:6", "im2col", "direct"}
    assert ran["winograd:4"]["ran"] == "winograd F(4,3)"
    assert all(r["rel_l2_error_vs_float64_direct"] < 1e-4 for r in ran.values())
    rc, out, _ = run("conv", "--shape", "1,16,20,20", "--out-channels", "16", "--compare",
                     "--repeat", "1", "--stride", "2", "--json")
    info = json.loads(out)
    assert {r["algorithm"] for r in info["not_applicable"]} == {"winograd:2", "winograd:4", "winograd:6"}
    rc, out, _ = run("conv", "--shape", "1,16,20,20", "--out-channels", "16", "--compare", "--repeat", "1")
    assert rc == 0 and "winograd:6" in out and "error vs float64" in out


# ----------------------------------------------------------------- image dumps, npu fit, winograd scaling
def test_image_from_dump_with_a_row_pitch(tmp_path):
    import tensorlayout as tl

    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)   # NCHW
    img = tl.to_image(x, "IN_OUT_CHANNEL", layout="NCHW")      # (H, W, 4) = (10, 12, 4)
    h, w, _ = img.shape
    pitch = w * 16 + 64
    rows = np.full((h, pitch), 0xAB, np.uint8)                  # the gap holds garbage
    rows[:, :w * 16] = img.view(np.uint8).reshape(h, -1)
    (tmp_path / "d.bin").write_bytes(rows.tobytes())
    rc, out, err = run("image", "IN_OUT_CHANNEL", "--shape", "2,3,5,6", "--layout", "NCHW",
                       "--from-dump", tmp_path / "d.bin", "--row-pitch", pitch,
                       "--save", tmp_path / "t.npy")
    assert rc == 0, err
    assert np.array_equal(np.load(tmp_path / "t.npy"), x)
    refused("image", "IN_OUT_CHANNEL", "--shape", "2,3,5,6", "--layout", "NCHW",
            "--from-dump", tmp_path / "d.bin", match="row_pitch")          # the size gives it away
    refused("image", "IN_OUT_CHANNEL", "--shape", "2,3,5,6", "--row-pitch", "256",
            match="--from-dump")
    # float16 dump, no gap
    img16 = tl.to_image(x, "IN_OUT_CHANNEL", layout="NCHW", dtype=np.float16)
    (tmp_path / "h.bin").write_bytes(img16.tobytes())
    rc, out, _ = run("image", "IN_OUT_CHANNEL", "--shape", "2,3,5,6", "--layout", "NCHW",
                     "--dtype", "half", "--from-dump", tmp_path / "h.bin", "--json")
    assert rc == 0 and np.array_equal(np.array(json.loads(out)["values"], np.float16), x.astype(np.float16))
    with pytest.raises(errors.RankError, match="image_from_dump"):
        tl.from_image(img.ravel(), "IN_OUT_CHANNEL", (2, 3, 5, 6), layout="NCHW")


def test_npu_says_whether_the_tensor_fits():
    rc, out, _ = run("npu", "--chip", "BM1684", "--shape", "1,64,300,300")
    # aligned fp32, one channel per NPU: 300 * 300 * 4 = 360000 of 524288 bytes
    assert rc == 0 and "fits        yes: bytes [0, 360000) of each NPU's 524288" in out
    err = refused("npu", "--chip", "BM1684", "--shape", "1,64,400,400")
    assert "does not fit the local memory" in err and "640000" in err
    rc, out, _ = run("npu", "--chip", "BM1684", "--shape", "1,64,300,300", "--json")
    assert json.loads(out)["fits_local_memory"] is True


def _identity_holds(info):
    AT = [[Fraction(v) for v in row] for row in info["AT"]]
    G = [[Fraction(v) for v in row] for row in info["G"]]
    BT = [[Fraction(v) for v in row] for row in info["BT"]]
    m, r, a = info["m"], info["r"], info["alpha"]
    # sum_t AT[i,t] G[t,k] BT[t,j] == [j == i + k]: y = AT((G g) * (BT d)) is the correlation
    return all(sum(AT[i][t] * G[t][k] * BT[t][j] for t in range(a)) == (1 if j == i + k else 0)
               for i in range(m) for k in range(r) for j in range(a))


def test_winograd_says_which_scaling_it_prints():
    mace = json.loads(run("winograd", "--m", "2", "--json")[1])
    given = json.loads(run("winograd", "--m", "2", "--points", "0,1,-1", "--json")[1])
    assert mace["points"] == given["points"] == ["0", "1", "-1", "inf"]
    assert mace["G"] != given["G"]                           # the scalings differ ...
    assert mace["scaling"].startswith("MACE") and given["scaling"].startswith("Lagrange")
    assert _identity_holds(mace) and _identity_holds(given)   # ... and both are exact
    assert "scaling: Lagrange" in run("winograd", "--m", "2", "--points", "0,1,-1")[1]


def test_library_names_are_case_insensitive_too():
    from tensorlayout.npu import get_chip, tensor_layout

    a = tensor_layout(get_chip("bm1684"), 0, (8, 2, 2, 2), dtype="INT8", mode="4n")
    b = tensor_layout(get_chip("BM1684"), 0, (8, 2, 2, 2), dtype="int8", mode="4N")
    assert (a.mode, a.stride, a.dtype) == (b.mode, b.stride, b.dtype) == ("4N", b.stride, np.dtype(np.int8))
