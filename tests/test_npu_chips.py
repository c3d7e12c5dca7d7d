"""BM1684X and BM1688 against Sophgo's own simulators of them.

The tpu-mlir 1.30.2 wheel that carries the BM1684 simulator also holds
``libcmodel_bm1684x.so`` and ``libcmodel_bm1688.so``. They export the TPU-Kernel API
(``tpu_*``), not OKKernel's, so tensorlayout runs networks on BM1684 only; but they place
tensors as tensorlayout's chip models say: their own aligned strides, and a GDMA copy from
system memory into local memory puts every element where ``tensor_layout`` says it goes.
The libraries are looked for next to the BM1684 one (``tensorlayout npu simulator`` says
where; extract them from the same wheel) or named by ``TENSORLAYOUT_CMODEL_BM1684X`` /
``TENSORLAYOUT_CMODEL_BM1688``. Each check runs in a child process: the libraries keep
global state and stop the process on an operand they refuse.
"""

import json
import os
import subprocess
import sys

import pytest

from tensorlayout.npu import BM1684X, BM1688, cmodel

_CHILD = r'''
import ctypes as C, json, sys
import numpy as np
from tensorlayout.npu import get_chip, tensor_layout, aligned_stride

path, name = sys.argv[1], sys.argv[2]
chip = get_chip(name)
X, S = chip.npus, chip.lmem_bytes
lib = C.CDLL(path)


class D4(C.Structure):
    _fields_ = [("n", C.c_int), ("c", C.c_int), ("h", C.c_int), ("w", C.c_int)]


lib.cmodel_init.argtypes, lib.cmodel_init.restype = [C.c_int, C.c_uint64], C.c_int
assert lib.cmodel_init(0, 1 << 26) == 0
lib.tpu_initialize()
for f in ("tpu_npu_num", "tpu_local_mem_size_per_npu"):
    getattr(lib, f).restype = C.c_int
lib.tpu_global_mem_get_start_addr.restype = C.c_uint64
lib.get_global_memaddr.argtypes, lib.get_global_memaddr.restype = [C.c_int], C.c_void_p
lib.get_local_memaddr_by_node.argtypes = [C.c_int, C.c_int]
lib.get_local_memaddr_by_node.restype = C.c_void_p
lib.tpu_aligned_stride.argtypes = [C.POINTER(D4), C.c_int, C.POINTER(D4), C.c_int]
lib.tpu_gdma_cpy_S2L.argtypes = [C.c_uint32, C.c_uint64, C.POINTER(D4), C.POINTER(D4),
                                 C.POINTER(D4), C.c_int]
FP32 = (2 << 1) | 1                      # data_type_t DT_FP32
out = {"npus": lib.tpu_npu_num(), "lmem": lib.tpu_local_mem_size_per_npu(), "strides": [], "copies": []}
rng = np.random.default_rng(0)
gmem = np.ctypeslib.as_array(C.cast(lib.get_global_memaddr(0), C.POINTER(C.c_uint8)), shape=(1 << 26,))
for shape, q, off in (((1, 70, 5, 7), 3, 256), ((2, 5, 3, 3), 0, 0), ((1, 33, 1, 11), X - 1, 1024)):
    st = D4()
    lib.tpu_aligned_stride(C.byref(st), q, C.byref(D4(*shape)), FP32)
    out["strides"].append([[st.n, st.c, st.h, st.w], list(aligned_stride(chip, shape, q))])
    x = rng.standard_normal(shape).astype(np.float32)
    gmem[:x.nbytes] = x.view(np.uint8).ravel()
    addr = q * S + off
    lib.tpu_gdma_cpy_S2L(addr, lib.tpu_global_mem_get_start_addr(), C.byref(D4(*shape)), None, None, FP32)
    lib.tpu_poll()
    t = tensor_layout(chip, addr, shape)
    lm = [np.ctypeslib.as_array(C.cast(lib.get_local_memaddr_by_node(0, p), C.POINTER(C.c_uint8)),
                                shape=(S,)) for p in range(X)]
    right = wrong = 0
    for index in np.ndindex(*shape):
        p, b = t.locate(index)
        if lm[p][b:b + 4].copy().view(np.float32)[0] == x[index]:
            right += 1
        else:
            wrong += 1
    out["copies"].append([right, wrong, x.size])
print(json.dumps(out))
'''


def _library(chip):
    env = os.environ.get(f"TENSORLAYOUT_CMODEL_{chip.name}")
    path = env or str(cmodel.cache_dir() / f"libcmodel_{chip.name.lower()}.so")
    if not os.path.isfile(path):
        pytest.skip(f"{chip.name} simulator not found at {path} (extract it from {cmodel.WHEEL})")
    return path


@pytest.mark.parametrize("chip", [BM1684X, BM1688], ids=lambda c: c.name)
def test_sophgos_simulator_places_tensors_where_the_chip_model_says(chip):
    path = _library(chip)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.join(os.path.dirname(__file__), os.pardir, "src"), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", _CHILD, path, chip.name], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert (got["npus"], got["lmem"]) == (chip.npus, chip.lmem_bytes)
    for theirs, ours in got["strides"]:
        assert theirs == ours
    for right, wrong, size in got["copies"]:
        assert (right, wrong) == (size, 0)
