"""Shared by the command-line tests: run ``tensorlayout`` in-process, draw random command lines
from a table of commands and options, check how a command line ended."""

from __future__ import annotations

import contextlib
import io

import pytest

from tensorlayout.cli import main
from tensorlayout.cli_parts import _common


def run(*argv):
    """(exit status, stdout, stderr) of ``tensorlayout argv`` run in-process; only -h / --help
    may leave through SystemExit, with status 0."""
    argv = [str(a) for a in argv]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code
            assert rc == 0 and ("-h" in argv or "--help" in argv), (argv, err.getvalue())
    return rc, out.getvalue(), err.getvalue()


def assert_clean_end(argv, rc, err):
    """Exit status 0 or 2, and an exit 2 says exactly one line on stderr."""
    assert rc in (0, 2), (argv, rc, err)
    if rc == 2:
        lines = err.splitlines()
        assert len(lines) == 1 and "error" in lines[0], (argv, err)


def draw_command_line(draw, commands, words):
    """A command line of ``commands[words]`` ({positional, required, opts}; an option's value
    strategy None for a flag): the positional most times, up to five options in any order and
    repeated, each required option most times, a value sometimes written ``--name=value``."""
    import hypothesis.strategies as st

    spec = commands[words]
    argv = list(words)
    if spec.get("positional") is not None and draw(st.integers(0, 5)):
        argv.append(draw(spec["positional"]))
    chosen = draw(st.lists(st.sampled_from(sorted(spec["opts"])), max_size=5))
    chosen += [r for r in spec.get("required", ()) if draw(st.integers(0, 5))]
    for name in chosen:
        value = spec["opts"][name]
        if value is None:
            argv.append(name)
        elif draw(st.integers(0, 4)) == 0:
            argv.append(f"{name}={draw(value)}")
        else:
            argv += [name, draw(value)]
    return argv


@pytest.fixture(scope="module", autouse=True)
def small_allocations():
    """The size check refuses at 4 MiB in the importing module, so that accepted random
    convolutions and layers stay quick."""
    old = _common.MAX_ARRAY_BYTES
    _common.MAX_ARRAY_BYTES = 1 << 22
    yield
    _common.MAX_ARRAY_BYTES = old
