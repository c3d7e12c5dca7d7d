"""``tensorlayout npu``: where a tensor lives in NPU local memory; and the NPU part of the tour."""

from __future__ import annotations

import numpy as np

from ..errors import FootprintError, LayoutError, short
from ._common import dtype_arg, int_list, nonneg, positive, print_json

def register(sub) -> None:
    p = sub.add_parser(
        "npu",
        help="where a tensor lives in NPU local memory (strides, channels and bytes per NPU); "
        "npu simulator: Sophgo's BM1684 simulator; npu plan-conv: plan and run a convolution layer",
        description="Place an (N, C, H, W) tensor (or a rows x cols matrix with --layout matrix:W) "
        "in a chip's local memory and print its strides, channels per NPU, bytes per NPU and, "
        "with --where / --at, where an element is or what a byte holds.",
    )
    add_tensor_options(p, shape_required=False)
    p.add_argument("--where", action="append", default=[], metavar="N,C,H,W",
                   help="n,c,h,w (row,col for a matrix): print its NPU and byte offset; repeatable")
    p.add_argument("--at", action="append", default=[], metavar="NPU,OFFSET",
                   help="npu,offset: print the element stored at that byte; repeatable")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_run)


def add_tensor_options(p, shape_required: bool = True) -> None:
    """The options that place a tensor in NPU local memory (``npu`` and ``draw npu`` share them)."""
    from ..npu.chip import CHIPS

    chip = p.add_argument_group("chip (a preset, or --npus and --lmem with an optional --align)")
    chip.add_argument("--chip", help=f"a preset chip: {', '.join(CHIPS)} (case-insensitive)")
    chip.add_argument("--npus", type=positive, help="number of NPUs X")
    chip.add_argument("--lmem", type=positive, help="local memory bytes per NPU S")
    chip.add_argument("--align", type=positive, help="feature alignment in bytes (default 128, the seed's)")
    p.add_argument("--shape", required=shape_required, help="N,C,H,W (rows,cols for a matrix)")
    p.add_argument("--dtype", default="fp32",
                   help="fp32 (float32), fp16 (float16, half), int32, uint32, int16, uint16, int8, uint8; "
                        "case-insensitive (default: %(default)s)")
    p.add_argument("--layout", default="aligned",
                   help="aligned | compact | matrix:W | stride:n,c,h,w (default: %(default)s)")
    p.add_argument("--mode", type=str.upper, choices=("4N", "2N", "2IC"),
                   help="storage mode: 4N (int8), 2N (int16) or 2IC (fp32 weights); case-insensitive")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--address", type=nonneg, help="local address A = Q * S + R")
    where.add_argument("--start-npu", type=nonneg, help="start NPU Q (address Q * S + --offset)")
    p.add_argument("--offset", type=nonneg, default=None,
                   help="offset R inside the start NPU, with --start-npu (default 0)")


def _chip(args):
    from ..npu import Chip, get_chip

    custom = (args.npus, args.lmem, args.align)
    if args.chip and any(v is not None for v in custom):
        raise LayoutError("--chip cannot be combined with --npus/--lmem/--align: pick a preset or a custom chip")
    if args.chip:
        return get_chip(str(args.chip).upper())
    if args.npus is None or args.lmem is None:
        raise LayoutError("chip is missing: give --chip NAME, or --npus X and --lmem S (and --align A)")
    return Chip(args.npus, args.lmem, 128 if args.align is None else args.align)


def place(args):
    """The tensor that the options of :func:`add_tensor_options` describe."""
    from ..npu import matrix_layout, tensor_layout

    chip = _chip(args)
    if args.shape is None:
        raise LayoutError("--shape is missing: give N,C,H,W (rows,cols for a matrix)")
    shape = int_list(args.shape, "--shape")
    dtype = npu_dtype(args.dtype)
    if args.address is not None:
        if args.offset is not None:
            raise LayoutError(f"--offset = {args.offset} is not allowed with --address: the address "
                              "already holds the offset (A = Q * S + R); use --start-npu Q --offset R")
        address = args.address
    else:
        q = args.start_npu or 0
        if not 0 <= q < chip.npus:
            raise LayoutError(f"--start-npu = {q} is not allowed: it must be in [0, {chip.npus})")
        off = args.offset or 0
        if off >= chip.lmem_bytes:
            raise LayoutError(f"--offset = {off} is not allowed: it must be less than the NPU's "
                              f"{chip.lmem_bytes} bytes")
        address = chip.address(q, off)
    layout = args.layout.lower()
    if layout.startswith("matrix:"):
        if args.mode:
            raise LayoutError(f"--mode = {args.mode} is not allowed with the matrix layout")
        if len(shape) != 2:
            raise LayoutError(f"--shape = {args.shape!r} is not allowed: the matrix layout needs rows,cols")
        w = int_list(layout[len("matrix:"):], "--layout matrix:W")
        if len(w) != 1:
            raise LayoutError(f"--layout = {layout!r} is not allowed: write matrix:W with one integer W")
        return matrix_layout(chip, address, shape[0], shape[1], w[0], dtype)
    stride = None
    if layout.startswith("stride:"):
        stride = int_list(layout[len("stride:"):], "--layout stride:n,c,h,w")
        layout = "stride"
    elif layout not in ("aligned", "compact"):
        raise LayoutError(
            f"--layout = {layout!r} is not allowed: it must be aligned, compact, matrix:W or stride:n,c,h,w")
    return tensor_layout(chip, address, shape, stride, dtype, args.mode, layout)


def npu_dtype(text) -> str:
    """The OKKernel dtype name of any spelling the command line takes (``half`` -> ``fp16``)."""
    dt = dtype_arg(text, "--dtype", ("float32", "float16", "int32", "uint32", "int16", "uint16",
                                     "int8", "uint8"))
    return {"float32": "fp32", "float16": "fp16"}.get(dt.name, dt.name)


def summary(t) -> dict:
    """The facts ``tensorlayout npu`` prints about a placed tensor, as a dict."""
    from ..npu.tensor import dtype_name

    out = {
        "chip": {"name": t.chip.name, "npus": t.chip.npus, "lmem_bytes": t.chip.lmem_bytes,
                 "align_bytes": t.chip.align_bytes},
        "address": t.address, "start_npu": t.start_npu, "offset": t.offset,
        "shape": list(t.shape), "dtype": dtype_name(t.dtype), "mode": t.mode, "layout": t.layout_name,
        "stride": list(t.stride), "unit_bytes": t.unit_bytes,
        "channels_per_npu": t.channels_per_npu, "span_bytes": t.span, "end_offset": t.end_offset,
        "bytes_per_npu": t.bytes_per_npu().tolist(), "empty_blocks": t.empty_blocks(),
        "fits_local_memory": t.end_offset <= t.chip.lmem_bytes,
    }
    if t.mode:
        out["packed_shape"] = list(t.packed_shape)
    if t.is_matrix:
        out["matrix"] = {"rows": t.matrix_shape[0], "cols": t.matrix_shape[1],
                         "cols_per_channel": t.cols_per_channel}
    return out


def _compact_list(values) -> str:
    """'[a, b, ...]' with runs of equal values written as 'v x count'."""
    parts, i = [], 0
    values = list(values)
    while i < len(values):
        j = i
        while j < len(values) and values[j] == values[i]:
            j += 1
        parts.append(f"{values[i]} x{j - i}" if j - i > 2 else ", ".join(str(v) for v in values[i:j]))
        i = j
    return "[" + ", ".join(parts) + "]"


def _run(args) -> int:
    try:
        t = place(args)
    except FootprintError as exc:
        raise FootprintError(f"--shape = {short(args.shape)!r} does not fit the local memory: {exc}") from None
    info = summary(t)
    info["where"], info["at"] = [], []
    for text in args.where:
        idx = int_list(text, "--where")
        if t.is_matrix:
            if len(idx) != 2:
                raise LayoutError(f"--where = {short(text)!r} is not allowed: a matrix element is row,col")
            npu, off = t.matrix_locate(*idx)
        else:
            if len(idx) != 4:
                raise LayoutError(f"--where = {short(text)!r} is not allowed: an element is n,c,h,w")
            npu, off = t.locate(idx)
        info["where"].append({"index": list(idx), "npu": npu, "offset": off,
                              "address": t.chip.address(npu, off)})
    for text in args.at:
        at = int_list(text, "--at")
        if len(at) != 2:
            raise LayoutError(f"--at = {short(text)!r} is not allowed: it must be npu,offset")
        got = t.matrix_element_at(*at) if t.is_matrix else t.element_at(*at)
        info["at"].append({"npu": at[0], "offset": at[1], "element": None if got is None else list(got),
                           "dummy": got is None and t.is_dummy(*at)})
    if args.json:
        print_json(info)
        return 0
    c = info["chip"]
    print(f"chip        {c['name']}: {c['npus']} NPUs x {c['lmem_bytes']} bytes, align {c['align_bytes']} bytes")
    print(f"address     {t.address} = NPU {t.start_npu}, offset {t.offset}")
    shape = f"{t.matrix_shape[0]}x{t.matrix_shape[1]} matrix, viewed as {t.shape}" if t.is_matrix else str(t.shape)
    print(f"tensor      {shape} {info['dtype']}, layout {t.layout_name}"
          + (f", mode {t.mode} (packed shape {t.packed_shape})" if t.mode else ""))
    unit = f" (units of {t.unit_bytes} bytes)" if t.mode else ""
    print(f"strides     n={t.stride[0]} c={t.stride[1]} h={t.stride[2]} w={t.stride[3]}{unit}")
    print(f"channels    {t.channels_per_npu} per NPU")
    print(f"span        {t.span} bytes per NPU: offsets [{t.offset}, {t.end_offset})")
    print(f"bytes/NPU   {_compact_list(info['bytes_per_npu'])}")
    print(f"empty       {t.empty_blocks()} feature-sized empty blocks")
    print(f"fits        yes: bytes [{t.offset}, {t.end_offset}) of each NPU's {t.chip.lmem_bytes} "
          f"({t.end_offset / t.chip.lmem_bytes:.1%} up to the end)")
    for w in info["where"]:
        print(f"where       {tuple(w['index'])} -> NPU {w['npu']}, byte {w['offset']} (address {w['address']})")
    for a in info["at"]:
        what = ("a dummy of a packed word (written as 0)" if a["dummy"] else "nothing of this tensor") \
            if a["element"] is None else f"element {tuple(a['element'])}"
        print(f"at          NPU {a['npu']}, byte {a['offset']} holds {what}")
    return 0


# ---------------------------------------------------------------------- tour
def block_picture(t, blocks: int, block_bytes: int = 4) -> list[str]:
    """One text line per NPU: each block of ``block_bytes`` shows the channel it holds.

    A digit or letter is the channel c (0-9, then a-z), '-' a 4N/2N/2IC dummy, '.' nothing.
    """
    start = t.offset - t.offset % block_bytes
    m = t.byte_map(start, min(t.chip.lmem_bytes, start + blocks * block_bytes))
    C, H, W = t.shape[1], t.shape[2], t.shape[3]
    lines = []
    for p in range(t.chip.npus):
        row = []
        for b in range(blocks):
            v = m[p, b * block_bytes:(b + 1) * block_bytes]
            v = v[v != -1]
            if v.size == 0:
                row.append(".")
            elif v[0] == -2:
                row.append("-")
            else:
                if t.is_matrix:
                    c = (int(v[0]) % t.matrix_shape[1]) // t.cols_per_channel
                else:
                    c = (int(v[0]) // (H * W)) % C
                row.append("0123456789abcdefghijklmnopqrstuvwxyz"[c % 36])
        lines.append(f"  NPU {p}: " + "".join(row))
    return lines


def demo(tour) -> None:
    from ..npu import (
        BM1684,
        Chip,
        LocalMemory,
        aligned_stride,
        channels_per_npu,
        compact_stride,
        matrix_layout,
        tensor_layout,
    )

    seed = Chip(4, 1024, 128, "seed")
    tour.section("NPU local memory (Sophgo OKKernel, seed 003)")
    tour.print("A chip has X NPUs of S bytes; address A is NPU A // S, offset A % S. The seed's chip: X=4, S=1024.")
    for a in (340, 1472, 2300, 3088):
        q, r = seed.split_address(a)
        tour.print(f"  address {a:4d} -> NPU {q}, offset {r}")
    tour.print("Channels per NPU = ceil((Q + C) / X); feature (n, c) goes to NPU (Q + c) % X:")
    for q, c in ((0, 3), (1, 3), (0, 6), (3, 6)):
        t = tensor_layout(seed, q * 1024, (1, c, 1, 1))
        tour.print(f"  C={c} from NPU {q}: {channels_per_npu(seed, q, c)} per NPU, "
                   f"{t.empty_blocks()} empty block(s) per batch")
    tour.print("Seed stride example: (2, 5, 3, 4) fp32 at NPU 0, strides n=120 c=56 h=16 w=2;")
    t = tensor_layout(seed, 0, (2, 5, 3, 4), stride=(120, 56, 16, 2))
    tour.print(f"  element (1, 4, 2, 3) -> NPU, byte {t.locate((1, 4, 2, 3))}; "
               f"byte 860 of NPU 0 holds {t.element_at(0, 860)}")
    tour.print("Aligned and compact layouts of (2, 3, 4, 5) fp32 (one character per 4-byte block,"
               " the channel it holds; '.' empty):")
    for q in (0, 2):
        a = tensor_layout(seed, q * 1024, (2, 3, 4, 5))
        c = tensor_layout(seed, q * 1024, (2, 3, 4, 5), layout="compact")
        tour.print(f" aligned from NPU {q}: strides {aligned_stride(seed, (2, 3, 4, 5), q, 'fp32')}")
        for line in block_picture(a, 64):
            tour.print(line)
        tour.print(f" compact from NPU {q}: strides {compact_stride(seed, (2, 3, 4, 5), q)}")
        for line in block_picture(c, 64):
            tour.print(line)
    tour.print("Matrix layout, a 2 x 40 fp32 matrix with W columns per channel:")
    for w in (40, 20, 10, 8, 15, 6):
        m = matrix_layout(seed, 0, 2, 40, w)
        per = (m.bytes_per_npu() // 8).tolist()
        tour.print(f"  W={w:2d}: C={m.shape[1]}, {m.stride[0]:2d} blocks per row per NPU, "
                   f"columns per NPU {per}")
    t4 = tensor_layout(seed, 0, (6, 5, 4, 5), dtype="int8", mode="4N")
    p, off = t4.locate((4, 0, 0, 0))
    tour.print(f"4N mode: (6, 5, 4, 5) int8 packs as {t4.packed_shape} int8x4; the word at NPU {p}, "
               f"bytes {off}..{off + 3} holds {t4.byte_map()[p, off:off + 4].tolist()} "
               "(flat indices of (4,0,0,0), (5,0,0,0); -2 = dummy)")
    t2 = tensor_layout(seed, 0, (3, 5, 4, 5), dtype="int16", mode="2N")
    p, off = t2.locate((2, 0, 0, 0))
    tour.print(f"2N mode: (3, 5, 4, 5) int16 packs as {t2.packed_shape} int16x2; the word at NPU {p}, "
               f"bytes {off}..{off + 3} holds {t2.byte_map()[p, off:off + 4].tolist()}")
    shape = (4, 256, 56, 56)
    tb = tensor_layout(BM1684, 0, shape)
    tour.print(f"BM1684 ({BM1684.npus} NPUs x {BM1684.lmem_bytes // 1024} KiB): {shape} fp32 aligned has "
               f"strides {tb.stride}, {tb.channels_per_npu} channels per NPU, "
               f"{tb.span // 1024} KiB per NPU")
    mem = LocalMemory(BM1684, system_bytes=1 << 20)
    x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    mem.store(tb, x)
    ok = np.array_equal(mem.l2s(0, shape, "fp32"), x)
    tour.print(f"  written to the simulated local memory and read back: {'identical' if ok else 'DIFFERENT'}")
