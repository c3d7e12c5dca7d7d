"""Helpers shared by the CLI parts: parsing comma lists and printing JSON."""

from __future__ import annotations

import json

from ..errors import LayoutError


def int_list(text: str, name: str) -> tuple[int, ...]:
    """Parse '1,2,3' into (1, 2, 3); a bad item raises LayoutError naming the option."""
    try:
        return tuple(int(t) for t in text.split(",") if t.strip() != "")
    except ValueError:
        raise LayoutError(f"{name} = {text!r} is not allowed: it must be comma-separated integers") from None


def print_json(obj) -> None:
    print(json.dumps(obj, indent=2, default=_default))


def _default(o):
    try:
        import numpy as np

        if isinstance(o, np.integer):
            return int(o)
        if isinstance(o, np.floating):
            return float(o)
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    raise TypeError(type(o))
