"""Whether Sophgo's BM1684 simulator can be loaded here, for the tests that need it."""

import pytest

from tensorlayout.npu import cmodel

try:
    cmodel.simulator()
    MISSING = None
except cmodel.SimulatorError as exc:
    MISSING = str(exc)

REASON = f"BM1684 simulator not available: {MISSING}"

#: mark for single tests that need the simulator
needs_sim = pytest.mark.skipif(MISSING is not None, reason=REASON)


def skip_module_without_simulator():
    """Skip the calling test module, with one line saying why, when the simulator is missing."""
    if MISSING is not None:
        pytest.skip(REASON, allow_module_level=True)
