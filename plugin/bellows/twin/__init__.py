"""The digital twin: the live service on an emulated cluster, held against the simulator.

What ``bellows demo`` and the tests run beside the production process, and never ship in
it: the demo itself (:mod:`~bellows.twin.demo`), the replay of a trace as job manifests
(:mod:`~bellows.twin.replay`), emulated progress reports (:mod:`~bellows.twin.emulated_progress`),
jobs that train at another speed than annotated (:mod:`~bellows.twin.wrong_priors`) and the
ledger that turns what the controller did into the simulator's metrics
(:mod:`~bellows.twin.ledger`, a :class:`~bellows.service.observing.ControllerObserver`).

This layer sits between ``bellows.service`` and ``bellows.cli``: it may import the
simulator (``bellows.sim``), the emulated cluster (``bellows.emulator``) and the service;
``bellows.service`` imports none of them (import-linter contracts in ``pyproject.toml``).
"""
