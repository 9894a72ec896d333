"""The event heap orders by time, then kind priority, then push order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bellows.sim.events import EventHeap, Kind


@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from(list(Kind))), max_size=40))
def test_pop_order_is_time_priority_sequence(pushes: list[tuple[int, Kind]]) -> None:
    heap = EventHeap()
    for i, (t, kind) in enumerate(pushes):
        heap.push(float(t), kind, ref=i)
    popped = [heap.pop() for _ in range(len(heap))]
    expected = sorted(range(len(pushes)), key=lambda i: (pushes[i][0], pushes[i][1], i))
    assert [e.ref for e in popped] == expected
    assert heap.peek_time() is None
    assert heap.pushed == len(pushes)


def test_completions_come_before_arrivals_at_the_same_time() -> None:
    heap = EventHeap()
    heap.push(5.0, Kind.ARRIVAL, ref=1)
    heap.push(5.0, Kind.COMPLETION, ref=2)
    heap.push(4.0, Kind.ARRIVAL, ref=3)
    assert [heap.pop().ref for _ in range(3)] == [3, 2, 1]
