"""tensorlayout's own local-memory engine against Sophgo's BM1684 simulator, byte for byte.

Both memories start from the same random bytes; every random GDMA copy (S2L, L2S, L2L, S2S,
matrix S2L/L2S) over every layout, element size, stride and start NPU runs on both, and the
whole local memory (64 x 512 KiB) and system memory must then be equal. Fills (the chip's set_C)
are compared the same way.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

from tensorlayout.errors import LayoutError, ModeError, OverlapError, StrideError
from tensorlayout.npu import BM1684, Chip, LocalMemory, tensor_layout
from tensorlayout.npu import cmodel


def test_missing_library_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv(cmodel.ENV, str(tmp_path / "nowhere.so"))
    with pytest.raises(cmodel.SimulatorError, match="TENSORLAYOUT_CMODEL = .*no such file"):
        cmodel.find_library()
    monkeypatch.delenv(cmodel.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(cmodel.SimulatorError, match="tensorlayout npu simulator --fetch"):
        cmodel.find_library()


def test_wrong_library_is_one_clear_error(tmp_path):
    junk = tmp_path / "libcmodel_bm1684.so"
    junk.write_bytes(b"not a shared library")
    with pytest.raises(cmodel.SimulatorError, match="cannot be loaded"):
        cmodel.Simulator(junk)
    libm = next(p for p in ("/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib64/libm.so.6",
                            "/lib64/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6")
                if os.path.exists(p)) if sys.platform.startswith("linux") else None
    if libm:
        with pytest.raises(cmodel.SimulatorError, match="is not the simulator of tpu-mlir==1.30.2"):
            cmodel.Simulator(libm)


def test_fetch_without_network_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # as good as no network: pip may not look anything up
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    with pytest.raises(cmodel.SimulatorError, match="pip could not download tpu-mlir==1.30.2"):
        cmodel.fetch(tmp_path / "cache", quiet=True)
    assert not (tmp_path / "cache" / cmodel.LIBRARY).exists()


def test_cli_without_library_says_how_to_get_it(tmp_path):
    env = dict(os.environ, TENSORLAYOUT_CMODEL=str(tmp_path / "missing.so"),
               PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.run([sys.executable, "-m", "tensorlayout", "npu", "simulator"],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "no such file" in p.stderr


def test_tour_without_library_says_how_to_get_it(tmp_path):
    env = dict(os.environ, TENSORLAYOUT_CMODEL=str(tmp_path / "missing.so"),
               PYTHONPATH=os.pathsep.join(sys.path))
    code = ("import io; from tensorlayout.cli import Tour; from tensorlayout.cli_parts import npusim; "
            "b = io.StringIO(); npusim.demo(Tour('.', stream=b)); print(b.getvalue())")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "Not available here" in p.stdout and "make simulator" in p.stdout


from _simulator import needs_sim  # noqa: E402

DTYPES = ("float32", "int32", "int16", "uint16", "int8", "uint8")
S = BM1684.lmem_bytes
SYSTEM_BYTES = 4 << 20


def _local_side(rng, shape, dtype):
    """A random valid local placement: aligned, compact or arbitrary strides, any start NPU."""
    e = np.dtype(dtype).itemsize
    for _ in range(50):
        q = int(rng.integers(0, 64))
        layout = ("aligned", "compact", "stride")[int(rng.integers(0, 3))]
        stride = None
        if layout == "aligned":
            off = int(rng.integers(0, 64)) * 128
        elif layout == "compact":
            off = int(rng.integers(0, 4000)) * 4
        else:
            off = int(rng.integers(0, 4000)) * min(e, 4)
            cpn = -(-(q + shape[1]) // 64)
            h = shape[3] + int(rng.integers(0, 4))
            c = h * shape[2] + int(rng.integers(0, 9))
            stride = (c * cpn + int(rng.integers(0, 9)), c, h, 1)
        try:
            t = tensor_layout(BM1684, q * S + off, shape, stride, dtype,
                              layout="compact" if layout == "stride" else layout)
        except LayoutError:
            continue
        return t.address, t.stride, layout, q
    raise AssertionError("no placement found")


def _system_side(rng, shape, dtype, low):
    e = np.dtype(dtype).itemsize
    stride = None
    if rng.random() < 0.5:
        h = shape[3] + int(rng.integers(0, 4))
        c = h * shape[2] + int(rng.integers(0, 5))
        stride = (c * shape[1] + int(rng.integers(0, 5)), c, h, 1)
    return low + int(rng.integers(0, 1000)) * e, stride


@pytest.fixture(scope="module")
def pair():
    sim = LocalMemory(BM1684, system_bytes=SYSTEM_BYTES, backend="cmodel")
    ref = LocalMemory(BM1684, system_bytes=SYSTEM_BYTES)
    return sim, ref


def _randomize(sim, ref, rng):
    ref._local[...] = rng.integers(0, 256, ref.local.shape, dtype=np.uint8)
    ref._system[...] = rng.integers(0, 256, ref.system.shape, dtype=np.uint8)
    sim.copy_from(ref)


@needs_sim
def test_cmodel_memory_is_the_simulators_memory(pair):
    sim, _ = pair
    s = sim.simulator
    assert sim.local.shape == (64, S) and not sim.local.flags.writeable
    x = np.arange(24, dtype=np.float32).reshape(1, 3, 2, 4)
    t = sim.s2l(S + 128, x)  # host packing straight into the simulator's bytes
    assert s.local[2, 128:160].view(np.float32).tolist() == list(range(8, 16))
    assert np.array_equal(sim.load(t), x)
    assert np.array_equal(sim.local, s.local) and np.array_equal(sim.system, s.system[:SYSTEM_BYTES])


@needs_sim
def test_each_cmodel_memory_keeps_its_own_bytes(pair):
    """One simulator, several memories: each sees only what was written to it."""
    sim, _ = pair
    a = LocalMemory(BM1684, system_bytes=4096, backend="cmodel")
    b = LocalMemory(BM1684, system_bytes=4096, backend="cmodel")
    xa = np.full((1, 70, 2, 3), 1.5, np.float32)
    xb = np.full((1, 70, 2, 3), -2.5, np.float32)
    ta, tb = a.s2l(256, xa), b.s2l(256, xb)      # the same address in both
    a.write_system(64, xa)
    assert not b.system.any()                    # b was created after a: zeros, whatever a holds
    assert np.array_equal(a.load(ta), xa) and np.array_equal(b.load(tb), xb)
    assert np.array_equal(a.read_system(64, xa.shape, "fp32"), xa)
    c = LocalMemory(BM1684, system_bytes=4096, backend="cmodel")
    assert not c.local.any() and np.array_equal(a.load(ta), xa)


@needs_sim
@pytest.mark.parametrize("seed", range(3))
def test_gdma_copies_equal_the_simulator_byte_for_byte(pair, seed):
    sim, ref = pair
    rng = np.random.default_rng(seed)
    _randomize(sim, ref, rng)
    seen = set()
    kinds = ("S2L", "L2S", "L2L", "S2S", "fill_local", "fill_system")
    for i in range(30):
        kind = kinds[i % 6]
        dtype = DTYPES[int(rng.integers(0, len(DTYPES)))]
        shape = (int(rng.integers(1, 5)), int(rng.integers(1, 150)), int(rng.integers(1, 9)),
                 int(rng.integers(1, 40)))
        if kind == "S2L":
            dst, dst_stride, lay, q = _local_side(rng, shape, dtype)
            src, src_stride = _system_side(rng, shape, dtype, 0)
        elif kind == "L2S":
            src, src_stride, lay, q = _local_side(rng, shape, dtype)
            dst, dst_stride = _system_side(rng, shape, dtype, 0)
        elif kind == "L2L":
            src, src_stride, lay, q = _local_side(rng, shape, dtype)
            dst, dst_stride, lay2, _ = _local_side(rng, shape, dtype)
        elif kind == "S2S":
            src, src_stride = _system_side(rng, shape, dtype, 0)
            dst, dst_stride = _system_side(rng, shape, dtype, SYSTEM_BYTES // 2)
            lay, q = "system", 0
        if kind.startswith("fill"):
            info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else None
            value = float(rng.standard_normal()) if info is None else int(rng.integers(info.min, info.max + 1))
            if kind == "fill_local":
                dst, stride, lay, q = _local_side(rng, shape, dtype)
            else:
                (dst, stride), lay, q = _system_side(rng, shape, dtype, 0), "system", 0
            for mem in (sim, ref):
                getattr(mem, kind)(dst, shape, dtype, value, stride)
            assert np.array_equal(sim.local, ref.local), (kind, dst, shape, dtype, value, stride)
            assert np.array_equal(sim.system, ref.system), (kind, dst, shape, dtype, value, stride)
            seen.add((kind, lay, np.dtype(dtype).itemsize, q > 0))
            continue
        args = (dst, src, shape, dtype, dst_stride, src_stride)
        try:
            getattr(sim, "gdma_" + kind.lower())(*args)
        except OverlapError:
            # an overlapping L2L is refused before anything is written
            assert kind == "L2L"
            assert np.array_equal(sim.local, ref.local)
            continue
        getattr(ref, "gdma_" + kind.lower())(*args)
        assert np.array_equal(sim.local, ref.local), (kind, args)
        assert np.array_equal(sim.system, ref.system), (kind, args)
        seen.add((kind, lay, np.dtype(dtype).itemsize, q > 0))
    assert len(seen) >= 12


@needs_sim
def test_matrix_copies_equal_the_simulator(pair):
    """Random matrices, any start NPU, C below and above X: the chip's matrix layout is tensorlayout's."""
    sim, ref = pair
    rng = np.random.default_rng(11)
    _randomize(sim, ref, rng)
    wrapped = 0
    for _ in range(12):
        rows, cols = int(rng.integers(1, 6)), int(rng.integers(1, 3000))
        cpc, q = int(rng.integers(1, min(cols, 60) + 1)), int(rng.integers(0, 64))
        address = q * S + int(rng.integers(0, 8)) * 128
        for mem in (sim, ref):
            mem.gdma_matrix_s2l(address, 64, rows, cols, cpc, "fp32", src_row_stride=cols + 3)
            mem.gdma_matrix_l2s(1 << 20, address, rows, cols, cpc, "fp32")
        assert np.array_equal(sim.local, ref.local), (rows, cols, cpc, q)
        assert np.array_equal(sim.system, ref.system), (rows, cols, cpc, q)
        wrapped += q + -(-cols // cpc) > 64
    assert wrapped >= 3


@needs_sim
def test_bad_gdma_operands_are_refused_before_the_simulator(pair):
    sim, _ = pair
    sim.reset(0, system=True)
    with pytest.raises(StrideError, match="W stride 1"):
        sim.gdma_s2l(0, 0, (1, 3, 4, 5), "fp32", dst_stride=(64, 64, 16, 2))
    with pytest.raises(ModeError, match="4N"):
        sim.gdma_s2l(0, 0, (4, 3, 4, 5), "int8", mode="4N")
    with pytest.raises(OverlapError, match="overlap"):
        sim.gdma_l2l(64, 0, (1, 3, 4, 5), "fp32", (60, 60, 5, 1), (60, 60, 5, 1))
    with pytest.raises(OverlapError, match="overlap"):
        sim.gdma_s2s(40, 0, (1, 3, 4, 5), "fp32")
    assert not sim.local.any() and not sim.system.any()
    with pytest.raises(LayoutError, match="BM1684"):
        LocalMemory(Chip(4, 1024, 128), backend="cmodel")
