"""The documentation runs: every ``>>>`` example and every command-line example in README.md and
docs/*.md is executed and its output compared with what the page shows.

A command-line example is a line ``$ tensorlayout ...`` in a fenced block (a trailing ``\\``
continues it), followed by the output the page shows, up to the next ``$`` line or the end of
the block; ``...`` in the shown output stands for any text (doctest's ELLIPSIS).  An example
whose output ends in ``error: ...`` (or a JSON error) must exit with status 2, any other with 0.  Plain
``tensorlayout ...`` lines of ``sh`` blocks (no output shown) must exit 0.  Each example runs
in a fresh temporary folder, so the files the examples write land there.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import re
import shlex
from pathlib import Path

import pytest

from tensorlayout.cli import main

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


# ------------------------------------------------------------------------ >>> examples
@pytest.mark.parametrize("page", PAGES[1:], ids=lambda p: p.name)   # README: tests/test_readme.py
def test_python_examples_run_as_shown(page, tmp_path, monkeypatch):
    if ">>>" not in page.read_text(encoding="utf-8"):
        pytest.skip(f"{page.name} has no >>> examples")
    if "tensorlayout.opencl" in page.read_text(encoding="utf-8") and ">>> from tensorlayout.opencl" in \
            page.read_text(encoding="utf-8"):
        _need_opencl()
    monkeypatch.chdir(tmp_path)
    # A code fence ends an example's output, as a blank line does.
    text = "\n".join("" if line.lstrip().startswith("```") else line
                     for line in page.read_text(encoding="utf-8").splitlines())
    test = doctest.DocTestParser().get_doctest(text, {}, page.name, str(page), 0)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report = io.StringIO()
    result = runner.run(test, out=report.write)
    assert result.attempted > 0
    assert result.failed == 0, report.getvalue()


# ------------------------------------------------------------------------ $ examples
def _blocks(text):
    """(first line number, language, lines) of each fenced block."""
    out, cur, start, lang = [], None, 0, ""
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            if cur is None:
                cur, start, lang = [], n + 1, line.strip()[3:].strip()
            else:
                out.append((start, lang, cur))
                cur = None
        elif cur is not None:
            cur.append(line)
    return out


def cli_examples(page: Path):
    """(id, argv, shown output or None) for every command-line example of ``page``."""
    found = []
    for start, lang, lines in _blocks(page.read_text(encoding="utf-8")):
        i = 0
        while i < len(lines):
            line = lines[i]
            shown = None
            if line.startswith("$ tensorlayout"):
                cmd, lineno = line[2:], start + i
                while cmd.rstrip().endswith("\\"):
                    i += 1
                    cmd = cmd.rstrip()[:-1] + " " + lines[i].strip()
                i += 1
                out = []
                while i < len(lines) and not lines[i].startswith("$ "):
                    out.append(lines[i])
                    i += 1
                while out and not out[-1].strip():
                    out.pop()
                shown = "\n".join(out) + "\n"
            elif lang == "sh" and re.match(r"tensorlayout\s", line):
                cmd, lineno = line, start + i
                i += 1
            else:
                i += 1
                continue
            found.append((f"{page.name}:{lineno}", shlex.split(cmd, comments=True)[1:], shown))
    return found


EXAMPLES = [e for page in PAGES for e in cli_examples(page)]

#: The networks the examples name, exported once per session (each export takes seconds).
_EXPORTED: dict = {}


def _need_opencl():
    pytest.importorskip("pyopencl", reason="PyOpenCL is not installed (extra 'opencl')")
    from tensorlayout.errors import OpenCLUnavailable
    from tensorlayout.opencl import get_context

    try:
        get_context()
    except OpenCLUnavailable as exc:
        pytest.skip(f"no OpenCL platform can be had on this machine: {exc}")


def test_the_pages_have_command_line_examples():
    pages = {e[0].split(":")[0] for e in EXAMPLES}
    assert {"README.md", "images.md", "npu.md", "winograd.md", "figures.md", "opencl.md"} <= pages
    assert sum(e[2] is not None for e in EXAMPLES) >= 15


@pytest.mark.parametrize("where,argv,shown", EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_command_line_examples_run_as_shown(where, argv, shown, tmp_path, monkeypatch):
    if argv and (argv[0] == "opencl" or "--runtime" in argv and
                 argv[argv.index("--runtime") + 1:][:1] == ["opencl"]):
        _need_opencl()
    if argv and argv[0] == "compare":
        _need_opencl()          # an opencl side (the default --b)
    monkeypatch.chdir(tmp_path)
    for arg in argv:
        # a model the example names (docs/models.md): a network of that name with random
        # weights, exported here at a small input size
        m = re.fullmatch(r"(resnet18|vgg11|mobilenet_v2|squeezenet1_1|shufflenet_v2)\.onnx", arg)
        if m:
            pytest.importorskip("onnx")
            pytest.importorskip("torch")
            from tensorlayout.model import zoo

            if m.group(1) not in _EXPORTED:
                _EXPORTED[m.group(1)] = zoo.export(m.group(1), size=64)[0]
            (tmp_path / arg).write_bytes(_EXPORTED[m.group(1)])
    if shown is not None and not shown.strip():
        shown = None
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    got = out.getvalue() + err.getvalue()
    if shown is None:
        assert rc == 0, got
        return
    want_rc = 2 if re.search(r'error: |^\{"error": ', shown.strip().splitlines()[-1]) else 0
    assert rc == want_rc, got
    checker = doctest.OutputChecker()
    assert checker.check_output(shown, got, FLAGS), (
        checker.output_difference(doctest.Example("", shown), got, FLAGS))


# ------------------------------------------------------------------------ the op table
def test_the_op_table_of_models_md_is_the_one_the_runtimes_make():
    """docs/models.md holds, between its markers, the table made from the runtimes' own op
    lists (python -m tensorlayout.model.optable docs/models.md rewrites it)."""
    from tensorlayout.model import optable

    text = (ROOT / "docs" / "models.md").read_text(encoding="utf-8")
    start, stop = text.index(optable.BEGIN) + len(optable.BEGIN), text.index(optable.END)
    assert text[start:stop].strip() == optable.markdown()
    assert "| Conv | yes | yes | NPU |" in text     # the table can show a missing op
