"""The network surfaces refuse what they cannot do, by name, before anything is computed or written.

One test (or a parametrized group) per class of problem: output paths (every command that
writes, every kind of bad place), input files that are not regular files or not arrays, the
numbers of the command line (seeds, threads, channels), onnxruntime refusing a model under
--check, non-finite outputs reported as such, the zoo's arguments, the report's folder, and
images too large for the machine. Each refusal is one line on stderr, exit status 2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from tensorlayout import errors  # noqa: E402
from tensorlayout.model import zoo  # noqa: E402

from _cli_util import run  # noqa: E402

SRC = Path(__file__).resolve().parents[1] / "src"


def refused(*argv, match=()):
    rc, out, err = run(*argv)
    assert rc == 2, (argv, rc, out, err)
    assert "Traceback" not in err and err.count("\n") == 1, err
    for m in (match,) if isinstance(match, str) else match:
        assert m in err, (m, err)
    return err


def strict_json(text):
    """JSON with no NaN or Infinity tokens (which are not JSON)."""
    def bad(token):
        raise ValueError(f"not JSON: {token}")
    return json.loads(text, parse_constant=bad)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("net")
    (d / "tiny.onnx").write_bytes(zoo.tiny_onnx())
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.save(d / "x.npy", x)
    nan = x.copy()
    nan[0, 0, 2:5, 2:5] = np.nan
    np.save(d / "nan.npy", nan)
    (d / "afile").write_text("x")
    (d / "adir").mkdir()
    (d / "empty.npy").write_bytes(b"")
    (d / "garbage.npy").write_bytes(b"\x93NUMPY not really")
    np.savez(d / "two.npz", a=x, b=x)
    os.mkfifo(d / "fifo")
    m = onnx.load(str(d / "tiny.onnx"))
    dims = m.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_param, dims[3].dim_param = "H", "W"
    onnx.save(m, str(d / "dynamic.onnx"))
    m = onnx.load(str(d / "tiny.onnx"))
    m.graph.output[0].type.tensor_type.elem_type = onnx.TensorProto.INT64   # onnxruntime refuses it
    onnx.save(m, str(d / "ort_refuses.onnx"))
    return d


# ----------------------------------------------------------------- output paths
def _writers(d):
    """Every command that writes: (option, wants a folder, argv without the path)."""
    tiny = d / "tiny.onnx"
    return [
        ("--save", False, ["run", tiny, "--save"]),
        ("--html", True, ["plan", tiny, "--html"]),
        ("--svg", False, ["npu", "plan-conv", "--input", "1,3,8,8", "--out-channels", "4", "--kernel", "3", "--svg"]),
        ("--out", True, ["figures", "--out"]),
        ("--output", False, ["draw", "image", "ARGUMENT", "--shape", "5", "-o"]),
        ("--output", False, ["draw", "npu", "--chip", "BM1684", "--shape", "1,2,3,4", "-o"]),
        ("--save", False, ["image", "ARGUMENT", "--shape", "4", "--from-dump", d / "afile", "--save"]),
        ("--out", True, ["demo", "--out"]),
    ]


def _bad_places(d, folder):
    """(place, the rule's words) for every kind of place nothing can be written to."""
    places = [(d / "afile" / "x", "under a file"), ("/dev/null", "/dev/null"), ("/proc/tl-x", "under /proc"),
              ("/sys/tl-x", "under /sys"), ("", "must name")]
    if folder:
        places.append((d / "afile", "is a file, not a folder"))
    else:
        places += [(d / "adir", "is a folder"), (d / "missing" / "x.out", "does not exist"),
                   (d / "fifo", "not a regular file")]
    return places


def test_every_writer_checks_its_path_at_the_door(files):
    before = sorted(p.name for p in files.iterdir())
    checked = 0
    for option, folder, argv in _writers(files):
        for place, rule in _bad_places(files, folder):
            refused(*argv, place, match=(option, rule))
            checked += 1
    assert sorted(p.name for p in files.iterdir()) == before      # nothing was written
    assert checked >= 40


def test_an_unwritable_folder_is_refused(files, tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root may write anywhere")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    refused("run", files / "tiny.onnx", "--save", ro / "y.npy", match=("--save", "cannot be written"))
    refused("plan", files / "tiny.onnx", "--html", ro / "r", match=("--html", "cannot be written"))


def test_outputs_are_written_where_asked(files, tmp_path):
    rc, _, err = run("run", files / "tiny.onnx", "--save", tmp_path / "y")      # no suffix added
    assert rc == 0, err
    assert np.load(tmp_path / "y").shape == (1, 10)
    rc, _, err = run("plan", files / "tiny.onnx", "--html", tmp_path / "a" / "b")   # folders made
    assert rc == 0 and (tmp_path / "a" / "b" / "index.html").is_file(), err
    rc, _, err = run("npu", "plan-conv", "--input", "1,3,8,8", "--out-channels", "4", "--kernel", "3",
                     "--svg", tmp_path / "t.svg")
    assert rc == 0 and (tmp_path / "t.svg").read_text().startswith("<svg"), err


def test_write_report_checks_its_folder(files, tmp_path):
    from tensorlayout.model import load, plan_model
    from tensorlayout.model.report import write_report

    plan = plan_model(load(str(files / "tiny.onnx")))
    for bad in ("", None, files / "afile", files / "afile" / "r", "/proc/tl-r", 3):
        with pytest.raises(errors.LayoutError, match="out_dir"):
            write_report(plan, bad)
    with pytest.raises(errors.LayoutError, match="plan"):
        write_report("model.onnx", tmp_path)
    assert os.path.basename(write_report(plan, tmp_path / "r")) == "index.html"


# ----------------------------------------------------------------- input files
@pytest.mark.parametrize("name,rule", [
    ("fifo", "not a regular file"), ("/dev/zero", "not a regular file"), ("adir", "folder"),
    ("empty.npy", "cannot be read"), ("garbage.npy", "cannot be read"), ("two.npz", ".npz"),
    ("missing.npy", "does not exist")])
def test_bad_input_files_are_refused(files, name, rule):
    path = name if name.startswith("/") else files / name
    refused("run", files / "tiny.onnx", "--input", path, match=("--input", rule))
    refused("npu", "run-onnx", files / "tiny.onnx", "--input", path, match=("--input", rule))


def test_a_pipe_as_model_or_dump_does_not_hang(files):
    """Opening a FIFO for reading blocks until a writer comes: the check refuses it before."""
    code = ("import sys; from tensorlayout.cli import main; "
            f"sys.exit(main(['run', {str(files / 'fifo')!r}]) * 10 + "
            f"main(['image', 'ARGUMENT', '--shape', '4', '--from-dump', {str(files / 'fifo')!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(SRC)})
    assert r.returncode == 22, r.stderr
    assert r.stderr.count("not a regular file") == 2


# ----------------------------------------------------------------- numbers
@pytest.mark.parametrize("argv,option", [
    (["run", "{tiny}", "--seed", "-1"], "--seed"),
    (["npu", "run-onnx", "{tiny}", "--seed", "-1"], "--seed"),
    (["npu", "plan-conv", "--input", "1,3,8,8", "--out-channels", "4", "--kernel", "3", "--run", "--seed", "-1"],
     "--seed"),
    (["run", "{tiny}", "--threads", "0"], "--threads"),
    (["run", "{tiny}", "--threads", "-2"], "--threads"),
    (["run", "{tiny}", "--threads", str(10 ** 30)], "--threads"),
    (["run", "{tiny}", "--threads", "4097"], "--threads"),
    (["npu", "plan-conv", "--input", "1,3,8,8", "--out-channels", "0", "--kernel", "3"], "--out-channels"),
    (["npu", "plan-conv", "--input", "1,3,8,8", "--out-channels", "-3", "--kernel", "3"], "--out-channels"),
    (["npu", "plan-conv", "--input", "1,3,8,8", "--out-channels", "2000000000", "--kernel", "3"], "--input"),
    (["npu", "plan-conv", "--input", "2000000000,3,8,8", "--out-channels", "4", "--kernel", "3"], "--input"),
    (["npu", "plan-conv", "--input", "1,3,8,8", "--out-channels", "16000000", "--kernel", "3", "--run"], "output"),
])
def test_bad_numbers_are_refused_quickly(files, argv, option):
    refused(*[a.format(tiny=files / "tiny.onnx") for a in argv], match=option)


def test_seed_zero_and_huge_seeds_work(files):
    for seed in ("0", str(2 ** 70)):
        rc, _, err = run("run", files / "tiny.onnx", "--seed", seed)
        assert rc == 0, err


def test_more_output_channels_than_one_instruction_are_split():
    """The convolution instruction holds at most 4095 output channels (the simulator exits the
    process past that): the planner cuts 5000 into slices that each hold fewer."""
    from tensorlayout.npu.planner import plan_conv

    plan = plan_conv((1, 3, 4, 4), 5000, 3)
    assert plan.split[1] >= 2 and max(s.k1 - s.k0 for s in plan.slices) <= 4095
    assert sorted({(s.k0, s.k1) for s in plan.slices})[-1][1] == 5000


# ----------------------------------------------------------------- onnxruntime and non-finite outputs
def test_check_reports_onnxruntime_refusing_the_model(files):
    refused("run", files / "ort_refuses.onnx", "--check", match=("--check", "onnxruntime could not run it"))
    err = refused("run", files / "ort_refuses.onnx", "--check", "--json")
    assert strict_json(err)["argument"] == "--check"


def test_run_onnx_dynamic_shape_names_an_option_it_takes(files):
    err = refused("npu", "run-onnx", files / "dynamic.onnx", match="--input-shape")
    assert "input_shapes" in err or "--input-shape" in err
    rc, out, err = run("npu", "run-onnx", files / "dynamic.onnx", "--input-shape", "1,3,16,16", "--json")
    assert rc == 0, err
    assert strict_json(out)["inputs"] == {"x": [1, 3, 16, 16]}


def test_non_finite_outputs_are_reported_not_hidden(files):
    """A NaN input: the CPU runtime and onnxruntime give NaN; run-onnx says where the chip's
    output differs (its Relu and MaxPool turn NaN into numbers), exits 1, and prints strict JSON."""
    rc, out, err = run("npu", "run-onnx", files / "tiny.onnx", "--input", files / "nan.npy")
    assert rc == 1, err
    assert "DIFFERENT" in out and "nan" not in out.split("output", 1)[1].lower().replace("nan and", "")
    rc, out, _ = run("npu", "run-onnx", files / "tiny.onnx", "--input", files / "nan.npy", "--json")
    info = strict_json(out)
    assert rc == 1 and info["vs_cpu"]["nan_reference"] == 10 and not info["vs_cpu"]["same_nonfinite"]
    rc, out, err = run("run", files / "tiny.onnx", "--input", files / "nan.npy", "--check", "--json")
    assert rc == 0, err
    info = strict_json(out)
    c = info["check"][0]
    assert (c["nan"], c["nan_onnxruntime"], c["same_nonfinite"], c["rel_l2"]) == (10, 10, True, None)
    assert info["outputs"][0]["max"] == "NaN"
    rc, out, _ = run("npu", "run-onnx", files / "tiny.onnx", "--input", files / "x.npy", "--check")
    assert rc == 0 and "DIFFERENT" not in out


# ----------------------------------------------------------------- library surfaces
@pytest.mark.parametrize("call,name", [
    (lambda: zoo.tiny_onnx(classes="3"), "classes"), (lambda: zoo.tiny_onnx(classes=0), "classes"),
    (lambda: zoo.tiny_onnx(classes=10 ** 12), "classes"), (lambda: zoo.tiny_onnx(seed=-1), "seed"),
    (lambda: zoo.tiny_onnx(seed=1.5), "seed"), (lambda: zoo.export("resnet18", size=0), "size"),
    (lambda: zoo.export("vgg11", size=16), "size"), (lambda: zoo.export("resnet18", size=10 ** 6), "size"),
    (lambda: zoo.export("nope"), "name"), (lambda: zoo.export("resnet18", size=8, opset=99), "opset"),
    (lambda: zoo.torch_net("resnet18", seed=-1), "seed"),
])
def test_zoo_arguments_are_checked(call, name):
    with pytest.raises(errors.LayoutError, match=f"^{name} = "):
        call()


def test_images_past_the_machines_memory_are_refused(monkeypatch):
    import tensorlayout as tl
    from tensorlayout import image

    big = np.broadcast_to(np.float32(1), (1, 200000, 200000, 1))   # no memory of its own
    with pytest.raises(errors.DeviceLimitError, match=r"^array.shape = .*bytes"):
        tl.to_image(big, "IN_OUT_CHANNEL", max_size=None)
    monkeypatch.setattr(image, "_host_memory_bytes", lambda: 1000)
    with pytest.raises(errors.DeviceLimitError, match=r"array.shape"):
        tl.to_image(np.ones((1, 4, 8, 8), np.float32), "IN_OUT_CHANNEL")
    with pytest.raises(errors.DeviceLimitError, match=r"^shape = "):
        tl.from_image(np.zeros((8, 16, 4), np.float32), "IN_OUT_CHANNEL", (1, 8, 16, 4))
    monkeypatch.setattr(image, "_host_memory_bytes", lambda: None)
    img = tl.to_image(np.ones((1, 2, 2, 4), np.float32), "IN_OUT_CHANNEL")
    assert np.array_equal(tl.from_image(img, "IN_OUT_CHANNEL", (1, 2, 2, 4)), np.ones((1, 2, 2, 4)))
