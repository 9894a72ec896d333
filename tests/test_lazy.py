"""The packages that re-export their modules' names import them when first used."""

from __future__ import annotations

import subprocess
import sys

import pytest

import bellows.bus
import bellows.kube
from bellows.kube.actuating import Actuator
from bellows.kube.client import KubeApi


def test_reading_status_does_not_import_the_bus_or_the_controller():
    code = (
        "import sys, bellows.kube.statuses, bellows.service.capacity\n"
        "print(sorted(m for m in ('nats', 'bellows.bus.bridging', 'bellows.kube.actuating')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_names_and_submodules_resolve_and_unknown_names_fail():
    assert bellows.kube.Actuator is Actuator
    assert bellows.kube.KubeApi is KubeApi
    assert bellows.bus.NatsSettings.__module__ == "bellows.bus.settings"
    assert bellows.kube.journal.__name__ == "bellows.kube.journal"
    for name in bellows.kube.__all__ + bellows.bus.__all__:
        assert getattr(bellows.kube if name in bellows.kube.__all__ else bellows.bus, name)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = bellows.kube.nothing
