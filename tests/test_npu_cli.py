"""The `tensorlayout npu` command and the NPU part of the tour."""

import io
import json
import math

from tensorlayout.cli import Tour, main
from tensorlayout.cli_parts import npu as npu_part

SEED = ["--npus", "4", "--lmem", "1024", "--align", "128"]


def run_json(capsys, *args):
    assert main(["npu", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_aligned_start_2_with_where_and_at(capsys):
    info = run_json(capsys, *SEED, "--shape", "2,3,4,5", "--start-npu", "2", "--where", "1,2,3,4", "--at", "0,128")
    assert info["stride"] == [64, 32, 5, 1] and info["channels_per_npu"] == 2
    # seed formula: NPU (2 + 2) % 4 = 0, byte 4 * (1*64 + 1*32 + 3*5 + 4)
    assert info["where"] == [{"index": [1, 2, 3, 4], "npu": 0, "offset": 4 * (64 + 32 + 15 + 4),
                             "address": 4 * (64 + 32 + 15 + 4)}]
    assert info["at"][0]["element"] == [0, 2, 0, 0]
    assert info["bytes_per_npu"] == [2 * 20 * 4, 0, 2 * 20 * 4, 2 * 20 * 4]


def test_bm1684_preset_modes_and_layouts(capsys):
    info = run_json(capsys, "--chip", "BM1684", "--shape", "6,5,4,5", "--dtype", "int8", "--mode", "4N",
                    "--address", str(3 * 512 * 1024 + 128), "--where", "5,1,0,0")
    assert info["packed_shape"] == [2, 5, 4, 5] and info["start_npu"] == 3
    assert info["stride"] == [32, 32, 5, 1]  # 128 B / 4 B = 32 words per step, 1 channel per NPU
    assert info["where"][0]["npu"] == 4 and info["where"][0]["offset"] == 128 + 4 * 32 + 1
    info = run_json(capsys, *SEED, "--shape", "6,5,4,5", "--dtype", "int8", "--mode", "4N", "--address", "0",
                    "--at", "0,258")
    assert info["at"][0]["element"] is None and info["at"][0]["dummy"] is True  # n = 6 of word (1, 0, 0, 0)
    info = run_json(capsys, *SEED, "--shape", "2,3,4,5", "--layout", "compact", "--start-npu", "2", "--offset", "8")
    assert info["stride"] == [40, 20, 5, 1] and info["offset"] == 8
    info = run_json(capsys, *SEED, "--shape", "2,5,3,4", "--layout", "stride:120,56,16,2", "--where", "1,4,2,3")
    assert (info["where"][0]["npu"], info["where"][0]["offset"]) == (0, 4 * (120 + 56 + 32 + 6))


def test_matrix(capsys):
    for w in (40, 20, 10, 8, 15, 6):
        info = run_json(capsys, *SEED, "--shape", "2,40", "--layout", f"matrix:{w}", "--where", "1,39")
        C = math.ceil(40 / w)
        assert info["shape"] == [2, C, 1, w]
        c, col = divmod(39, w)
        cs = 32 if w <= 32 else 64
        assert info["where"][0]["npu"] == c % 4
        assert info["where"][0]["offset"] == 4 * (cs * math.ceil(C / 4) + (c // 4) * cs + col)


def test_text_output_and_errors(capsys):
    assert main(["npu", *SEED, "--shape", "1,6,1,1", "--start-npu", "3"]) == 0
    out = capsys.readouterr().out
    assert "3 per NPU" in out and "6 feature-sized empty blocks" in out
    for bad in (["--chip", "BM1684", "--shape", "2,3,4,5", "--address", "4"],
                ["--shape", "2,3,4,5"],
                ["--chip", "BM1684", "--npus", "4", "--shape", "2,3,4,5"],
                [*SEED, "--shape", "2,3,4,5", "--layout", "tiled"],
                [*SEED, "--shape", "2,x,4,5"],
                [*SEED, "--shape", "2,3,4,5", "--mode", "4N"],
                [*SEED, "--shape", "2,3,4,5", "--start-npu", "4"],
                [*SEED, "--shape", "2,3,4,5", "--where", "2,0,0,0"]):
        assert main(["npu", *bad]) == 2, bad
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "error" in err


def test_demo_part(tmp_path):
    buf = io.StringIO()
    npu_part.demo(Tour(str(tmp_path), stream=buf))
    text = buf.getvalue()
    for want in ("address 1472 -> NPU 1, offset 448", "address 3088 -> NPU 3, offset 16",
                 "C=6 from NPU 3: 3 per NPU", "[400, 500, -2, -2]", "identical"):
        assert want in text
