"""Helpers shared by the CLI parts: parsing comma lists, dtype names and sizes, printing JSON.

Every parser here is strict: what it does not understand is a :class:`LayoutError` naming the
option, never a guess.

>>> int_list("1,-2,3", "--shape")
(1, -2, 3)
>>> int_list("1,,2", "--shape")
Traceback (most recent call last):
...
tensorlayout.errors.LayoutError: --shape = '1,,2' is not allowed: item 2 is empty; it must be comma-separated integers such as 1,2,3
>>> dtype_arg("HALF", "--dtype", ("float32", "float16")).name
'float16'
"""

from __future__ import annotations

import json
import re

import numpy as np

from .._checks import check_output_path
from ..errors import DTypeError, LayoutError, ShapeError, short

# Only ASCII digits: int() would also take full-width digits, '1_0' and surrounding blanks.
_INT = re.compile(r"[+-]?[0-9]+\Z")

#: Every spelling of a dtype the command line takes (case-insensitive), and its NumPy dtype.
DTYPE_SPELLINGS = {line.split()[0]: tuple(line.split()) for line in """
    float32 fp32 f32 float single
    float16 fp16 f16 half
    float64 fp64 f64 double
    int32 i32
    uint32 u32
    int16 i16
    uint16 u16
    int8 i8
    uint8 u8""".strip().splitlines()}
_SPELLING = {s: name for name, spellings in DTYPE_SPELLINGS.items() for s in spellings}

#: Largest array (in bytes) a command allocates for a random tensor before refusing.
MAX_ARRAY_BYTES = 1 << 31


def int_value(text: str, name: str) -> int:
    """One decimal integer (ASCII digits, optional sign), or a LayoutError naming ``name``.

    >>> int_value("-3", "--kernel")
    -3
    """
    t = str(text)
    if not _INT.match(t):
        raise LayoutError(f"{name} = {short(t)!r} is not allowed: it must be an integer "
                          "written with the digits 0-9")
    return int(t)


def int_list(text: str, name: str) -> tuple[int, ...]:
    """Parse '1,2,3' into (1, 2, 3); an empty or non-integer item raises LayoutError naming the option."""
    t = str(text)
    items = t.split(",")
    for i, item in enumerate(items, 1):
        if item.strip() == "":
            raise LayoutError(f"{name} = {short(t)!r} is not allowed: item {i} is empty; "
                              "it must be comma-separated integers such as 1,2,3")
        if not _INT.match(item.strip()):
            raise LayoutError(f"{name} = {short(t)!r} is not allowed: item {i} ({short(item)!r}) is not "
                              "an integer; it must be comma-separated integers (digits 0-9) such as 1,2,3")
    return tuple(int(s) for s in items)


def str_list(text: str, name: str) -> list[str]:
    """Comma-separated items, none of them empty (e.g. Winograd points '0,1,-1,1/2')."""
    t = str(text)
    items = [s.strip() for s in t.split(",")]
    for i, item in enumerate(items, 1):
        if item == "":
            raise LayoutError(f"{name} = {short(t)!r} is not allowed: item {i} is empty")
    return items


def shape_arg(text: str, name: str, rank: int | None = None, letters: str | None = None) -> tuple[int, ...]:
    """A shape: comma-separated positive integers, ``rank`` of them when given.

    >>> shape_arg("1,16,8,8", "--shape", 4, "N,C,H,W")
    (1, 16, 8, 8)
    """
    shape = int_list(text, name)
    if rank is not None and len(shape) != rank:
        raise ShapeError(f"{name} = {short(text)!r} is not allowed: it must be {letters or rank} "
                         f"({rank} positive integers), not {len(shape)}")
    for i, d in enumerate(shape):
        if d < 1:
            raise ShapeError(f"{name}[{i}] = {d} is not allowed: every dimension must be a positive integer")
    return shape


def dtype_arg(text: str, name: str, allowed) -> np.dtype:
    """A dtype from any of its spellings (fp16, float16, half, ...), case-insensitive, one of ``allowed``."""
    key = _SPELLING.get(str(text).strip().lower())
    if key is None or key not in allowed:
        spelled = "; ".join(", ".join(DTYPE_SPELLINGS[a]) for a in allowed)
        raise DTypeError(f"{name} = {short(str(text))!r} is not allowed: it must be one of {spelled}")
    return np.dtype(key)


def output_arg(path, option: str, folder: bool = False) -> str:
    """The door of every command that writes: ``path`` checked before anything is computed or
    written (the rules of :func:`tensorlayout._checks.check_output_path`), else a LayoutError
    naming ``option``, the value and the rule.

    >>> output_arg("/dev/null", "--save")
    Traceback (most recent call last):
    ...
    tensorlayout.errors.LayoutError: --save = '/dev/null' is not allowed: it is not a regular file (a device, a pipe or a socket): name a file
    """
    return check_output_path(option, path, folder=folder)


def input_arg(path, option: str) -> str:
    """An input file checked before it is opened: an existing regular file that may be read.
    A folder, a pipe or a device (which could block the read forever or never end) is refused.

    >>> input_arg("/dev/zero", "--input")
    Traceback (most recent call last):
    ...
    tensorlayout.errors.LayoutError: --input = '/dev/zero' is not allowed: it is not a regular file (a device, a pipe or a socket): name a file
    """
    import os
    import stat

    p = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
    if not p or "\0" in p:
        raise LayoutError(f"{option} = {short(path)!r} is not allowed: it must name a file")
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise LayoutError(f"{option} = {short(p)!r} is not allowed: it does not exist") from None
    except OSError as exc:
        raise LayoutError(f"{option} = {short(p)!r} is not allowed: it cannot be read "
                          f"({exc.strerror or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        raise LayoutError(f"{option} = {short(p)!r} is not allowed: it is a folder, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise LayoutError(f"{option} = {short(p)!r} is not allowed: it is not a regular file "
                          "(a device, a pipe or a socket): name a file")
    if not os.access(p, os.R_OK):
        raise LayoutError(f"{option} = {short(p)!r} is not allowed: it cannot be read (no permission)")
    return p


def write_output(path: str, option: str, data) -> None:
    """Write ``data`` (text, bytes, or an array saved as .npy) to exactly ``path``, checked first
    with :func:`output_arg`; a failure while writing (a full disk) is a LayoutError naming ``option``."""
    output_arg(path, option)
    try:
        if isinstance(data, str):
            with open(path, "w", encoding="utf-8") as f:
                f.write(data)
        else:
            with open(path, "wb") as f:
                if isinstance(data, np.ndarray):
                    np.save(f, data, allow_pickle=False)
                else:
                    f.write(data)
    except OSError as exc:
        raise LayoutError(f"{option} = {short(path)!r} is not allowed: it cannot be written "
                          f"({exc.strerror or exc})") from None


def check_array_size(name: str, shape, itemsize: int, limit: int | None = None) -> None:
    """Refuse, before allocating, a random tensor larger than ``limit`` bytes (default :data:`MAX_ARRAY_BYTES`)."""
    limit = MAX_ARRAY_BYTES if limit is None else limit
    n = 1
    for d in shape:
        n *= int(d)
    if n * itemsize > limit:
        raise ShapeError(f"{name} = {','.join(map(str, shape))} is not allowed: it needs "
                         f"{n * itemsize} bytes, more than the {limit} bytes this command allocates")


def print_json(obj) -> None:
    """``obj`` as strict JSON: a NaN or infinite number is written as the string "NaN",
    "Infinity" or "-Infinity" (JSON has no such numbers; ``json.dumps`` would write bare NaN).

    >>> print_json({"max": float("nan"), "n": [1, float("-inf")]})
    {
      "max": "NaN",
      "n": [
        1,
        "-Infinity"
      ]
    }
    """
    print(json.dumps(_strict(obj), indent=2, default=_default, allow_nan=False))


def _strict(o):
    if isinstance(o, dict):
        return {k: _strict(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_strict(v) for v in o]
    if isinstance(o, np.ndarray):
        return _strict(o.tolist())
    if isinstance(o, (float, np.floating)) and not np.isfinite(o):
        return "NaN" if np.isnan(o) else ("Infinity" if o > 0 else "-Infinity")
    return o


def _default(o):
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(type(o))


# ------------------------------------------------------------------ argparse types
def _arg_type(minimum, what, maximum=None):
    import argparse

    def parse(text):
        t = str(text)
        if not _INT.match(t.strip()):
            raise argparse.ArgumentTypeError(f"{short(t)!r} is not allowed: it must be {what} "
                                             "written with the digits 0-9")
        v = int(t)
        if (minimum is not None and v < minimum) or (maximum is not None and v > maximum):
            raise argparse.ArgumentTypeError(f"{short(str(v))} is not allowed: it must be {what}")
        return v

    parse.__name__ = what
    return parse


#: argparse ``type=`` for an integer option (ASCII digits only), for a positive one, a non-negative one.
integer = _arg_type(None, "an integer")
positive = _arg_type(1, "a positive integer")
nonneg = _arg_type(0, "a non-negative integer")
#: Most threads a command asks a runtime for; more is a typo, not a machine.
MAX_THREADS = 4096
threads = _arg_type(1, f"a positive integer at most {MAX_THREADS}", MAX_THREADS)


def no_action(parser):
    """``func`` of a command that needs a sub-action: print its help on stderr, exit status 2."""
    import sys

    def run(args):
        parser.print_help(sys.stderr)
        return 2

    return run


FILTER_FORMAT_HELP = "filters only: OIHW (default) or HWOI; depthwise MIHW (default), HWIM or C1HW"


def image_arguments(p, kind_help: str, shape_help: str, layout_help: str) -> None:
    """The arguments that name an image layout: KIND, --shape, --layout, --filter-format, --tile."""
    p.add_argument("kind", help=kind_help)
    p.add_argument("--shape", required=True, help=shape_help)
    p.add_argument("--layout", default=None, help=layout_help)
    p.add_argument("--filter-format", default=None, help=FILTER_FORMAT_HELP)
    p.add_argument("--tile", type=integer, default=None, help="Winograd tile for WINOGRAD_FILTER: 2, 4 or 6")


def difference(y, ref) -> dict:
    """``y`` against ``ref``: max |difference| / max |value| over the places where both are
    finite (None where there are none), the NaN and inf of each, and whether they sit at the
    same places with the same signs (``same_nonfinite``).

    >>> d = difference(np.array([1.0, np.nan]), np.array([1.0, 2.0]))
    >>> d["rel_max"], d["nan"], d["nan_reference"], d["same_nonfinite"]
    (0.0, 1, 0, False)
    """
    a, b = np.asarray(y, np.float64), np.asarray(ref, np.float64)
    both = np.isfinite(a) & np.isfinite(b)
    rel = None
    if both.any():
        rel = float(np.abs(a[both] - b[both]).max() / max(np.abs(b[both]).max(), 1e-30))
    same = bool(np.array_equal(np.isnan(a), np.isnan(b))
                and np.array_equal(np.where(np.isinf(a), a, 0), np.where(np.isinf(b), b, 0)))
    return {"rel_max": rel, "finite": int(both.sum()), "nan": int(np.isnan(a).sum()),
            "inf": int(np.isinf(a).sum()), "nan_reference": int(np.isnan(b).sum()),
            "inf_reference": int(np.isinf(b).sum()), "same_nonfinite": same}


def difference_line(d, against) -> str:
    head = "max |difference| / max |value| against " + against
    if not (d["nan"] or d["inf"] or d["nan_reference"] or d["inf_reference"]):
        return f"{head} {d['rel_max']:.2e}"
    rel = "no value is finite in both" if d["rel_max"] is None else \
        f"{d['rel_max']:.2e} over the {d['finite']} values finite in both"
    return (f"{head}: {rel}; NaN and inf {d['nan']} and {d['inf']} here, {d['nan_reference']} and "
            f"{d['inf_reference']} there, " + ("at the same places" if d["same_nonfinite"] else "at DIFFERENT places"))


def print_table(tour, head, rows) -> None:
    """``rows`` under ``head`` in left-aligned columns, with a blank line before and after."""
    widths = [max(len(str(r[i])) for r in list(rows) + [head]) for i in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    tour.print()
    tour.print(fmt.format(*head).rstrip())
    tour.print(fmt.format(*("-" * w for w in widths)))
    for r in rows:
        tour.print(fmt.format(*r).rstrip())
    tour.print()
