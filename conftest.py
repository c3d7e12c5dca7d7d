"""Collection rules shared by the tests and the doctests of every module."""

import pytest


def _opencl_missing():
    try:
        from tensorlayout.opencl import list_devices

        list_devices()
    except Exception as exc:  # noqa: BLE001 - any failure means: no usable OpenCL here
        return str(exc)
    return None


def pytest_collection_modifyitems(config, items):
    """The OpenCL modules' docstring examples need a device: skip them, saying why, where none exists."""
    doctests = [i for i in items if isinstance(i, pytest.DoctestItem) and ".opencl." in i.name]
    if not doctests:
        return
    reason = _opencl_missing()
    if reason:
        for item in doctests:
            item.add_marker(pytest.mark.skip(reason=f"no OpenCL platform can be had on this machine: {reason}"))
