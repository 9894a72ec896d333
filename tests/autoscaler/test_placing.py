"""The one placement rule (``bellows.autoscaler.placing.best_fit``): the fewest nodes the free
GPUs allow, the fullest first; the same placements as the simulator's nodes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bellows.autoscaler.placing import best_fit
from bellows.jobs import SpecError
from bellows.sim.nodes import Nodes


def test_a_job_that_fits_one_node_takes_the_fullest_that_holds_it() -> None:
    free = {"a": 8, "b": 3, "c": 4, "d": 4}
    assert best_fit(free, 4) == {"c": 4}  # c and d tie: the first by name
    assert best_fit(free, 3) == {"b": 3}
    assert best_fit(free, 5) == {"a": 5}


def test_a_job_no_node_holds_takes_the_emptiest_first() -> None:
    assert best_fit({"a": 2, "b": 3, "c": 1}, 5) == {"a": 2, "b": 3}
    assert best_fit({"a": 2, "b": 3, "c": 1}, 6) == {"a": 2, "b": 3, "c": 1}
    assert best_fit({"a": 2, "b": 3}, 6) is None


def test_room_is_counted_in_whole_pods() -> None:
    # pods of 2 GPUs: a node with 3 free holds one of them
    assert best_fit({"a": 3, "b": 4}, 2, gpus_per_pod=2) == {"b": 4}
    assert best_fit({"a": 3, "b": 3}, 2, gpus_per_pod=2) == {"a": 2, "b": 2}
    assert best_fit({"a": 3, "b": 1}, 2, gpus_per_pod=2) is None


@pytest.mark.parametrize(("pods", "per_pod"), [(0, 1), (1, 0), (True, 1), (1.5, 1)])
def test_bad_sizes_name_their_field(pods: object, per_pod: object) -> None:
    with pytest.raises(SpecError):
        best_fit({"a": 4}, pods, per_pod)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(
    per_node=st.integers(1, 8),
    taken=st.lists(st.integers(0, 8), min_size=1, max_size=12),
    data=st.data(),
)
def test_the_same_placement_as_the_simulators_nodes(
    per_node: int, taken: list[int], data: st.DataObject
) -> None:
    """On uniform nodes, one GPU a pod: the GPUs taken on each node are those the simulator
    takes (ties between nodes of the same free count aside: compared as multisets)."""
    taken = [min(t, per_node) for t in taken]
    nodes = Nodes(per_node * len(taken), per_node)
    for node, gpus in enumerate(taken):
        if gpus:
            nodes.take(((node, gpus),))
    free = {f"n{i:02d}": per_node - t for i, t in enumerate(taken)}
    total = sum(free.values())
    if total == 0:
        assert best_fit(free, 1) is None
        return
    gpus = data.draw(st.integers(1, total))
    ours = best_fit(free, gpus)
    assert ours is not None
    theirs = nodes.place(gpus)
    assert sorted(ours.values()) == sorted(g for _, g in theirs)
    assert sum(ours.values()) == gpus
