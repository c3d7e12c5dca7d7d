"""Collection rules shared by the tests and the doctests of every module."""

import os

import pytest

# Tests compile numba kernels where they are first used (deterministic backends); the
# background compile that users get by default has its own test (tests/test_jit.py).
os.environ.setdefault("TENSORLAYOUT_COMPILE", "wait")


def _opencl_missing():
    try:
        from tensorlayout.opencl import list_devices

        list_devices()
    except Exception as exc:  # noqa: BLE001 - any failure means: no usable OpenCL here
        return str(exc)
    return None


def pytest_collection_modifyitems(config, items):
    """The OpenCL modules' docstring examples need a device: skip them, saying why, where none exists."""
    _skip_simulator_doctests(items)
    doctests = [i for i in items if isinstance(i, pytest.DoctestItem) and ".opencl." in i.name]
    if not doctests:
        return
    reason = _opencl_missing()
    if reason:
        for item in doctests:
            item.add_marker(pytest.mark.skip(reason=f"no OpenCL platform can be had on this machine: {reason}"))


# Modules whose docstring examples run on Sophgo's BM1684 simulator.
SIMULATOR_MODULES = (".npu.cmodel", ".npu.bdc", ".npu.network")


def _simulator_missing():
    try:
        from tensorlayout.npu import cmodel

        cmodel.simulator()
    except Exception as exc:  # noqa: BLE001 - the message says what is missing and how to get it
        return str(exc)
    return None


def _skip_simulator_doctests(items):
    doctests = [i for i in items if isinstance(i, pytest.DoctestItem)
                and any(m in i.name for m in SIMULATOR_MODULES)]
    reason = _simulator_missing() if doctests else None
    if reason:
        for item in doctests:
            item.add_marker(pytest.mark.skip(reason=f"BM1684 simulator not available: {reason}"))
