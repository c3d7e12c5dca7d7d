"""The ``tensorlayout`` command.

Each subsystem contributes its subcommands and its part of the guided tour
from a module in :mod:`tensorlayout.cli_parts` that defines ``register(sub)``
(add subcommands to an argparse sub-parser set) and, optionally,
``demo(tour)`` (print its part of ``tensorlayout demo``).  Bad input anywhere
becomes one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .errors import LayoutError

# Order of the subcommands in --help and of the parts in the tour.
PARTS = ("buffer", "image", "npu", "npusim", "winograd", "opencl", "draw")


def _load_parts():
    parts = []
    for name in PARTS:
        try:
            mod = importlib.import_module(f"tensorlayout.cli_parts.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"tensorlayout.cli_parts.{name}":
                continue
            raise
        parts.append(mod)
    return parts


class Tour:
    """What ``tensorlayout demo`` hands to each part: a printer and an output folder."""

    def __init__(self, out_dir: str, stream=None):
        self.out_dir = out_dir
        self.stream = stream or sys.stdout

    def section(self, title: str) -> None:
        self.print()
        self.print(title)
        self.print("=" * len(title))

    def print(self, *args, **kwargs) -> None:
        print(*args, file=self.stream, **kwargs)


def _run_demo(args, parts) -> int:
    tour = Tour(args.out)
    tour.print("tensorlayout: a guided tour of every layout it knows.")
    for mod in parts:
        fn = getattr(mod, "demo", None)
        if fn is not None:
            fn(tour)
    tour.print()
    tour.print("End of the tour.")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parts = _load_parts()
    parser = argparse.ArgumentParser(
        prog="tensorlayout",
        description="Where every element of a tensor lives: CPU buffers, OpenCL RGBA images, "
        "NPU local memory; exact conversions; Winograd convolution.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser("demo", help="guided tour of every layout (the main job)")
    demo.add_argument("--out", default="gallery",
                      help="folder for the figures the tour writes (default: %(default)s)")
    demo.set_defaults(func=lambda a: _run_demo(a, parts))
    for mod in parts:
        mod.register(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        rc = args.func(args)
    except LayoutError as exc:
        print(f"tensorlayout {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
