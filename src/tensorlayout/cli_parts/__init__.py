"""One module per subsystem: ``register(sub)`` adds its subcommands, ``demo(tour)`` its part of the tour."""
