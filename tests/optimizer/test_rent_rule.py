"""``auto`` counts compile cost: it rents the NumPy engine per padded shape until what JAX
would have saved reaches one compile, and takes a shape its rule has compiled at once (the
rule is the caller's, passed in)."""

from __future__ import annotations

import numpy as np

from bellows.optimizer.solving import RentRule, padded_shape, solve_rows


def test_rent_until_it_reaches_one_compile_then_buy() -> None:
    rule = RentRule(compile_s=1.0, s_per_cell=0.25, jax_call_s=0.0)
    shape = (8, 8, 16)
    assert [rule.uses_jax(shape, 2) for _ in range(4)] == [False, False, True, True]
    assert rule.spent == {shape: 1.0}
    other = (16, 8, 16)
    assert not rule.uses_jax(other, 2)  # rent is per shape


def test_the_rent_is_what_jax_would_have_saved() -> None:
    # each call rents its NumPy estimate less a JAX dispatch: a call NumPy finishes sooner
    # than that dispatch would be no faster on JAX, however often it comes
    rule = RentRule(compile_s=1.0, s_per_cell=0.25, jax_call_s=0.3)
    small, large = (8, 8, 16), (16, 8, 16)
    assert not any(rule.uses_jax(small, 1) for _ in range(1000))  # 0.25 s < 0.3 s
    assert rule.spent[small] == 0.0
    assert [rule.uses_jax(large, 4) for _ in range(3)] == [False, False, True]  # 0.7 s each
    assert rule.spent[large] == 0.7 + 0.7


def test_a_compiled_shape_is_used_at_once() -> None:
    rule = RentRule(compile_s=1e9)
    rule.mark_compiled((8, 8, 16))
    assert rule.uses_jax((8, 8, 16), 1)
    assert not rule.uses_jax((8, 16, 16), 1)


def test_auto_takes_numpy_for_a_fresh_shape_and_jax_once_it_is_compiled() -> None:
    rng = np.random.default_rng(4)
    rows = np.concatenate([np.full((37, 1), -np.inf), np.sort(rng.random((37, 12)), 1)], 1)
    capacity = 150  # a shape no other test compiles: (40, 12, 160)
    shape = padded_shape(37, 12, capacity)
    rule = RentRule()
    fresh = solve_rows(rows, capacity, method="auto", rent=rule)
    assert fresh.path == "numpy"
    assert shape not in rule.compiled
    forced = solve_rows(rows, capacity, method="dense", rent=rule)  # compiles this shape
    assert shape in rule.compiled
    again = solve_rows(rows, capacity, method="auto", rent=rule)
    assert solve_rows(rows, capacity, method="auto").path == "numpy"  # another caller: rents
    assert again.path == "dense"
    assert np.array_equal(again.gpus, fresh.gpus)
    assert np.array_equal(forced.gpus, fresh.gpus)


def test_inside_compiling_auto_buys_at_once() -> None:
    rule = RentRule(compile_s=1e9)
    with rule.compiling():
        assert rule.uses_jax((8, 8, 16), 1)
    assert not rule.uses_jax((8, 8, 16), 1)
