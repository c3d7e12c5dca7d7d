"""A byte-exact simulated local memory with system memory, GDMA-style copies and an allocator.

``LocalMemory(chip)`` holds ``X x S`` bytes of local memory (NPU ``q`` owns row
``q``) and a flat system memory.  Every copy is the core layout's pack or unpack
on a view of those bytes; every argument is checked before the first byte is
written, so a failed call leaves both memories exactly as they were.

The seed's 4N example, written and read back::

    >>> import numpy as np
    >>> from tensorlayout.npu import Chip
    >>> mem = LocalMemory(Chip(4, 1024, 128))
    >>> x = (np.arange(6 * 5 * 4 * 5) // 100).astype(np.int8).reshape(6, 5, 4, 5)  # x[n] = n
    >>> t = mem.s2l(0, x, mode="4N")
    >>> mem.local[0, 256:260].tolist()   # int8x4 word (1, 0, 0, 0): n = 4, 5 and two dummies
    [4, 5, 0, 0]
    >>> bool((mem.l2s(0, x.shape, "int8", mode="4N") == x).all())
    True
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading

import numpy as np

from ..core import Layout, convert

from ..errors import (
    AddressError,
    AlignmentError,
    DeviceLimitError,
    DTypeError,
    FootprintError,
    LayoutError,
    ModeError,
    OverlapError,
    ShapeError,
    StrideError,
    check_choice,
    check_nonneg_int,
    check_positive_int,
)
from .chip import BM1684, Chip
from .tensor import (
    NpuTensor,
    check_chip,
    check_stride,
    shape4,
    as_dtype,
    continuous_stride,
    dtype_name,
    matrix_layout,
    tensor_layout,
    word_dtype,
)

__all__ = ["LocalMemory", "MAX_SIMULATED_BYTES"]

#: Most host bytes (local plus system memory) a simulated LocalMemory allocates: 16 GiB.
MAX_SIMULATED_BYTES = 1 << 34


def _readonly(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.flags.writeable = False
    return v


BACKENDS = ("numpy", "cmodel")


def _exclusive(method):
    """Run a LocalMemory method inside :meth:`LocalMemory.exclusive` (its lock held, its bytes in)."""

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with self.exclusive():
            return method(self, *args, **kwargs)

    return run


class LocalMemory:
    """Simulated local memory of ``chip`` (``X x S`` bytes) plus ``system_bytes`` of system memory.

    The simulation holds every byte on the host, so a chip past :data:`MAX_SIMULATED_BYTES`
    is refused with a :class:`~tensorlayout.errors.DeviceLimitError` before anything is allocated.

    ``backend="numpy"`` (the default) is tensorlayout's own byte-exact engine.
    ``backend="cmodel"`` (BM1684 only) is Sophgo's simulator (:mod:`tensorlayout.npu.cmodel`):
    the bytes live in the simulator's own memory and the ``gdma_*`` copies run its
    ``okk_gdma_*`` functions.  Each cmodel-backed memory has bytes of its own (a new one starts
    from zeros), although the process has one simulator: every operation holds the
    simulator's lock and switches this memory's bytes in first (see
    :meth:`~tensorlayout.npu.cmodel.Simulator.switch_to`), so memories used from several
    threads never see each other's bytes.  Their ``local`` and ``system`` are copies taken
    under the lock.  :meth:`exclusive` holds the memory for a sequence of operations.

    Threads: every method holds the memory's lock (the simulator's, with the cmodel backend),
    so concurrent calls take turns and each one is whole; a sequence of calls that another
    thread must not interleave with goes in ``with mem.exclusive():``.

    >>> mem = LocalMemory(Chip(4, 1024, 128), system_bytes=4096)
    >>> mem.local.shape, mem.system.shape
    ((4, 1024), (4096,))
    """

    def __init__(self, chip: Chip, system_bytes: int = 1 << 20, backend: str = "numpy"):
        self.chip = check_chip(chip)
        system_bytes = check_positive_int("system_bytes", system_bytes)
        self.backend = check_choice("backend", backend, BACKENDS)
        self._sim = None
        if backend == "cmodel":
            if chip != BM1684:
                raise LayoutError(f"chip = {chip.name} is not allowed with backend='cmodel': "
                                  "the simulator is a BM1684")
            from .cmodel import simulator

            sim = simulator()
            if system_bytes > sim.SYSTEM_BYTES:
                raise FootprintError(f"system_bytes = {system_bytes} is not allowed with backend='cmodel': "
                                     f"the simulator holds {sim.SYSTEM_BYTES} bytes of system memory")
            self._sim = sim
            self._lock = sim.lock
            self._local = sim.local
            self._system = sim.system[:system_bytes]
            with sim.lock:
                sim.switch_to(self)         # a memory never switched in starts from zeros
        else:
            self._lock = threading.RLock()
            need = chip.npus * chip.lmem_bytes + system_bytes
            if need > MAX_SIMULATED_BYTES:
                raise DeviceLimitError(
                    f"chip = {chip.name} ({chip.npus} NPUs x {chip.lmem_bytes} bytes) with system_bytes = "
                    f"{system_bytes} needs {need} bytes of host memory: the simulation holds at most "
                    f"MAX_SIMULATED_BYTES = {MAX_SIMULATED_BYTES}")
            try:
                self._local = np.zeros((chip.npus, chip.lmem_bytes), dtype=np.uint8)
                self._system = np.zeros(system_bytes, dtype=np.uint8)
            except MemoryError:
                raise DeviceLimitError(f"chip = {chip.name}: the {need} bytes of simulated memory do not "
                                       "fit this machine's memory") from None
        self._allocations: list[tuple[NpuTensor, bool]] = []

    @property
    def simulator(self):
        """The :class:`~tensorlayout.npu.cmodel.Simulator` behind a cmodel-backed memory (else None)."""
        return self._sim

    @property
    def system_bytes(self) -> int:
        """Bytes of system memory."""
        return self._system.size

    @contextlib.contextmanager
    def exclusive(self):
        """Hold this memory (and, with the cmodel backend, the simulator) for a block of calls.

        Other threads' calls on it, or on any cmodel-backed memory, wait until the block ends.

        >>> mem = LocalMemory(Chip(4, 1024, 128))
        >>> with mem.exclusive():
        ...     t = mem.s2l(0, np.ones((1, 1, 1, 2), np.float32))
        ...     mem.load(t).tolist()
        [[[[1.0, 1.0]]]]
        """
        with self._lock:
            if self._sim is not None:
                self._sim.switch_to(self)
            yield self

    def call(self, name: str, *args) -> None:
        """Run the simulator's OKKernel function ``name`` on this memory's bytes (cmodel backend).

        The arguments are passed as they are: check them first, as :mod:`tensorlayout.npu.bdc` does.
        """
        if self._sim is None:
            raise LayoutError(f"call({name!r}) is not allowed: this memory has backend='numpy'; "
                              "OKKernel functions run with backend='cmodel'")
        with self.exclusive():
            self._sim.call(name, *args)

    def _gdma(self, kind: str, dtype, mode) -> str:
        """The okk_gdma function for a copy of ``dtype`` elements (cmodel backend)."""
        if mode is not None:
            raise ModeError(
                f"mode = {mode!r} is not allowed in a GDMA copy with backend='cmodel': the chip's "
                "GDMA moves whole elements with W stride 1, so 4N/2N/2IC packing is done on the host "
                "(s2l, store) or the packed words are copied as uint32")
        return f"okk_gdma_{8 * as_dtype(dtype).itemsize}bit_cpy_{kind}"

    # ---------------------------------------------------------------- views
    @property
    def local(self) -> np.ndarray:
        """The local memory bytes, read-only, shape ``(X, S)`` (with the cmodel backend a copy)."""
        with self.exclusive():
            return _readonly(self._local if self._sim is None else self._local.copy())

    @property
    def system(self) -> np.ndarray:
        """The system memory bytes, read-only, flat (with the cmodel backend a copy)."""
        with self.exclusive():
            return _readonly(self._system if self._sim is None else self._system.copy())

    @_exclusive
    def reset(self, byte: int = 0, system: bool = False) -> None:
        """Set every local byte (and, with ``system=True``, every system byte) to ``byte``."""
        if isinstance(byte, bool) or not isinstance(byte, (int, np.integer)) or not 0 <= byte <= 255:
            raise LayoutError(f"byte = {byte!r} is not allowed: it must be an integer in [0, 256)")
        self._local[...] = byte
        if system:
            self._system[...] = byte

    def copy_from(self, other: "LocalMemory") -> None:
        """Make this memory's local and system bytes equal to ``other``'s (same chip and sizes).

        Two engines started from the same bytes can then run the same copies and be compared.

        >>> a, b = LocalMemory(Chip(4, 1024, 128)), LocalMemory(Chip(4, 1024, 128))
        >>> a.reset(7); b.copy_from(a); int(b.local[3, 1023])
        7
        """
        if not isinstance(other, LocalMemory) or other.chip != self.chip \
                or other.system_bytes != self.system_bytes:
            raise LayoutError(f"other = {other!r} is not allowed: it must be a LocalMemory of "
                              f"{self.chip.name} with {self.system_bytes} bytes of system memory")
        local, system = other.local, other.system
        with self.exclusive():
            self._local[...] = local
            self._system[...] = system

    # ---------------------------------------------------------------- checks
    def _local_tensor(self, address, shape, dtype, stride, mode, what) -> NpuTensor:
        t = tensor_layout(self.chip, address, shape, stride, dtype, mode)
        if t.stride[3] != 1:
            raise StrideError(f"{what} stride w = {t.stride[3]} is not allowed: a copy needs W stride 1")
        return t

    def _system_tensor(self, address, shape, dtype, stride, what, write: bool):
        """A system tensor as a buffer layout over system memory counted in its elements,
        after checking address, strides and reach: ``(layout, element strides, dtype)``."""
        dt = as_dtype(dtype)
        shape = shape4(shape)
        if isinstance(address, bool) or not isinstance(address, (int, np.integer)):
            raise AddressError(f"{what} address = {address!r} is not allowed: it must be an integer")
        address = int(address)
        size = self._system.size
        if not 0 <= address < size:
            raise AddressError(
                f"{what} address = {address} is outside system memory: it must be in [0, {size})"
            )
        e = dt.itemsize
        if address % e:
            raise AlignmentError(
                f"{what} address = {address} is not allowed: {dtype_name(dt)} data needs an address "
                f"divisible by {e}"
            )
        stride = continuous_stride(shape) if stride is None else check_stride(stride, f"{what} stride")
        if stride[3] != 1:
            raise StrideError(f"{what} stride w = {stride[3]} is not allowed: a copy needs W stride 1")
        reach, lay = _system_layout(shape, stride, address // e, size // e)
        if lay is None:
            raise FootprintError(
                f"{what} tensor {shape} with stride {stride} at address {address} ends at byte "
                f"{reach * e}: past the end of system memory ({size} bytes)"
            )
        if write:
            _refuse_shared(lay, f"{what} stride", tuple(stride), tuple(shape))
        return lay, stride, dt

    def _system_words(self, dt: np.dtype) -> np.ndarray:
        """System memory as a flat array of ``dt``-sized unsigned words (the whole ones)."""
        e = dt.itemsize
        return self._system[:self._system.size // e * e].view(word_dtype(dt))

    # ---------------------------------------------- host arrays <-> local
    @_exclusive
    def s2l(self, address: int, array, stride=None, mode=None) -> NpuTensor:
        """Copy a host ``(N, C, H, W)`` array into local memory at ``address``; return its placement.

        ``stride=None`` means the aligned layout; 4N/2N modes write dummies as 0.

        >>> mem = LocalMemory(Chip(4, 1024, 128))
        >>> t = mem.s2l(1024, np.ones((1, 2, 1, 3), np.float32))
        >>> t.start_npu, mem.local[2, :4].view(np.float32).tolist()
        (1, [1.0])
        """
        array = np.asarray(array)
        if array.ndim != 4:
            raise ShapeError(f"array has shape {array.shape}: s2l needs a 4-D (N, C, H, W) array")
        t = self._local_tensor(address, array.shape, array.dtype, stride, mode, "local")
        t.pack_into(self._local, array)
        return t

    @_exclusive
    def l2s(self, address: int, shape, dtype, stride=None, mode=None) -> np.ndarray:
        """Read an ``(N, C, H, W)`` tensor at local ``address`` into a new host array.

        >>> mem = LocalMemory(Chip(4, 1024, 128))
        >>> _ = mem.s2l(128, np.arange(6, dtype=np.int16).reshape(1, 3, 1, 2))
        >>> mem.l2s(128, (1, 3, 1, 2), "int16").ravel().tolist()
        [0, 1, 2, 3, 4, 5]
        """
        t = self._local_tensor(address, shape, dtype, stride, mode, "local")
        return t.unpack_from(self._local)

    @_exclusive
    def store(self, tensor: NpuTensor, array) -> None:
        """Write ``array`` to a placed tensor (from :func:`tensor_layout`, :meth:`alloc`, ...)."""
        self._own(tensor)
        tensor.pack_into(self._local, array)

    @_exclusive
    def load(self, tensor: NpuTensor) -> np.ndarray:
        """Read a placed tensor back into a new host array."""
        self._own(tensor)
        return tensor.unpack_from(self._local)

    def _own(self, tensor):
        if not isinstance(tensor, NpuTensor) or tensor.chip != self.chip:
            raise LayoutError(f"tensor = {tensor!r} is not allowed: it must be an NpuTensor on {self.chip.name}")

    @_exclusive
    def matrix_s2l(self, address: int, matrix, cols_per_channel: int) -> NpuTensor:
        """Copy a host ``rows x cols`` matrix into the matrix layout at ``address``.

        >>> mem = LocalMemory(Chip(4, 1024, 128))
        >>> t = mem.matrix_s2l(0, np.arange(80, dtype=np.float32).reshape(2, 40), 15)
        >>> float(mem.local[2, 128:132].view(np.float32)[0])   # row 1, column 30
        70.0
        """
        matrix = np.asarray(matrix)
        if matrix.ndim != 2:
            raise ShapeError(f"matrix has shape {matrix.shape}: matrix_s2l needs a 2-D array")
        t = matrix_layout(self.chip, address, *matrix.shape, cols_per_channel, matrix.dtype)
        t.pack_into(self._local, matrix)
        return t

    @_exclusive
    def matrix_l2s(self, address: int, rows: int, cols: int, cols_per_channel: int, dtype) -> np.ndarray:
        """Read a ``rows x cols`` matrix in the matrix layout at ``address``.

        >>> mem = LocalMemory(Chip(4, 1024, 128))
        >>> _ = mem.matrix_s2l(0, np.eye(3, dtype=np.int32), 2)
        >>> mem.matrix_l2s(0, 3, 3, 2, "int32").tolist()
        [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
        """
        return matrix_layout(self.chip, address, rows, cols, cols_per_channel, dtype).unpack_from(self._local)

    # ------------------------------------------------------------- system
    @_exclusive
    def write_system(self, address: int, array, stride=None) -> None:
        """Put a host ``(N, C, H, W)`` array into system memory (continuous unless ``stride``)."""
        array = np.asarray(array)
        if array.ndim != 4:
            raise ShapeError(f"array has shape {array.shape}: system tensors are 4-D (N, C, H, W)")
        lay, _, dt = self._system_tensor(address, array.shape, array.dtype, stride, "system", write=True)
        lay.pack(_bits_of(array, dt), out=self._system_words(dt), fill_padding=False)

    @_exclusive
    def read_system(self, address: int, shape, dtype, stride=None) -> np.ndarray:
        """Read an ``(N, C, H, W)`` tensor out of system memory into a new host array.

        >>> mem = LocalMemory(Chip(4, 1024, 128), system_bytes=64)
        >>> mem.write_system(8, np.array([1, 2, 3], np.uint8).reshape(1, 1, 1, 3))
        >>> mem.read_system(8, (1, 1, 1, 3), "uint8").ravel().tolist()
        [1, 2, 3]
        """
        lay, _, dt = self._system_tensor(address, shape, dtype, stride, "system", write=False)
        return lay.unpack(self._system_words(dt)).view(dt)

    # ------------------------------------------------------- GDMA copies
    @_exclusive
    def gdma_s2l(self, dst: int, src: int, shape, dtype, dst_stride=None, src_stride=None,
                 mode=None) -> NpuTensor:
        """System ``src`` -> local ``dst``: a tensor copy with a shape and strides on each side.

        Missing strides: aligned on the local side, continuous on the system side.

        >>> mem = LocalMemory(Chip(4, 1024, 128), system_bytes=256)
        >>> mem.write_system(0, np.arange(8, dtype=np.float32).reshape(1, 2, 2, 2))
        >>> t = mem.gdma_s2l(0, 0, (1, 2, 2, 2), "fp32")
        >>> mem.local[1, :16].view(np.float32).tolist()
        [4.0, 5.0, 6.0, 7.0]
        """
        t = self._local_tensor(dst, shape, dtype, dst_stride, mode, "dst")
        lay, stride, dt = self._system_tensor(src, shape, dtype, src_stride, "src", write=False)
        if self._sim is not None:
            fn = self._gdma("S2L", dtype, mode)
            self._sim.call(fn, t.address, self._sim.SYSTEM_BASE + src, _d4(t.shape), _d4(t.stride),
                           _d4(stride))
        else:
            self._to_local(lay, t)
        return t

    def _to_local(self, lay, t: NpuTensor) -> None:
        """System tensor ``lay`` -> local tensor ``t``: one planned copy between the two layouts."""
        convert(lay, t.elements, self._system_words(t.dtype), out=self._local.reshape(-1).view(word_dtype(t.dtype)))

    def _to_system(self, t: NpuTensor, lay) -> None:
        """Local tensor ``t`` -> system tensor ``lay``: one planned copy between the two layouts."""
        convert(t.elements, lay, self._local.reshape(-1).view(word_dtype(t.dtype)), out=self._system_words(t.dtype),
                fill_padding=False)

    @_exclusive
    def gdma_l2s(self, dst: int, src: int, shape, dtype, dst_stride=None, src_stride=None,
                 mode=None) -> None:
        """Local ``src`` -> system ``dst`` (strides: local aligned, system continuous when omitted)."""
        t = self._local_tensor(src, shape, dtype, src_stride, mode, "src")
        lay, stride, _ = self._system_tensor(dst, shape, dtype, dst_stride, "dst", write=True)
        if self._sim is not None:
            fn = self._gdma("L2S", dtype, mode)
            self._sim.call(fn, self._sim.SYSTEM_BASE + dst, t.address, _d4(t.shape),
                           _d4(stride), _d4(t.stride))
        else:
            self._to_system(t, lay)

    @_exclusive
    def gdma_l2l(self, dst: int, src: int, shape, dtype, dst_stride=None, src_stride=None,
                 mode=None) -> NpuTensor:
        """Local ``src`` -> local ``dst`` (aligned on a side whose stride is omitted).

        The source is read completely before the destination is written, so the two may overlap.
        """
        s = self._local_tensor(src, shape, dtype, src_stride, mode, "src")
        d = self._local_tensor(dst, shape, dtype, dst_stride, mode, "dst")
        if self._sim is not None:
            fn = self._gdma("L2L", dtype, mode)
            hit = _first_overlap(s.npu_ranges(), d.npu_ranges())
            if hit:
                p, a, b = hit[0], s.npu_ranges()[hit[0]], d.npu_ranges()[hit[0]]
                raise OverlapError(
                    f"dst = {d.address} is not allowed with backend='cmodel': the destination's "
                    f"bytes [{b[0]}, {b[1]}) of NPU {p} overlap the source's [{a[0]}, {a[1]}); "
                    "the chip's GDMA reads and writes as it goes, so an overlapping L2L copy "
                    "needs a staging buffer")
            self._sim.call(fn, d.address, s.address, _d4(d.shape), _d4(d.stride), _d4(s.stride))
        else:
            d.pack_into(self._local, s.unpack_from(self._local))
        return d

    @_exclusive
    def gdma_s2s(self, dst: int, src: int, shape, dtype, dst_stride=None, src_stride=None) -> None:
        """System ``src`` -> system ``dst`` (continuous on a side whose stride is omitted)."""
        sl, sstride, dt = self._system_tensor(src, shape, dtype, src_stride, "src", write=False)
        dl, dstride, _ = self._system_tensor(dst, shape, dtype, dst_stride, "dst", write=True)
        if self._sim is not None:
            e = dt.itemsize
            (a0, a1), (b0, b1) = (sl.base * e, sl.reach() * e), (dl.base * e, dl.reach() * e)
            if _overlap((a0, a1), (b0, b1)):
                raise OverlapError(
                    f"dst = {dst} is not allowed with backend='cmodel': the destination's system "
                    f"bytes [{b0}, {b1}) overlap the source's [{a0}, {a1}); the chip's GDMA reads and "
                    "writes as it goes")
            base = self._sim.SYSTEM_BASE
            self._sim.call(self._gdma("S2S", dtype, None), base + dst, base + src, _d4(sl.shape),
                           _d4(dstride), _d4(sstride))
            return
        words = self._system_words(dt)
        if _overlap((sl.base, sl.reach()), (dl.base, dl.reach())):
            dl.pack(sl.unpack(words), out=words, fill_padding=False)   # read all, then write
        else:
            convert(sl, dl, words, out=words, fill_padding=False)      # one copy, no temporary

    def _matrix_system_view(self, address, rows, cols, dtype, row_stride, what, write):
        """A system matrix as a buffer layout over system memory counted in its elements, after
        the checks of :meth:`_system_tensor`: ``(layout, row stride)``."""
        rows = check_positive_int("rows", rows)
        cols = check_positive_int("cols", cols)
        row_stride = check_positive_int(f"{what} row_stride", cols if row_stride is None else row_stride)
        lay, _, dt = self._system_tensor(address, (1, 1, rows, cols), dtype, (1, 1, row_stride, 1), what,
                                         write=False)
        lay = Layout("system-matrix", ("row", "col"), (rows, cols), lay.physical_shape,
                     {"row": row_stride, "col": 1}, base=lay.base)
        if write:
            _refuse_shared(lay, f"{what} row_stride", row_stride, (rows, cols))
        return lay, row_stride

    @_exclusive
    def gdma_matrix_s2l(self, dst: int, src: int, rows: int, cols: int, cols_per_channel: int,
                        dtype, src_row_stride=None) -> NpuTensor:
        """System matrix (row stride ``src_row_stride``, default cols) -> local matrix layout."""
        t = matrix_layout(self.chip, dst, rows, cols, cols_per_channel, dtype)
        lay, row_stride = self._matrix_system_view(src, rows, cols, dtype, src_row_stride, "src", write=False)
        if self._sim is not None:
            self._matrix_call("S2L", t, t.address, self._sim.SYSTEM_BASE + src, row_stride)
        else:
            self._to_local(lay, t)
        return t

    def _matrix_call(self, kind, t, dst, src, row_stride):
        if t.dtype.itemsize != 4:
            raise DTypeError(f"dtype = {dtype_name(t.dtype)} is not allowed in a matrix copy with "
                             "backend='cmodel': the chip's matrix GDMA moves 32-bit elements")
        rows, cols = t.matrix_shape
        self._sim.call(f"okk_gdma_32bit_matrix_{kind}", dst, src, rows, cols, t.cols_per_channel,
                       row_stride)

    @_exclusive
    def gdma_matrix_l2s(self, dst: int, src: int, rows: int, cols: int, cols_per_channel: int,
                        dtype, dst_row_stride=None) -> None:
        """Local matrix layout -> system matrix (row stride ``dst_row_stride``, default cols)."""
        t = matrix_layout(self.chip, src, rows, cols, cols_per_channel, dtype)
        lay, row_stride = self._matrix_system_view(dst, rows, cols, dtype, dst_row_stride, "dst", write=True)
        if self._sim is not None:
            self._matrix_call("L2S", t, self._sim.SYSTEM_BASE + dst, t.address, row_stride)
        else:
            self._to_system(t, lay)

    # ------------------------------------------------------------- fills
    @staticmethod
    def _constant(value, dtype):
        dt = as_dtype(dtype)
        try:
            with np.errstate(all="raise"):
                v = np.array(value, dtype=dt)
            exact = np.array(value).astype(np.float64) == v.astype(np.float64) or dt.kind == "f"
        except (OverflowError, ValueError, TypeError, FloatingPointError):
            exact = False
            v = None
        if v is None or v.ndim != 0 or not exact:
            raise DTypeError(f"value = {value!r} is not allowed: it must be a scalar that {dtype_name(dt)} holds exactly")
        return v

    @_exclusive
    def fill_local(self, address: int, shape, dtype, value, stride=None, mode=None) -> NpuTensor:
        """Set every element of a local tensor to ``value`` (4N/2N dummies to 0).

        >>> mem = LocalMemory(Chip(4, 1024, 128))
        >>> _ = mem.fill_local(0, (1, 5, 1, 1), "uint8", 7)
        >>> mem.local[:, 0].tolist(), int(mem.local[0, 128])  # channel 4: NPU 0, one C stride on
        ([7, 7, 7, 7], 7)
        """
        t = self._local_tensor(address, shape, dtype, stride, mode, "local")
        v = self._constant(value, t.dtype)
        if self._sim is not None:
            self._gdma("S2L", t.dtype, mode)  # the mode check: the chip's fill writes whole elements
            self._sim.call(f"okk_gdma_{8 * t.dtype.itemsize}bit_set_C_local", t.address, _bits(v),
                           _d4(t.shape), _d4(t.stride))
            return t
        t.pack_into(self._local, np.broadcast_to(v, t.elements.shape))
        return t

    @_exclusive
    def fill_system(self, address: int, shape, dtype, value, stride=None) -> None:
        """Set every element of a system tensor to ``value``."""
        lay, stride, dt = self._system_tensor(address, shape, dtype, stride, "system", write=True)
        v = self._constant(value, dt)
        if self._sim is not None:
            self._sim.call(f"okk_gdma_{8 * dt.itemsize}bit_set_C_system", self._sim.SYSTEM_BASE + address,
                           _bits(v), _d4(lay.shape), _d4(stride))
            return
        lay.pack(np.broadcast_to(_bits_of(v, dt), lay.shape), out=self._system_words(dt), fill_padding=False)

    # ---------------------------------------------------------- allocator
    @property
    def allocations(self) -> tuple[NpuTensor, ...]:
        """Tensors currently allocated, in allocation order."""
        return tuple(t for t, _ in self._allocations)

    def _conflict(self, t: NpuTensor, exact: bool):
        for other, _ in self._allocations:
            if exact:
                hit = _first_overlap(t.npu_ranges(), other.npu_ranges())
                if hit:
                    return (other, *hit)
            else:
                both = _overlap((t.offset, t.end_offset), (other.offset, other.end_offset))
                if both:
                    return other, None, both
        return None

    @_exclusive
    def alloc(self, shape, dtype="fp32", *, mode=None, layout="aligned", stride=None,
              address=None, start_npu: int = 0, reuse_empty_blocks: bool = False) -> NpuTensor:
        """Place a tensor in local memory where it overlaps no other allocation; return it.

        Without ``address``, the lowest free offset in NPU ``start_npu`` is taken.  By default a
        tensor claims bytes ``[offset, offset + span)`` in *every* NPU, its empty blocks
        included, so nothing else lands there; ``reuse_empty_blocks=True`` compares only the
        bytes each NPU really holds (both tensors' own ranges), which the seed warns against.

        >>> mem = LocalMemory(Chip(4, 1024, 128))
        >>> a = mem.alloc((1, 3, 4, 5))
        >>> b = mem.alloc((2, 3, 4, 5))
        >>> a.offset, a.end_offset, b.offset
        (0, 80, 128)
        """
        exact = bool(reuse_empty_blocks)
        if address is not None:
            t = tensor_layout(self.chip, address, shape, stride, dtype, mode, layout)
            hit = self._conflict(t, exact)
            if hit:
                other, p, (lo, hi) = hit
                where = f"NPU {p}" if p is not None else "every NPU"
                raise OverlapError(
                    f"address = {t.address} is not allowed: the tensor {t.shape} would share bytes "
                    f"[{lo}, {hi}) of {where} with the tensor {other.shape} at address {other.address}"
                    + ("" if exact else " (its empty blocks included; pass reuse_empty_blocks=True "
                       "to allow them)")
                )
        else:
            start_npu = check_nonneg_int("start_npu", start_npu)
            if start_npu >= self.chip.npus:
                raise LayoutError(f"start_npu = {start_npu} is not allowed: it must be in [0, {self.chip.npus})")
            S = self.chip.lmem_bytes
            step = self.chip.align_bytes if stride is None and layout == "aligned" else 4
            candidates = sorted({0, *(-(-o.end_offset // step) * step for o, _ in self._allocations)})
            t = None
            for off in candidates:
                if off >= S:
                    continue
                try:
                    cand = tensor_layout(self.chip, start_npu * S + off, shape, stride, dtype, mode, layout)
                except FootprintError:
                    continue
                if not self._conflict(cand, exact):
                    t = cand
                    break
            if t is None:
                # validates the arguments themselves (raises their own error) before saying "full"
                tensor_layout(self.chip, start_npu * S, shape, stride, dtype, mode, layout)
                raise FootprintError(
                    f"shape = {tuple(shape)} does not fit: no free range of local memory starting "
                    f"at NPU {start_npu} holds it next to {len(self._allocations)} allocated tensors"
                )
        t = dataclasses.replace(t)  # a handle of its own: placements are shared, allocations not
        self._allocations.append((t, exact))
        return t

    @_exclusive
    def free(self, tensor: NpuTensor) -> None:
        """Release an allocated tensor."""
        for i, (t, _) in enumerate(self._allocations):
            if t is tensor:
                del self._allocations[i]
                return
        raise LayoutError(f"tensor = {tensor!r} is not allowed: it is not allocated in this memory")


def _overlap(a, b):
    """The bytes ``[lo, hi)`` two ranges share, or None (also when either is None)."""
    if a and b and a[0] < b[1] and b[0] < a[1]:
        return max(a[0], b[0]), min(a[1], b[1])
    return None


def _first_overlap(ranges, others):
    """The first NPU where two tensors' :meth:`~NpuTensor.npu_ranges` meet: ``(npu, (lo, hi))``, or None."""
    return next(((p, both) for p, both in enumerate(map(_overlap, ranges, others)) if both), None)


def _refuse_shared(lay, name, stride, shape):
    """Refuse a destination whose layout puts two elements at one address."""
    if not lay.injective:
        raise StrideError(f"{name} = {stride} is not allowed with shape {shape}: "
                          "two elements of the destination would share an address")


def _d4(values):
    from .cmodel import dim4

    return dim4(values)


def _bits(value: np.ndarray) -> int:
    """The raw bits of a scalar, as the C unions x8 / x16 / x32 pass them."""
    return int(np.asarray(value).view(word_dtype(value.dtype)))


def _bits_of(array: np.ndarray, dt: np.dtype) -> np.ndarray:
    """An array of ``dt`` data as its unsigned words (a copy moves bits, never converts)."""
    return np.asarray(array).view(word_dtype(dt))


@functools.lru_cache(maxsize=256)
def _system_layout(shape, stride, base: int, words: int):
    """A strided ``(n, c, h, w)`` buffer in system memory of ``words`` elements, from element
    ``base``: ``(reach, layout)``, the layout None where the reach runs past the memory."""
    wide = Layout("system", ("n", "c", "h", "w"), shape, (1 << 62,), dict(zip("nchw", stride)), base=base)
    if wide.reach() > words:
        return wide.reach(), None
    return wide.reach(), dataclasses.replace(wide, physical_shape=(words,))
