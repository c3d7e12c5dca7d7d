"""The backends of the network pipeline: each runs a target's schedule.

* :mod:`tensorlayout.backends.cpu`: ``CpuProgram``, the CPU schedule's NumPy kernels
  (convolutions through the Winograd / im2col engine), prepared once per model.
* :mod:`tensorlayout.backends.opencl`: ``OpenCLSession``, the image schedule on an OpenCL
  device (allocation, programs, launches, profiling).
* :mod:`tensorlayout.backends.npu`: ``NpuProgram``, the NPU schedule on Sophgo's BM1684
  simulator.

A backend decides nothing that the schedule (:mod:`tensorlayout.schedule`) decides: it binds
kernels to the schedule's steps, allocates what the schedule says and runs.  Each module is
imported only when its runtime is asked for.
"""
