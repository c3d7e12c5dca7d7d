"""``tensorlayout npu simulator`` and ``tensorlayout npu plan-conv``: Sophgo's BM1684 simulator."""

from __future__ import annotations

from ..errors import LayoutError
from ._common import print_json


def register(sub) -> None:
    npu = sub.choices.get("npu")
    if npu is None:  # pragma: no cover - the npu part is always present
        return
    cmds = npu.add_subparsers(dest="npu_command", metavar="SUBCOMMAND",
                              title="subcommands (without one, place the tensor of --shape)")
    s = cmds.add_parser(
        "simulator",
        help="find, check or download Sophgo's BM1684 simulator (libcmodel_bm1684.so)",
        description="Say where the BM1684 simulator library is and check that it loads; with "
        "--fetch, download the tpu-mlir==1.30.2 wheel with pip (about 312 MB) and extract only "
        "libcmodel_bm1684.so into the cache folder. TENSORLAYOUT_CMODEL may name an existing copy.",
    )
    s.add_argument("--fetch", action="store_true", help="download and extract it when it is missing")
    s.add_argument("--quiet", action="store_true", help="no pip progress output")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=_simulator)


def _simulator(args) -> int:
    from ..npu import cmodel

    if args.fetch and not cmodel.library_path().is_file():
        if cmodel.ENV in __import__("os").environ:
            raise LayoutError(f"--fetch is not allowed while {cmodel.ENV} names a missing file: "
                              f"unset it to fetch into {cmodel.cache_dir()}")
        cmodel.fetch(quiet=args.quiet)
    sim = cmodel.simulator()
    info = {"library": str(sim.path), "sha256": sim.sha256(), "wheel": cmodel.WHEEL,
            "npus": sim.npus, "lmem_bytes": sim.lmem_bytes,
            "system_base": sim.SYSTEM_BASE, "system_bytes": sim.SYSTEM_BYTES}
    if args.json:
        print_json(info)
        return 0
    print(f"simulator   {info['library']}")
    print(f"from        {cmodel.WHEEL} (sha256 {info['sha256'][:16]}...)")
    print(f"chip        BM1684: {sim.npus} NPUs x {sim.lmem_bytes} bytes of local memory")
    print(f"system      {sim.SYSTEM_BYTES >> 20} MiB at GDMA address {sim.SYSTEM_BASE:#x}")
    return 0
