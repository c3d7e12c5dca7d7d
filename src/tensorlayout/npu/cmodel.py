"""Sophgo's BM1684 simulator (``libcmodel_bm1684.so``) driven from Python through ctypes.

Sophgo publishes a C model of the BM1684 inside the PyPI wheel ``tpu-mlir==1.30.2``. The
library exports the OKKernel API (GDMA copies, BDC compute instructions) as plain C
functions next to ``cmodel_init`` and the raw pointers of the simulated local and global
memory. Nothing of it ships with tensorlayout: :func:`fetch` downloads the wheel with pip and
extracts the one library into a cache folder; ``TENSORLAYOUT_CMODEL`` may name an existing copy.

The simulator keeps global state, so a process holds one :class:`Simulator`
(:func:`simulator` returns it, creating it on first use). Its C functions stop the process on
operands they cannot handle, so tensorlayout checks every operand before calling one.

Threads: the one simulator is guarded by one lock (:attr:`Simulator.lock`). Every C call holds
it, and each cmodel-backed :class:`~tensorlayout.npu.LocalMemory` holds it for each of its
operations, with its own bytes switched in (:meth:`Simulator.switch_to`), so threads that use
different memories, or the same one, never see each other's bytes; their calls take turns.

>>> sim = simulator()
>>> sim.local.shape, sim.npus, sim.lmem_bytes
((64, 524288), 64, 524288)
>>> hex(sim.SYSTEM_BASE)
'0x100000000'
"""

from __future__ import annotations

import contextlib
import ctypes as C
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import weakref
import zipfile
from pathlib import Path

import numpy as np

from ..errors import LayoutError

__all__ = [
    "SimulatorError", "WHEEL", "LIBRARY", "ENV", "cache_dir", "library_path", "find_library",
    "fetch", "available", "simulator", "Simulator",
]

#: The wheel that carries the simulator, and the library inside it.
WHEEL = "tpu-mlir==1.30.2"
LIBRARY = "libcmodel_bm1684.so"
_MEMBER = "tpu_mlir/lib/" + LIBRARY
#: Environment variable naming an existing copy of the library.
ENV = "TENSORLAYOUT_CMODEL"

#: C functions tensorlayout calls; a library lacking one is not the expected version.
_REQUIRED = (
    "cmodel_init", "get_local_mem", "get_global_memaddr", "okk_initialize", "okk_poll",
    "okk_npu_num", "okk_local_mem_size_per_npu", "okk_global_mem_start_addr",
    *(f"okk_gdma_{b}bit_cpy_{d}" for b in (8, 16, 32) for d in ("S2L", "L2S", "L2L", "S2S")),
    *(f"okk_gdma_{b}bit_set_C_{w}" for b in (8, 16, 32) for w in ("local", "system")),
    "okk_gdma_32bit_matrix_S2L", "okk_gdma_32bit_matrix_L2S",
    "okk_bdc_conv2d", "okk_bdc_depthwise2d", "okk_bdc_max_pool2d", "okk_bdc_avg_pool2d",
    "okk_bdc_matmul", "okk_bdc_add", "okk_bdc_sub", "okk_bdc_mul", "okk_bdc_max", "okk_bdc_min",
    "okk_bdc_add_C", "okk_bdc_sub_C", "okk_bdc_C_sub", "okk_bdc_mul_C", "okk_bdc_max_C",
    "okk_bdc_min_C", "okk_bdc_relu", "okk_bdc_sigmoid", "okk_bdc_tanh", "okk_bdc_exp",
    "okk_bdc_4N_int8_to_fp32", "okk_bdc_fp32_to_4N_int8", "okk_bdc_div", "okk_bdc_div_C",
    "okk_bdc_C_div", "okk_bdc_scale", "okk_bdc_bias", "okk_bdc_scale_bias", "okk_bdc_32bit_cpy",
)


class SimulatorError(LayoutError):
    """The simulator library is missing, cannot be loaded, or is not the expected version."""


def cache_dir() -> Path:
    """Where :func:`fetch` puts the library: ``$XDG_CACHE_HOME/tensorlayout/cmodel-<version>``.

    >>> cache_dir().name
    'cmodel-tpu-mlir-1.30.2'
    """
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tensorlayout" / ("cmodel-" + WHEEL.replace("==", "-"))


def library_path() -> Path:
    """The library that :func:`simulator` will load: ``$TENSORLAYOUT_CMODEL`` or the cache copy.

    It need not exist yet (:func:`find_library` checks that).
    """
    env = os.environ.get(ENV)
    return Path(env) if env else cache_dir() / LIBRARY


def find_library() -> Path:
    """The path of an existing simulator library, or raise :class:`SimulatorError` saying how to get one."""
    path = library_path()
    if path.is_file():
        return path
    if os.environ.get(ENV):
        raise SimulatorError(
            f"{ENV} = {str(path)!r} is not allowed: no such file (it must name {LIBRARY})")
    raise SimulatorError(
        f"the BM1684 simulator is not installed: {path} does not exist; run "
        f"'tensorlayout npu simulator --fetch' (or 'make simulator') to download {WHEEL} "
        f"(about 312 MB) and extract {LIBRARY}, or set {ENV} to an existing copy")


def available() -> bool:
    """True when the simulator library exists and loads as the expected version."""
    try:
        simulator()
    except SimulatorError:
        return False
    return True


def fetch(dest: Path | None = None, quiet: bool = False) -> Path:
    """Download ``tpu-mlir==1.30.2`` with pip and extract :data:`LIBRARY` into ``dest`` (the cache).

    Returns the library's path. pip keeps the wheel in its own cache, so a second fetch
    does not download it again. Raises :class:`SimulatorError` when pip or the network fails.
    """
    dest = Path(dest) if dest is not None else cache_dir()
    target = dest / LIBRARY
    if target.is_file():
        return target
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--python-version", "3.10",
               "--only-binary=:all:", WHEEL, "-d", tmp]
        if quiet:
            cmd.append("-q")
        try:
            proc = subprocess.run(cmd, capture_output=quiet, text=True)
        except OSError as exc:
            raise SimulatorError(f"pip could not be started to download {WHEEL}: {exc}") from None
        wheels = list(Path(tmp).glob("tpu_mlir-*.whl"))
        if proc.returncode or not wheels:
            tail = (proc.stderr or "").strip().splitlines()[-1:] if quiet else []
            raise SimulatorError(
                f"pip could not download {WHEEL} (exit status {proc.returncode})"
                + (f": {tail[0]}" if tail else ""))
        try:
            with zipfile.ZipFile(wheels[0]) as zf, zf.open(_MEMBER) as src, \
                    open(Path(tmp) / LIBRARY, "wb") as out:
                shutil.copyfileobj(src, out)
        except (KeyError, zipfile.BadZipFile) as exc:
            raise SimulatorError(f"{wheels[0].name} does not hold {_MEMBER}: {exc}") from None
        os.replace(Path(tmp) / LIBRARY, target)
    return target


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class _Dim4(C.Structure):
    _fields_ = [("n", C.c_int), ("c", C.c_int), ("h", C.c_int), ("w", C.c_int)]


class _Dim2(C.Structure):
    _fields_ = [("h", C.c_int), ("w", C.c_int)]


class _Padding(C.Structure):
    _fields_ = [("top", C.c_int), ("bottom", C.c_int), ("left", C.c_int), ("right", C.c_int)]


def dim4(values) -> C.Structure:
    """A C ``dim4`` from 4 integers (n, c, h, w)."""
    return _Dim4(*(int(v) for v in values))


def dim2(values) -> C.Structure:
    """A C ``dim2`` from 2 integers (h, w)."""
    return _Dim2(*(int(v) for v in values))


def padding(values) -> C.Structure:
    """A C ``Padding`` from 4 integers (top, bottom, left, right)."""
    return _Padding(*(int(v) for v in values))


_LA, _SA, _D4 = C.c_uint32, C.c_uint64, C.POINTER(_Dim4)
_D2, _PAD, _B, _F, _I = C.POINTER(_Dim2), C.POINTER(_Padding), C.c_bool, C.c_float, C.c_int

# argtypes of the C functions (OKKernel's okk.h), so ctypes converts every argument exactly.
_COPY = [_LA, _LA, _D4, _D4, _D4]
_SIGNATURES = {
    **{f"okk_gdma_{b}bit_cpy_S2L": [_LA, _SA, _D4, _D4, _D4] for b in (8, 16, 32)},
    **{f"okk_gdma_{b}bit_cpy_L2S": [_SA, _LA, _D4, _D4, _D4] for b in (8, 16, 32)},
    **{f"okk_gdma_{b}bit_cpy_L2L": _COPY for b in (8, 16, 32)},
    **{f"okk_gdma_{b}bit_cpy_S2S": [_SA, _SA, _D4, _D4, _D4] for b in (8, 16, 32)},
    # set_C: the constant is a union of 1, 2 or 4 bytes, passed by value like an integer
    **{f"okk_gdma_{b}bit_set_C_local": [_LA, t, _D4, _D4]
       for b, t in ((8, C.c_uint8), (16, C.c_uint16), (32, C.c_uint32))},
    **{f"okk_gdma_{b}bit_set_C_system": [_SA, t, _D4, _D4]
       for b, t in ((8, C.c_uint8), (16, C.c_uint16), (32, C.c_uint32))},
    "okk_gdma_32bit_matrix_S2L": [_LA, _SA, _I, _I, _I, _I],
    "okk_gdma_32bit_matrix_L2S": [_SA, _LA, _I, _I, _I, _I],
    "okk_bdc_conv2d": [_LA, _LA, _LA, _LA, _D4, _I, _I, _I, _D4, _D4, _B, _B, _PAD, _D2, _D2],
    "okk_bdc_depthwise2d": [_LA, _LA, _LA, _LA, _D4, _I, _I, _B, _PAD, _D2, _D2],
    "okk_bdc_max_pool2d": [_LA, _LA, _D4, _I, _I, _PAD, _D2],
    "okk_bdc_avg_pool2d": [_LA, _LA, _D4, _I, _I, _PAD, _D2],
    "okk_bdc_matmul": [_LA, _LA, _LA, _LA, _I, _I, _I, _I, _I, _B, _B],
    **{f"okk_bdc_{op}": [_LA, _LA, _LA, _D4, _D4, _D4, _D4]
       for op in ("add", "sub", "mul", "max", "min", "div")},
    **{f"okk_bdc_{op}": [_LA, _LA, _F, _D4, _D4, _D4]
       for op in ("add_C", "sub_C", "C_sub", "mul_C", "max_C", "min_C", "div_C", "C_div")},
    # per-channel scale and / or bias read from compact (1, C, 1, 1) tensors
    "okk_bdc_scale": [_LA, _LA, _LA, _D4, _D4, _D4],
    "okk_bdc_bias": [_LA, _LA, _LA, _D4, _D4, _D4],
    "okk_bdc_scale_bias": [_LA, _LA, _LA, _LA, _D4, _D4, _D4],
    "okk_bdc_32bit_cpy": [_LA, _LA, _D4, _D4, _D4],
    "okk_bdc_relu": [_LA, _LA, _D4, _D4, _D4],
    **{f"okk_bdc_{op}": [_LA, _LA, _LA, _D4] for op in ("sigmoid", "tanh", "exp")},
    "okk_bdc_4N_int8_to_fp32": [_LA, _LA, _LA, _D4, _B, _B],
    # not in the published okk.h: (dst, src, work, shape, is_signed), read off the library's code
    "okk_bdc_fp32_to_4N_int8": [_LA, _LA, _LA, _D4, _B],
    "okk_initialize": [], "okk_poll": [],
}


def _libm():
    """The C maths library (for ``fegetenv`` / ``fesetenv``), or None."""
    global _LIBM
    if _LIBM is None:
        import ctypes.util

        name = ctypes.util.find_library("m")
        try:
            lib = C.CDLL(name) if name else None
        except OSError:
            lib = None
        _LIBM = lib if lib is not None and hasattr(lib, "fesetenv") else False
    return _LIBM or None


_LIBM = None


def _float_env():
    """The calling thread's floating-point environment (rounding, flush-to-zero), as C's
    ``fegetenv`` saves it; None where the C library has no ``fegetenv``."""
    lib = _libm()
    if lib is None:
        return None
    env = (C.c_ubyte * 64)()   # larger than fenv_t on every platform glibc supports
    lib.fegetenv(env)
    return env


def _set_float_env(env) -> None:
    if env is not None:
        _libm().fesetenv(env)


@contextlib.contextmanager
def _float_env_of(env):
    """Run a block in the floating-point environment ``env``, then put the thread's own back."""
    caller = _float_env()
    _set_float_env(env)
    try:
        yield
    finally:
        _set_float_env(caller)


class _Quiet:
    """Send the C library's stdout to /dev/null for the duration (it prints on init)."""

    def __enter__(self):
        sys.stdout.flush()
        try:
            self._fd = os.dup(1)
        except OSError:
            self._fd = None
            return self
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
        return self

    def __exit__(self, *exc):
        if self._fd is not None:
            C.CDLL(None).fflush(None)
            os.dup2(self._fd, 1)
            os.close(self._fd)


class Simulator:
    """One loaded and initialised BM1684 simulator (use :func:`simulator`, not this constructor).

    ``local`` is the simulator's local memory as a writable NumPy ``(64, 524288)`` uint8
    view (no copy); ``system`` its global memory, flat, ``system_bytes`` long. A system byte
    offset ``o`` is the GDMA address ``SYSTEM_BASE + o``.
    """

    SYSTEM_BASE = 0x1_0000_0000
    #: Bytes of global (system) memory the simulator is given.
    SYSTEM_BYTES = 256 << 20

    def __init__(self, path: Path):
        self.path = Path(path)
        caller = _float_env()
        try:
            lib = C.CDLL(str(self.path))
            # Loading the library switches the loading thread to flushing subnormal numbers to
            # zero (it is built for fast arithmetic); that mode is the simulator's own, set for
            # its calls only, and the caller's is put back.
            self._float_env = _float_env()
        except OSError as exc:
            raise SimulatorError(f"{ENV} or cache file {str(self.path)!r} cannot be loaded as "
                                 f"{LIBRARY}: {exc}") from None
        finally:
            _set_float_env(caller)
        missing = [name for name in _REQUIRED if not hasattr(lib, name)]
        if missing:
            raise SimulatorError(
                f"{str(self.path)!r} is not the simulator of {WHEEL}: it lacks "
                f"{', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}")
        for name, args in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, None
        lib.cmodel_init.argtypes, lib.cmodel_init.restype = [C.c_int, C.c_uint64], C.c_int
        lib.get_local_mem.argtypes, lib.get_local_mem.restype = [C.c_int], C.c_void_p
        lib.get_global_memaddr.argtypes, lib.get_global_memaddr.restype = [C.c_int], C.c_void_p
        lib.okk_npu_num.restype = C.c_int
        lib.okk_local_mem_size_per_npu.restype = C.c_uint
        lib.okk_global_mem_start_addr.restype = C.c_uint64
        with _Quiet(), _float_env_of(self._float_env):
            rc = lib.cmodel_init(0, self.SYSTEM_BYTES)
        if rc != 0:
            raise SimulatorError(f"cmodel_init(0, {self.SYSTEM_BYTES}) of {str(self.path)!r} returned {rc}")
        with _float_env_of(self._float_env):
            lib.okk_initialize()
        self.npus = int(lib.okk_npu_num())
        self.lmem_bytes = int(lib.okk_local_mem_size_per_npu())
        base = int(lib.okk_global_mem_start_addr())
        if (self.npus, self.lmem_bytes, base) != (64, 512 * 1024, self.SYSTEM_BASE):
            raise SimulatorError(
                f"{str(self.path)!r} is not a BM1684 simulator: it reports {self.npus} NPUs x "
                f"{self.lmem_bytes} bytes, system memory at {base:#x} (BM1684: 64 x 524288 at "
                f"{self.SYSTEM_BASE:#x})")
        raw = C.cast(lib.get_local_mem(0), C.POINTER(C.c_void_p))[0]
        self.local = np.ctypeslib.as_array(C.cast(raw, C.POINTER(C.c_uint8)),
                                           shape=(self.npus, self.lmem_bytes))
        self.system = np.ctypeslib.as_array(C.cast(lib.get_global_memaddr(0), C.POINTER(C.c_uint8)),
                                            shape=(self.SYSTEM_BYTES,))
        self.lib = lib
        self.calls = 0
        #: Held by every C call and by every operation of a cmodel-backed LocalMemory.
        self.lock = threading.RLock()
        self._owner = None                          # weak reference to the memory switched in
        self._parked = weakref.WeakKeyDictionary()  # the other memories' bytes, by memory

    def call(self, name: str, *args) -> None:
        """Run one OKKernel function (its operands already checked) and wait for it to finish."""
        with self.lock, _float_env_of(self._float_env):
            getattr(self.lib, name)(*args)
            self.lib.okk_poll()
            self.calls += 1

    def switch_to(self, owner) -> None:
        """Make the simulator's memory hold ``owner``'s bytes (call it with :attr:`lock` held).

        ``owner`` is a cmodel-backed LocalMemory (anything with ``system_bytes``). The bytes of
        the memory switched in before (all local memory and its first ``system_bytes`` of
        system memory) are saved aside while that memory lives, and ``owner``'s are put back; a
        memory never switched in before starts from zeros. Nothing is copied when ``owner`` is
        already in.
        """
        current = self._owner() if self._owner is not None else None
        if current is owner:
            return
        if current is not None:
            self._parked[current] = (self.local.copy(), self.system[:current.system_bytes].copy())
        saved = self._parked.pop(owner, None)
        if saved is None:
            self.local[...] = 0
            self.system[:owner.system_bytes] = 0
        else:
            self.local[...] = saved[0]
            self.system[:saved[1].size] = saved[1]
        self._owner = weakref.ref(owner)

    def sha256(self) -> str:
        """SHA-256 of the loaded library file."""
        return _sha256(self.path)


_SIM: Simulator | None = None
_LOADING = threading.Lock()


def simulator() -> Simulator:
    """The process's simulator, loaded and initialised on first use (once, whatever the threads).

    Raises :class:`SimulatorError` (naming the path and how to fetch it) when the library is
    missing, does not load, or is not the BM1684 simulator of ``tpu-mlir==1.30.2``.
    """
    global _SIM
    if _SIM is None:
        with _LOADING:
            if _SIM is None:
                _SIM = Simulator(find_library())
    return _SIM
