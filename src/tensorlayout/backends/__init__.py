"""The backends of the network pipeline: each runs a target's schedule.

* :mod:`tensorlayout.backends.cpu`: NumPy kernels (convolutions through the Winograd /
  im2col engine), prepared once per model.

A backend decides nothing that the schedule (:mod:`tensorlayout.schedule`) decides: it binds
kernels to the schedule's steps, allocates what the schedule says and runs.
"""
