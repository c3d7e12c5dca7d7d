"""Robustness as a property (hypothesis).

The command line: random argument lists built from the real commands and options, with random
values (negative, zero, huge, malformed, unicode, comma lists with holes), never end in a
traceback and exit only with 0 or 2; an exit 2 prints exactly one line on stderr.

The API: random bad shapes, dtypes and indices given to the layout functions raise a
``LayoutError`` subclass, never another exception.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorlayout as tl
from tensorlayout import errors

from _cli_util import assert_clean_end, draw_command_line, run, small_allocations  # noqa: F401 (a fixture)

# ----------------------------------------------------------------------- values
INTS = st.one_of(
    st.integers(-3, 12),
    st.sampled_from([0, -1, 2 ** 31, 2 ** 40, 2 ** 63, 2 ** 70, 10 ** 30]),
)
MALFORMED = st.sampled_from(["", " ", ",", "1,,2", "1,2,", "\uff11", "1_0", "0x10", "1e3", "-", "--",
                             "nan", "inf", "1/2", "\u0661", "\U0001F600", "1.5", "a,b", "None",
                             "1,2,3,4,5,6,7,8,9", "-0", "+3", "\x00", "9" * 40])
TEXT = st.text(min_size=0, max_size=12)


def mix(good, bad):
    """Two draws in three from ``good``, so that many command lines run to the end."""
    return st.integers(0, 2).flatmap(lambda i: good if i else bad)


def number(lo=1, hi=6):
    return mix(st.integers(lo, hi).map(str), st.one_of(INTS.map(str), MALFORMED, TEXT))


def int_list(min_size=1, max_size=5):
    return mix(st.lists(st.integers(0, 3), min_size=4, max_size=4).map(lambda v: ",".join(map(str, v))),
               st.one_of(st.lists(INTS, min_size=min_size, max_size=max_size).map(lambda v: ",".join(map(str, v))),
                         MALFORMED, TEXT))


def shape4():
    small = st.integers(1, 9)
    return mix(st.tuples(small, small, small, small).map(lambda v: ",".join(map(str, v))), int_list(0, 6))


def names(*good):
    return mix(st.sampled_from(good), NAMES)


NAMES = st.one_of(TEXT, st.sampled_from([
    "IN_OUT_CHANNEL", "in_out_height", "IN_OUT_WIDTH", "ARGUMENT", "CONV2D_FILTER", "DW_CONV2D_FILTER",
    "WEIGHT_HEIGHT", "WEIGHT_WIDTH", "WINOGRAD_FILTER", "0", "5", "9", "-1", "NCHW", "nhwc", "OIHW", "HWOI",
    "MIHW", "HWIM", "C1HW", "W", "fp32", "FP16", "half", "int8", "uint16", "float64", "bool", "BM1684",
    "bm1688", "4N", "2n", "2IC", "aligned", "compact", "matrix:4", "matrix:0", "stride:1,2,3,4", "stride:",
    "auto", "winograd", "winograd:4", "winograd:0", "im2col", "direct"]))

# Each command: its leading words and its options with the kind of value each takes.
COMMANDS = {
    ("image",): dict(positional=names("IN_OUT_CHANNEL", "ARGUMENT", "CONV2D_FILTER", "dw_conv2d_filter"),
                     required=("--shape",), opts={
        "--shape": shape4(), "--layout": NAMES, "--filter-format": NAMES, "--tile": number(),
        "--dtype": names("fp16", "float32", "half"), "--where": int_list(), "--pixel": int_list(1, 3), "--json": None,
        "--from-dump": st.sampled_from(["missing.bin", "dump.bin", "", "."]), "--row-pitch": number(),
        "--save": st.sampled_from(["t.npy", "", "/nonexistent/x.npy"])}),
    ("buffer",): dict(positional=names("NCHW", "oihw", "MIHW", "NHWC"), required=("--shape",), opts={
        "--shape": shape4(), "--where": int_list(), "--to": NAMES, "--json": None}),
    ("npu",): dict(positional=None, required=("--chip", "--shape"), opts={
        "--chip": names("BM1684", "bm1688"), "--npus": number(), "--lmem": number(64, 4096),
        "--align": number(), "--shape": shape4(), "--dtype": names("fp32", "INT8", "half"),
        "--layout": names("aligned", "compact", "matrix:3"), "--mode": NAMES,
        "--address": number(), "--start-npu": number(), "--offset": number(),
        "--where": int_list(), "--at": int_list(1, 3), "--json": None}),
    ("winograd",): dict(positional=None, required=(), opts={
        "--m": number(), "--r": number(), "--points": int_list(0, 8), "--json": None}),
    ("conv",): dict(positional=None, required=("--shape", "--out-channels"), opts={
        "--shape": shape4(), "--input": shape4(), "--out-channels": number(), "--kernel": number(1, 3),
        "--stride": number(1, 2), "--padding": number(0, 2), "--dilation": number(1, 2),
        "--groups": number(1, 2), "--algorithm": names("auto", "winograd:2", "im2col", "direct"),
        "--dtype": names("fp32", "double"), "--repeat": st.sampled_from(["1", "0", "-1", "x", "2000"]),
        "--seed": number(), "--compare": None, "--json": None}),
    ("draw", "image"): dict(positional=names("IN_OUT_CHANNEL", "CONV2D_FILTER"), required=("--shape", "-o"), opts={
        "--shape": shape4(), "--layout": NAMES, "--filter-format": NAMES, "--tile": number(),
        "--max-width": number(), "--max-height": number(), "-o": st.sampled_from(["f.svg", "/nonexistent/f.svg"]),
        "--json": None}),
    ("draw", "npu"): dict(positional=None, required=("--chip", "--shape", "-o"), opts={
        "--chip": names("BM1684", "bm1688"), "--npus": number(), "--lmem": number(), "--shape": shape4(), "--dtype": NAMES,
        "--layout": NAMES, "--mode": NAMES, "--start-npu": number(), "--blocks-per-row": number(),
        "--max-rows": number(), "-o": st.sampled_from(["f.svg", "."]), "--json": None}),
    ("opencl", "roundtrip"): dict(positional=NAMES, required=("--shape",), opts={
        "--shape": int_list(), "--layout": NAMES, "--filter-format": NAMES, "--tile": number(),
        "--dtype": NAMES, "--half": None, "--device": TEXT, "--json": None}),
    ("opencl", "conv"): dict(positional=None, required=(), opts={
        "--shape": shape4(), "--out-channels": number(), "--kernel": number(), "--padding": number(),
        "--algorithm": NAMES, "--tile": number(), "--dtype": NAMES, "--device": TEXT, "--json": None}),
}


@st.composite
def command_lines(draw):
    argv = draw_command_line(draw, COMMANDS, draw(st.sampled_from(sorted(COMMANDS))))
    if draw(st.integers(0, 9)) == 0:
        argv.insert(draw(st.integers(0, len(argv))), draw(st.sampled_from(["--bogus", "-x", "--json", "--"])))
    return argv


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    (d / "dump.bin").write_bytes(np.arange(64, dtype=np.float32).tobytes())
    return d


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(argv=command_lines())
def test_command_line_never_shows_a_traceback(argv, workdir, monkeypatch):
    monkeypatch.chdir(workdir)
    rc, _, err = run(*argv)
    assert_clean_end(argv, rc, err)


def test_the_generator_reaches_both_outcomes(workdir, monkeypatch):
    """The property is not vacuous: well-formed lines succeed, malformed ones are refused."""
    monkeypatch.chdir(workdir)
    ok = [["image", "IN_OUT_CHANNEL", "--shape", "1,2,3,4"], ["npu", "--chip", "bm1684", "--shape", "1,2,3,4"],
          ["conv", "--shape", "1,2,5,5", "--out-channels", "2", "--repeat", "1"]]
    bad = [["image", "IN_OUT_CHANNEL", "--shape", "1,\uff12,3,4"], ["npu", "--shape", "1,2,3,4"],
           ["conv", "--shape", "1,2,5,5", "--out-channels", str(2 ** 70)]]
    assert [run(*a)[0] for a in ok] == [0, 0, 0]
    assert [run(*a)[0] for a in bad] == [2, 2, 2]


# ----------------------------------------------------------------------- the API
BAD_DIMS = st.one_of(st.integers(-5, 0), st.sampled_from([2 ** 70, -2 ** 70, 1.5, float("nan"), float("inf"),
                                                          "3", None, True, b"1", (1,), np.float64(2.5)]))
SHAPES = st.one_of(
    st.lists(st.one_of(st.integers(1, 6), BAD_DIMS), min_size=0, max_size=6).map(tuple),
    st.sampled_from(["1,2,3,4", b"1234", 5, None, 3.0, {"a": 1}, [[1, 2], [3, 4]], np.ones((2, 2))]),
)
DTYPES = st.sampled_from(["fp8", "float128", "int4", "complex64", np.complex64, np.int64, np.bool_, object,
                          "O", "", None if False else "U3", 3, "half ", [np.float32], {"f": 1}])
INDICES = st.one_of(
    st.lists(st.one_of(st.integers(-3, 8), st.sampled_from([2 ** 70, -2 ** 70, 1.5, float("nan"), "1", None,
                                                           1e300, np.uint64(2 ** 64 - 1), True])),
             min_size=0, max_size=6).map(tuple),
    st.sampled_from([None, "0,0,0,0", 3, 2 ** 70, 1.5, np.ones((2, 3)), [[0, 0, 0, 0]]]),
)
KINDS = st.sampled_from(["IN_OUT_CHANNEL", "IN_OUT_WIDTH", "ARGUMENT", "CONV2D_FILTER", "DW_CONV2D_FILTER",
                         "WEIGHT_WIDTH", "WINOGRAD_FILTER", 1, 6])


def api_calls():
    from tensorlayout import buffer, npu

    chip = npu.Chip(4, 1024, 128)
    good = (1, 2, 3, 4)
    return st.one_of(
        st.builds(lambda k, s: lambda: tl.image_shape(k, s), KINDS, SHAPES),
        st.builds(lambda k, s, d: lambda: tl.image_nbytes(k, s, d), KINDS, st.just(good), DTYPES),
        st.builds(lambda k, d: lambda: tl.to_image(np.ones(good, np.float32), k, dtype=d), KINDS, DTYPES),
        st.builds(lambda k, s: lambda: tl.from_image(np.zeros((2, 3, 4), np.float32), k, s), KINDS, SHAPES),
        st.builds(lambda k, i: lambda: tl.pixel_of(k, good, i), KINDS, INDICES),
        st.builds(lambda k, x, y, c: lambda: tl.element_at(k, good, x, y, c), KINDS,
                  *(st.sampled_from([-1, 2 ** 70, 1.5, "0", None, 10 ** 6, float("nan")]),) * 3),
        st.builds(lambda f, s: lambda: buffer.buffer_layout(f, s), st.sampled_from(["NCHW", "OIHW", "W", "X"]),
                  SHAPES),
        st.builds(lambda s: lambda: npu.tensor_layout(chip, 0, s), SHAPES),
        st.builds(lambda d: lambda: npu.tensor_layout(chip, 0, good, dtype=d), DTYPES),
        st.builds(lambda i: lambda: npu.tensor_layout(chip, 0, good).locate(i), INDICES),
        st.builds(lambda a, b: lambda: npu.tensor_layout(chip, 0, good).element_at(a, b),
                  *(st.sampled_from([-1, 2 ** 70, 1.5, "0", None, 5000, float("inf")]),) * 2),
        st.builds(lambda x, s, a: lambda: npu.Chip(x, s, a), *(st.one_of(st.integers(-2, 4), BAD_DIMS),) * 3),
        st.builds(lambda s, d: lambda: npu.LocalMemory(chip).l2s(0, s, d), SHAPES, DTYPES),
        st.builds(lambda w, h, p: lambda: tl.image_from_dump(b"\0" * 64, w, h, row_pitch=p),
                  *(st.one_of(st.integers(-2, 5), BAD_DIMS),) * 2, st.one_of(st.none(), st.integers(-2, 80), BAD_DIMS)),
    )


@settings(max_examples=1000, deadline=None)
@given(call=api_calls())
def test_api_raises_only_layout_errors(call):
    try:
        call()
    except errors.LayoutError:
        pass
