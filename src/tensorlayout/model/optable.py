"""The op table of docs/models.md: which runtime runs which ONNX op, made from the runtimes'
own lists (the graph layer's :data:`~tensorlayout.graph.OP_TYPES` for the CPU,
:data:`tensorlayout.backends.opencl.NETWORK_OPS`, the NPU schedule's ops with a BDC or GDMA
form :data:`tensorlayout.schedule.npu.NPU_OPS`).

``python -m tensorlayout.model.optable docs/models.md`` rewrites the table in place, between
its two marker lines; ``tests/test_docs.py`` checks that the committed page holds what
:func:`markdown` makes.

>>> print(markdown().splitlines()[2])
| Abs | yes | | NPU |
"""

from __future__ import annotations

import sys

__all__ = ["BEGIN", "END", "runtime_ops", "markdown", "update"]

BEGIN = "<!-- op table: made by python -m tensorlayout.model.optable docs/models.md -->"
END = "<!-- end of the op table -->"


def runtime_ops() -> dict:
    """``{runtime: set of op types}`` as each runtime lists them."""
    from ..backends.opencl import NETWORK_OPS
    from ..graph import OPS
    from ..schedule.npu import NPU_OPS

    return {"cpu": set(OPS), "opencl": set(NETWORK_OPS), "npu": set(NPU_OPS)}


def markdown() -> str:
    """The table: one row per op, and for each runtime whether it runs the op (the NPU
    runtime runs an op without a BDC or GDMA form on the host)."""
    ops = runtime_ops()
    rows = ["| op | CPU | OpenCL images | NPU (BM1684 simulator) |", "|---|---|---|---|"]
    for op in sorted(set().union(*ops.values())):
        rows.append(f"| {op} | {'yes' if op in ops['cpu'] else ''} | "
                    f"{'yes' if op in ops['opencl'] else ''} | "
                    f"{'NPU' if op in ops['npu'] else 'host'} |".replace("|  |", "| |"))
    return "\n".join(rows)


def update(path) -> bool:
    """Rewrite the table between :data:`BEGIN` and :data:`END` in the page at ``path``;
    whether it changed."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
    new = text[:start] + "\n" + markdown() + "\n" + text[stop:]
    if new != text:
        with open(path, "w", encoding="utf-8") as f:
            f.write(new)
    return new != text


if __name__ == "__main__":
    for page in sys.argv[1:]:
        print(f"{page}: {'rewritten' if update(page) else 'up to date'}")
