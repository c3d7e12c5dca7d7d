"""The ``tensorlayout`` command.

Each subsystem contributes its subcommands and its part of the guided tour
from a module in :mod:`tensorlayout.cli_parts` that defines ``register(sub)``
(add subcommands to an argparse sub-parser set) and, optionally,
``demo(tour)`` (print its part of ``tensorlayout demo``).  Bad input anywhere
becomes one line on stderr and exit status 2; under ``--json`` that line is a JSON
object ``{"error": ..., "argument": ...}``.  No command prints the help and exits 2.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import sys

from .errors import LayoutError

# Order of the subcommands in --help and of the parts in the tour.
PARTS = ("buffer", "image", "npu", "npusim", "winograd", "opencl", "draw", "model", "compare")


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


class UsageError(LayoutError):
    """A command line argparse could not read (unknown option, missing value, bad choice)."""

    def __init__(self, prog: str, message: str, argument=None):
        super().__init__(message)
        self.prog, self._argument = prog, argument

    @property
    def argument(self):
        return self._argument


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are raised (as :class:`UsageError`), not printed and exited."""

    def error(self, message):
        m = re.match(r"argument ([^:]+):", message)
        arg = m.group(1).split("/")[-1] if m else None
        if arg is None:
            m = re.search(r"required: (\S+?)[,\s]|required: (\S+)$", message)
            arg = (m.group(1) or m.group(2)) if m else None
        raise UsageError(self.prog, f"{message} (see {self.prog} --help)", arg)


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
    from .cli_parts._common import output_arg

    output_arg(args.out, "--out", folder=True)
    if args.json:
        import io

        text = io.StringIO()
        _tour(Tour(args.out, text), parts)
        print(json.dumps({"text": text.getvalue().splitlines()}, indent=2))
        return 0
    _tour(Tour(args.out), parts)
    return 0


def _tour(tour, parts) -> None:
    tour.print("tensorlayout: a guided tour of every layout it knows.")
    for mod in parts:
        fn = getattr(mod, "demo", None)
        if fn is not None:
            fn(tour)
    tour.print()
    tour.print("End of the tour.")


def build_parser() -> argparse.ArgumentParser:
    parts = _load_parts()
    parser = Parser(
        prog="tensorlayout",
        description="Where every element of a tensor lives: CPU buffers, OpenCL RGBA images, "
        "NPU local memory; exact conversions; Winograd convolution.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser("demo", help="guided tour of every layout (the main job)")
    demo.add_argument("--out", default="gallery",
                      help="folder for the figures the tour writes (default: %(default)s)")
    demo.add_argument("--json", action="store_true",
                      help="print the tour as JSON: {\"text\": the tour's lines}")
    demo.set_defaults(func=lambda a: _run_demo(a, parts))
    for mod in parts:
        mod.register(sub)
    return parser


def _one_line(text: str) -> str:
    """``text`` with control and line-breaking characters written as escapes, so that an error
    echoing a user's value (``--algorithm=$'\\r'``) stays one line on the terminal.

    >>> _one_line("bad value 'a\\rb'")
    "bad value 'a\\\\rb'"
    """
    return "".join(c if c.isprintable() or c == " " else c.encode("unicode_escape").decode("ascii")
                   for c in text)


def _report(exc: LayoutError, prog: str, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"error": str(exc), "argument": exc.argument}), file=sys.stderr)
    else:
        print(_one_line(f"{prog}: error: {exc}"), file=sys.stderr)
    return 2


def _case_insensitive_command(argv, parser):
    """The first word, if it names a command in another case (``IMAGE`` for ``image``)."""
    names = set()
    for action in parser._subparsers._group_actions if parser._subparsers else ():
        names.update(getattr(action, "choices", {}) or {})
    argv = list(argv)
    for i, word in enumerate(argv):
        if word.startswith("-"):
            continue
        if word not in names and word.lower() in names:
            argv[i] = word.lower()
        break
    return argv


def main(argv=None) -> int:
    """Run the ``tensorlayout`` command line; return the exit status (0, or 2 for bad input).

    >>> main([])                          # the help goes to stderr
    2
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in argv
    parser = build_parser()
    if not argv:
        parser.print_help(sys.stderr)
        return 2
    try:
        args = parser.parse_args(_case_insensitive_command(argv, parser))
    except UsageError as exc:
        return _report(exc, exc.prog, as_json)
    as_json = as_json or bool(getattr(args, "json", False))
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        rc = args.func(args)
        sys.stdout.flush()
    except LayoutError as exc:
        return _report(exc, f"tensorlayout {args.command}", as_json)
    except MemoryError:
        return _report(LayoutError("the arguments ask for more memory than this machine has: "
                                   "make the tensor smaller"), f"tensorlayout {args.command}", as_json)
    except BrokenPipeError:
        # The reader went away (``tensorlayout demo | head -1``): stop quietly, as cat does.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):   # stdout is not a file (captured)
            pass
        return 0
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
