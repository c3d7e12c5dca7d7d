"""The schedule layer of the network pipeline: per target, every decision about a graph.

For each target -- ``cpu``, ``opencl`` (MACE's images), ``npu`` (Sophgo's local memory) --
the schedule decides once what runs where: fusion (activations into the op before them),
views (Reshape, Flatten, Squeeze as layout-only), each tensor's layout on the target,
liveness and memory reuse, and the Winograd tile.  A backend runs a schedule and decides
nothing of its own; ``tensorlayout plan`` prints a schedule, so what it shows is what runs.
Device limits come in as data: nothing here imports a device runtime.
"""

from .common import ELEMENTWISE, IN_PLACE, MOVES, VIEWS, fusions, live_ranges
from .cpu import CpuSchedule, CpuStep, schedule_cpu
from .image_build import schedule_images
from .images import ImageSchedule, ImageTarget
from .winograd import cpu_conv, image_sizes, image_tile

__all__ = ["VIEWS", "MOVES", "ELEMENTWISE", "IN_PLACE", "fusions", "live_ranges",
           "schedule_cpu", "CpuSchedule", "CpuStep", "cpu_conv", "image_tile", "image_sizes",
           "ImageTarget", "ImageSchedule", "schedule_images"]
