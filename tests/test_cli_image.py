"""The ``image`` and ``buffer`` commands and their parts of the tour."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tensorlayout.cli import main


def test_image_text_answers(capsys):
    rc = main(["image", "IN_OUT_CHANNEL", "--shape", "1,2,3,5", "--where", "0,1,2,4", "--pixel", "5,1"])
    out = capsys.readouterr().out
    assert rc == 0
    # [q(C)*W, N*H] = [2*3, 2]; 6*2*4 lanes of 4 bytes; 48 - 30 padding lanes.
    assert "[6, 2]" in out and "192" in out and "37.5% (18 of 48 lanes)" in out
    assert "element (0, 1, 2, 4)   -> pixel x=5, y=1, lane 0" in out
    assert "lane 0 = (0, 1, 2, 4), lane 1 = padding, lane 2 = padding, lane 3 = padding" in out


def test_image_json_hwoi_float16(capsys):
    rc = main(["image", "conv2d_filter", "--shape", "3,3,5,3", "--filter-format", "HWOI", "--dtype",
               "float16", "--where", "2,2,4,2", "--pixel", "2,17", "--json"])
    info = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert info["kind"] == "CONV2D_FILTER" and info["number"] == 0 and info["buffer_format"] == "HWOI"
    assert info["image"] == [4, 18]  # [RoundUp4(I), H*W*q(O)]
    assert info["bytes"] == 4 * 18 * 4 * 2
    # o=4 -> pixel row block 1: y = (4 // 4) * 9 + 2*3 + 2 = 17, x = i = 2, lane 0.
    assert info["where"] == [{"index": [2, 2, 4, 2], "x": 2, "y": 17, "lane": 0}]
    assert info["pixels"][0]["lanes"] == [[2, 2, 4, 2], None, None, None]


def test_image_nchw_and_winograd(capsys):
    assert main(["image", "1", "--shape", "1,3,5,6", "--layout", "NCHW", "--where", "0,2,4,5", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["image"] == [6, 5] and info["where"][0] == {"index": [0, 2, 4, 5], "x": 5, "y": 4, "lane": 2}
    assert main(["image", "WINOGRAD_FILTER", "--shape", "8,3,3,3", "--tile", "2", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["image"] == [1, 128] and info["shape"] == [16, 8, 3]


def test_buffer_answers(capsys):
    assert main(["buffer", "NCHW", "--shape", "1,3,5,6", "--where", "0,2,4,5", "--to", "nhwc"]) == 0
    out = capsys.readouterr().out
    assert "90 elements" in out and "(1, 5, 6, 3)" in out
    assert "offset 89  ->  NHWC index (0, 4, 5, 2), offset 89" in out
    assert main(["buffer", "OIHW", "--shape", "8,3,3,3", "--where", "1,0,0,0", "--to", "HWOI", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    # OIHW offset of o=1: I*H*W = 27; HWOI (0, 0, 1, 0): offset I = 3.
    assert info["where"][0]["offset"] == 27
    assert info["where"][0]["to"] == {"index": [0, 0, 1, 0], "offset": 3}
    # a blocked format both ways: (n, c, h, w) at ((n·B + c // 16)·H + h)·W·16 + w·16 + c % 16
    assert main(["buffer", "nchw16c", "--shape", "1,20,2,3", "--where", "0,17,1,2", "--to", "NHWC",
                 "--offset", "177", "--offset", "180", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["format"] == "NCHW16c" and info["slots"] == 192 and info["elements"] == 120
    assert info["where"][0] == {"index": [0, 17, 1, 2], "offset": 177,
                                "to": {"index": [0, 1, 2, 17], "offset": 117}}
    assert info["offsets"] == [{"offset": 177, "element": [0, 17, 1, 2]},
                               {"offset": 180, "element": None}]


@pytest.mark.parametrize("argv, needle", [
    (["image", "NOPE", "--shape", "1,2,3,4"], "kind = 'NOPE'"),
    (["image", "IN_OUT_CHANNEL", "--shape", "1,2,x,4"], "--shape = '1,2,x,4'"),
    (["image", "IN_OUT_CHANNEL", "--shape", "1,2,0,4"], "shape[2] = 0"),
    (["image", "IN_OUT_CHANNEL", "--shape", "1,2,3"], "has 3 dimensions"),
    (["image", "IN_OUT_CHANNEL", "--shape", "1,2,3,5", "--where", "0,2,0,0"], "index h = 2"),
    (["image", "IN_OUT_CHANNEL", "--shape", "1,2,3,5", "--pixel", "6,0"], "x = 6"),
    (["image", "IN_OUT_CHANNEL", "--shape", "1,2,3,5", "--pixel", "1,0,0"], "--pixel = '1,0,0'"),
    (["image", "IN_OUT_CHANNEL", "--shape", "1,2,3,5", "--dtype", "float64"], "dtype"),
    (["image", "IN_OUT_CHANNEL", "--shape", "1,2,3,5", "--layout", "NWHC"], "layout = 'NWHC'"),
    (["image", "CONV2D_FILTER", "--shape", "1,2,3,5", "--filter-format", "X"], "filter_format = 'X'"),
    (["image", "WINOGRAD_FILTER", "--shape", "1,2,3,3", "--tile", "3"], "tile = 3"),
    (["buffer", "NCWH", "--shape", "1,2,3,4"], "format = 'NCWH'"),
    (["buffer", "NCHW", "--shape", "1,2,3,4", "--to", "OIHW"], "--to = 'OIHW'"),
    (["buffer", "NCHW", "--shape", "1,2,3,4", "--where", "0,0,3,0"], "index h = 3"),
    (["buffer", "NCHW8c", "--shape", "1,2,3,4", "--offset", "96"], "--offset = 96"),
    (["buffer", "NCHW8c", "--shape", "1,2,3", "--offset", "0"], "shape = (1, 2, 3)"),
])
def test_errors_exit_2_with_one_line(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err


def test_tour_parts_print_every_type(capsys, tmp_path):
    from tensorlayout.cli import Tour
    from tensorlayout.cli_parts import buffer, image

    tour = Tour(str(tmp_path))
    buffer.demo(tour)
    image.demo(tour)
    out = capsys.readouterr().out
    for name in ("NCHW", "NHWC", "OIHW", "HWOI", "MIHW", "HWIM", "IN_OUT_CHANNEL", "IN_OUT_HEIGHT",
                 "IN_OUT_WIDTH", "CONV2D_FILTER", "DW_CONV2D_FILTER", "WEIGHT_HEIGHT", "WEIGHT_WIDTH",
                 "WINOGRAD_FILTER", "ARGUMENT"):
        assert name in out
    # The activation (1, 3, 5, 6) NCHW in IN_OUT_CHANNEL: [q(3)*6, 1*5] = [6, 5], 480 / 240 bytes.
    assert "[6, 5]    480 / 240" in out
    assert "(0, 2, 4, 5) -> (5, 4, 2)" in out


def test_subprocess_error_and_output():
    cmd = [sys.executable, "-m", "tensorlayout", "image", "IN_OUT_CHANNEL", "--shape", "1,1,20000,4",
           "--where", "0,0,0,0"]
    ok = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "[20000, 1]" in ok.stdout
    assert "image width 20000 is past the device maximum 16384 by 3616 pixels" in ok.stdout
    bad = subprocess.run(cmd[:-2] + ["--where", "0,0,20000,0"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "index w = 20000" in bad.stderr and "Traceback" not in bad.stderr
