"""The ``bellows`` command line: one module per sub-command group, wired in ``main``."""
