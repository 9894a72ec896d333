"""The CEL subset the emulated API server evaluates (x-kubernetes-validations)."""

from __future__ import annotations

import pytest

from bellows.emulator.cel import CelError, Rules, compile_rule


def holds(rule: str, value: object, old: object = None) -> bool:
    return compile_rule({"rule": rule}).holds(value, old)


def test_the_rules_of_the_pinned_crds_evaluate() -> None:
    one_policy = (
        "[has(self.torch), has(self.mpi), has(self.jax), has(self.xgboost),has(self.flux)]"
        ".filter(x, x).size() <= 1"
    )
    assert holds(one_policy, {"torch": {}})
    assert not holds(one_policy, {"torch": {}, "mpi": {}})
    assert holds("self == oldSelf", {"numNodes": 2}, {"numNodes": 2})
    assert not holds("self == oldSelf", {"numNodes": 3}, {"numNodes": 2})
    name = "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')"
    assert holds(name, {"metadata": {"name": "ab-1"}})
    assert not holds(name, {"metadata": {"name": "ab\n"}})  # Go's $: the end of the text
    assert holds("!self.exists(c, c == 'node')", ["a", "b"])
    assert not holds("!self.exists(c, c == 'node')", ["node"])
    uri = "self == '' || self.matches('^[A-Za-z][A-Za-z0-9+.-]*://.+$')"
    assert holds(uri, "")
    assert holds(uri, "s3://bucket/x")
    assert not holds(uri, "bucket")
    assert holds("self in ['a', 'b']", "b")
    assert holds(
        "self.templates.all(t, !has(t.metadata.namespace))", {"templates": [{"metadata": {}}]}
    )
    assert not holds("has(self.lastUpdatedTime)", {})  # a missing field fails the rule
    assert not holds("self.missing == 1", {})


def test_a_rule_outside_the_subset_fails_at_load() -> None:
    with pytest.raises(CelError):
        compile_rule({"rule": "self.map(x, y, x)"})
    with pytest.raises(CelError):
        compile_rule({"rule": "quantity(self) > 1"})


def test_transition_rules_correlate_map_list_items_by_key() -> None:
    schema = {
        "type": "object",
        "properties": {
            "patches": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["manager"],
                "items": {
                    "type": "object",
                    "properties": {
                        "time": {
                            "type": "string",
                            "x-kubernetes-validations": [
                                {"rule": "self == oldSelf", "message": "immutable"}
                            ],
                        }
                    },
                },
            }
        },
    }
    rules = Rules(schema)
    old = {"patches": [{"manager": "a", "time": "1"}]}
    assert rules.violations({"patches": [{"manager": "a", "time": "1"}]}, old) == []
    assert rules.violations({"patches": [{"manager": "b", "time": "2"}]}, old) == []  # new item
    found = rules.violations({"patches": [{"manager": "a", "time": "2"}]}, old)
    assert found == [("patches[0].time", "2", "immutable")]
    assert rules.violations({"patches": [{"manager": "a", "time": "2"}]}, None) == []  # create
