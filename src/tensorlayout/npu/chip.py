"""NPU chips: how many NPUs, how much local memory each has, and the feature alignment.

A local-memory address ``A`` in ``[0, X*S)`` names NPU ``Q = A // S`` and the
byte offset ``R = A % S`` inside it (seed 003, "Address of Tensor in Local
Memory").  The seed illustrates with ``X = 4`` and ``S = 1024``::

    >>> chip = Chip(4, 1024, 128, name="seed")
    >>> [chip.split_address(a) for a in (340, 1472, 2300, 3088)]
    [(0, 340), (1, 448), (2, 252), (3, 16)]
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import AddressError, LayoutError, check_positive_int, short

__all__ = ["Chip", "BM1684", "BM1684X", "BM1688", "CHIPS", "get_chip"]


@dataclass(frozen=True)
class Chip:
    """A chip's local memory: ``npus`` NPUs of ``lmem_bytes`` bytes, features aligned to ``align_bytes``.

    ``align_bytes`` is the alignment of the aligned layout (BM1684's is 128 bytes:
    32 fp32 lanes of 4 bytes).  It must be a multiple of 4 and divide ``lmem_bytes``.

    >>> BM1684
    Chip(npus=64, lmem_bytes=524288, align_bytes=128, name='BM1684')
    >>> BM1684.total_bytes // 2**20
    32
    """

    npus: int
    lmem_bytes: int
    align_bytes: int
    name: str = "custom"

    def __post_init__(self):
        check_positive_int("npus", self.npus)
        check_positive_int("lmem_bytes", self.lmem_bytes)
        check_positive_int("align_bytes", self.align_bytes)
        if self.align_bytes % 4:
            raise LayoutError(
                f"align_bytes = {self.align_bytes} is not allowed: it must be a multiple of 4 bytes"
            )
        if self.lmem_bytes % self.align_bytes:
            raise LayoutError(
                f"lmem_bytes = {self.lmem_bytes} is not allowed: it must be a multiple of "
                f"align_bytes = {self.align_bytes}"
            )
        object.__setattr__(self, "npus", int(self.npus))
        object.__setattr__(self, "lmem_bytes", int(self.lmem_bytes))
        object.__setattr__(self, "align_bytes", int(self.align_bytes))

    @property
    def total_bytes(self) -> int:
        """Local memory of all NPUs together, ``X * S`` bytes."""
        return self.npus * self.lmem_bytes

    def check_address(self, address, name: str = "address") -> int:
        """Return ``address`` as an int, or raise AddressError unless it is in ``[0, X*S)``."""
        if isinstance(address, bool) or not isinstance(address, int) and not hasattr(address, "__index__"):
            raise AddressError(f"{name} = {address!r} is not allowed: it must be an integer")
        a = int(address)
        if a < 0 or a >= self.total_bytes:
            raise AddressError(
                f"{name} = {a} is outside local memory: it must be in [0, {self.total_bytes}) "
                f"on {self.name} ({self.npus} NPUs x {self.lmem_bytes} bytes)"
            )
        return a

    def split_address(self, address) -> tuple[int, int]:
        """Local address -> ``(npu, offset)``: ``Q = A // S``, ``R = A % S``.

        >>> Chip(4, 1024, 128).split_address(1472)
        (1, 448)
        """
        a = self.check_address(address)
        return a // self.lmem_bytes, a % self.lmem_bytes

    def address(self, npu, offset) -> int:
        """``(npu, offset)`` -> local address ``npu * S + offset``.

        >>> Chip(4, 1024, 128).address(3, 16)
        3088
        """
        if isinstance(npu, bool) or not hasattr(npu, "__index__") or not 0 <= int(npu) < self.npus:
            raise AddressError(f"npu = {npu!r} is not allowed: it must be an integer in [0, {self.npus})")
        if isinstance(offset, bool) or not hasattr(offset, "__index__") or not 0 <= int(offset) < self.lmem_bytes:
            raise AddressError(
                f"offset = {offset!r} is not allowed: it must be an integer in [0, {self.lmem_bytes})"
            )
        return int(npu) * self.lmem_bytes + int(offset)


#: Sophgo BM1684, the chip OKKernel targets: 64 NPUs x 512 KiB, 128-byte alignment.
BM1684 = Chip(64, 512 * 1024, 128, "BM1684")
#: Sophgo BM1684X: 64 NPUs x 256 KiB, 64-byte alignment.
BM1684X = Chip(64, 256 * 1024, 64, "BM1684X")
#: Sophgo BM1688: 32 NPUs x 128 KiB, 16-byte alignment.
BM1688 = Chip(32, 128 * 1024, 16, "BM1688")

CHIPS = {c.name: c for c in (BM1684, BM1684X, BM1688)}


def get_chip(name: str) -> Chip:
    """A preset by name (case-insensitive).

    >>> get_chip("bm1688").npus
    32
    """
    try:
        return CHIPS[name.upper() if isinstance(name, str) else name]
    except (KeyError, TypeError):
        raise LayoutError(
            f"chip = {short(name)!r} is not allowed: it must be one of {', '.join(CHIPS)}"
        ) from None
