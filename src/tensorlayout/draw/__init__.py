"""SVG figures of layouts: NPU local memory, MACE RGBA images, and seed 003's gallery.

Every figure is drawn from the layout code itself, and every block or lane it
draws carries ``data-*`` attributes naming what it holds, so a figure can be
read back and checked.

>>> from tensorlayout.draw import image_figure
>>> image_figure("ARGUMENT", (5,)).count('data-kind="padding"')
3
"""

from .image import IMAGE_FORMULAS, image_figure
from .npu import BLOCK_BYTES, address_figure, footprint_bytes, npu_figure

__all__ = ["npu_figure", "address_figure", "image_figure", "footprint_bytes", "BLOCK_BYTES",
           "IMAGE_FORMULAS", "GALLERY", "write_gallery", "gallery_figures"]


def __getattr__(name):
    if name in ("GALLERY", "write_gallery", "gallery_figures"):
        from . import gallery

        return getattr(gallery, name)
    raise AttributeError(f"module 'tensorlayout.draw' has no attribute {name!r}")
