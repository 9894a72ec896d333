"""The NumPy engine (``method="numpy"``): bit-equal to the reference, compact, JAX-free.

Every test here runs twice: on the compiled layers (``_windowed.c``) and on the NumPy layers
that run where they are not built, chosen through the engine's ``compiled`` parameter.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bellows.optimizer import Infeasible, allocate_reference, solving
from bellows.optimizer import windowed as engine
from bellows.optimizer.errors import NO_FIT, Values, min_gpus
from bellows.optimizer.reference import solve_reference
from bellows.optimizer.windowed import Windows, choice_dtype, windows
from tests.optimizer.brute import benchmark, random_table

Table = np.ndarray


LAYERS = {"compiled": True}  # the layers this module's calls ask for (the fixture sets it)


@pytest.fixture(autouse=True, scope="module", params=["compiled", "numpy layers"])
def layers(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each test on both DP layers (module-scoped: hypothesis allows no function fixtures)."""
    LAYERS["compiled"] = request.param == "compiled"
    try:
        yield str(request.param)
    finally:
        LAYERS["compiled"] = True


def solve_windowed(rows: Values, capacity: int, **kw: object) -> tuple[np.ndarray, float]:
    """The engine on the layers this run of the module tests."""
    return engine.solve_windowed(rows, capacity, compiled=LAYERS["compiled"], **kw)  # type: ignore[arg-type]


def solve_rows(rows: Values, capacity: int, **kw: object) -> solving.Solution:
    """``solve_rows`` with the layers this run of the module tests."""
    return solving.solve_rows(rows, capacity, compiled=LAYERS["compiled"], **kw)  # type: ignore[arg-type]


def test_the_compiled_layers_are_built() -> None:
    # pip builds them wherever a C compiler is at hand (setup.py), CI's machine included; a
    # missing build would silently run every DP on the slower NumPy layers.
    assert engine._compiled_run is not None, "bellows.optimizer._windowed was not built"


BENCHMARK = benchmark()
tsf_table = BENCHMARK.tsf_table  # the benchmark's tables: TSF-like, uniform, all rows alike
uniform_table = BENCHMARK.uniform_table
identical_table = BENCHMARK.identical_table
BANDS = (None, True, False)

# dyadic values tie exactly and often; -inf makes holes, rigid rows and infeasible rows
DYADIC = st.sampled_from([-np.inf, -np.inf, 0.0, 0.5, 1.0, 1.5, 2.5, 4.0])
REAL = st.floats(min_value=-50.0, max_value=50.0, allow_nan=False, allow_infinity=False)


@st.composite
def tables(draw: st.DrawFn) -> tuple[Table, int]:
    jobs = draw(st.integers(1, 9))
    k_max = draw(st.sampled_from([0, 1, 2, 3, 5, 8]))
    cell = draw(st.sampled_from([DYADIC, st.one_of(DYADIC, REAL)]))
    size = jobs * (k_max + 1)
    values = np.array(draw(st.lists(cell, min_size=size, max_size=size))).reshape(jobs, -1)
    for j in range(jobs):
        if draw(st.booleans()) and draw(st.booleans()):  # rigid: one allowed count
            k = draw(st.integers(0, k_max))
            keep = values[j, k] if np.isfinite(values[j, k]) else 1.0
            values[j] = -np.inf
            values[j, k] = keep
    most = int(np.where(np.isfinite(values), np.arange(k_max + 1), 0).max(axis=1).sum())
    capacity = draw(st.integers(0, most + 3))  # from 0 to more than can be used
    return values, capacity


def assert_same(values: Table, capacity: int, bands: bool | None) -> None:
    expected_gpus, expected = solve_reference(values, capacity)
    gpus, objective = solve_windowed(values, capacity, bands=bands)
    assert gpus.dtype == np.int64
    np.testing.assert_array_equal(gpus, expected_gpus)
    assert objective == expected  # bit for bit: the same additions in the same order


@settings(max_examples=400, deadline=None)
@given(tables(), st.sampled_from(BANDS))
def test_equals_the_reference_bit_for_bit(case: tuple[Table, int], bands: bool | None) -> None:
    values, capacity = case
    if int(min_gpus(values).sum()) > capacity:
        with pytest.raises(Infeasible):
            solve_rows(values, capacity, method="numpy")
        return
    assert_same(values, capacity, bands)
    solution = solve_rows(values, capacity, method="numpy")
    assert solution.path == "numpy"
    np.testing.assert_array_equal(solution.gpus, solve_reference(values, capacity)[0])


@pytest.mark.parametrize("dyadic", [True, False])
def test_equals_the_reference_on_larger_random_tables(dyadic: bool) -> None:
    rng = np.random.default_rng(31 + dyadic)
    narrowed = 0
    for _ in range(40):
        jobs = int(rng.integers(10, 80))
        values = random_table(rng, jobs, int(rng.choice([1, 4, 9, 16])), dyadic=dyadic)
        least = min_gpus(values)
        values[least >= NO_FIT, 0] = 0.0  # every row gets a finite count
        needed = int(min_gpus(values).sum())
        capacity = needed + int(rng.integers(0, 4 * jobs))
        for bands in BANDS:
            assert_same(values, capacity, bands)
        window = windows(values, capacity, bands=True)
        reach = windows(values, capacity, bands=False)
        narrowed += int((window.hi - window.lo).sum() < (reach.hi - reach.lo).sum())
    assert narrowed > 10  # the bounds do narrow, and stay exact


@pytest.mark.parametrize(
    ("make", "jobs", "capacity", "k_max"),
    [
        (tsf_table, 300, 1200, 16),
        (uniform_table, 300, 1200, 16),
        (identical_table, 300, 1200, 16),
        (tsf_table, 500, 2048, 32),
    ],
)
def test_equals_the_reference_on_the_benchmark_tables(
    make: Callable[[int, int, np.random.Generator], Table], jobs: int, capacity: int, k_max: int
) -> None:
    values = make(jobs, k_max, np.random.default_rng(jobs * 7919 + capacity))
    for bands in BANDS:
        assert_same(values, capacity, bands)
    np.testing.assert_array_equal(
        solve_rows(values, capacity, method="numpy").gpus, allocate_reference(values, capacity)
    )


@pytest.mark.parametrize(("chunk", "stage"), [(16, 1), (97, 5), (1000, 64)])
def test_small_blocks_and_stages_change_nothing(
    monkeypatch: pytest.MonkeyPatch, chunk: int, stage: int
) -> None:
    # Layers are cut into blocks of CHUNK candidates, choices cast every STAGE states: shrink
    # both so that every layer is cut, on both block layouts, and nothing changes.
    monkeypatch.setattr(engine, "CHUNK", chunk)
    monkeypatch.setattr(engine, "STAGE", stage)
    rng = np.random.default_rng(17)
    for _ in range(15):
        jobs = int(rng.integers(5, 60))
        values = random_table(rng, jobs, int(rng.choice([1, 3, 8, 20])), dyadic=True, holes=0.2)
        values[min_gpus(values) >= NO_FIT, 0] = 0.0
        capacity = int(min_gpus(values).sum()) + int(rng.integers(0, 6 * jobs))
        for bands in BANDS:
            assert_same(values, capacity, bands)


def test_many_counts_keep_two_byte_choices() -> None:
    assert choice_dtype(255) is np.uint8
    assert choice_dtype(256) is np.uint16
    assert choice_dtype(70_000) is np.uint32
    rng = np.random.default_rng(8)
    values = np.sort(rng.integers(0, 40, (6, 301)) / 4.0, axis=1)  # k_max 300, ties
    values[:, 0] = -np.inf
    for capacity in (6, 500, 1000, 1806, 3000):
        for bands in BANDS:
            assert_same(values, capacity, bands)


def test_capacity_zero_and_one_row_and_capacity_that_does_not_bind() -> None:
    optional = np.array([[0.0, 1.0, 1.5], [0.0, 2.0, -np.inf], [0.0, 0.5, 0.5]])
    for capacity in (0, 1, 2, 3, 5, 100):
        for bands in BANDS:
            assert_same(optional, capacity, bands)
            assert_same(optional[:1], capacity, bands)
    assert solve_windowed(optional, 0)[0].tolist() == [0, 0, 0]
    assert solve_windowed(optional, 100)[0].tolist() == [2, 1, 1]  # ties: the fewest GPUs
    assert solve_windowed(optional, 2**30)[0].tolist() == [2, 1, 1]  # buffers: what fits
    assert solve_windowed(np.zeros((0, 3)), 4)[0].shape == (0,)


def test_bounds_that_contradict_themselves_fall_back_to_the_reachable_windows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    values = tsf_table(60, 8, np.random.default_rng(2))
    capacity = 150

    def contradictory(rows: Table, cap: int, margin: float) -> tuple[Table, Table, float]:
        size = rows.shape[0]
        return np.full(size, 10.0 * cap), np.full(size, -1.0), 0.0

    monkeypatch.setattr(engine, "band_bounds", contradictory)
    window = windows(values, capacity, bands=True)
    reach = windows(values, capacity, bands=False)
    assert window.floor == -np.inf
    np.testing.assert_array_equal(window.lo, reach.lo)
    np.testing.assert_array_equal(window.hi, reach.hi)
    assert_same(values, capacity, True)


@pytest.mark.parametrize("reachable", [True, False])
def test_a_band_that_misses_the_optimum_is_caught_and_redone(
    monkeypatch: pytest.MonkeyPatch, reachable: bool
) -> None:
    # As if rounding had beaten the margin: consistent windows that exclude the optimum
    # (and, unless reachable, every allocation).
    values = tsf_table(60, 8, np.random.default_rng(3))
    capacity = 150
    expected_gpus, expected = solve_reference(values, capacity)
    reach = windows(values, capacity, bands=False)
    if reachable:
        wrong = Windows(reach.lo, np.maximum(reach.lo, reach.hi // 2), expected - 1e-6)
    else:
        nowhere = np.zeros_like(reach.lo)  # the first row needs a GPU
        wrong = Windows(nowhere, nowhere, expected - 1e-6)
    assert (np.cumsum(expected_gpus) > wrong.hi).any()  # the optimum is outside
    calls: list[bool | None] = []

    def fake(rows: Table, cap: int, counts: object, *, bands: bool | None) -> Windows:
        calls.append(bands)
        return wrong if bands else reach

    monkeypatch.setattr(engine, "_windows", fake)
    gpus, objective = solve_windowed(values, capacity, bands=True)
    assert calls == [True, False]  # the band, then without it
    np.testing.assert_array_equal(gpus, expected_gpus)
    assert objective == expected


def test_memory_stays_compact_at_a_thousand_jobs_and_ten_thousand_gpus() -> None:
    # Memory is deterministic, unlike time on this machine: wide margins, no flakes.
    values = tsf_table(1000, 64, np.random.default_rng(1000 * 7919 + 10000))
    dense_layers = 1001 * 10001 * 8  # what the reference keeps: ~76 MiB of float64 layers
    tracemalloc.start()
    try:
        gpus, _ = solve_windowed(values, 10000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert gpus.sum() <= 10000
    assert peak < 8 * 2**20  # a few MiB: the band is narrow, choices are one byte
    assert peak < dense_layers / 10


def test_memory_stays_compact_without_the_band() -> None:
    # Without bounds every reachable state keeps a choice: one byte, not an 8-byte float.
    values = uniform_table(400, 8, np.random.default_rng(5))
    capacity = 3000
    reach = windows(values, capacity, bands=False)
    states = int((reach.hi - reach.lo + 1).sum())
    assert states > 400 * 1000  # wide windows
    tracemalloc.start()
    try:
        solve_windowed(values, capacity, bands=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    dense_layers = 401 * (capacity + 1) * 8
    assert peak < states + 2 * 2**20  # the choices plus ~1 MiB of rows and scratch
    assert peak < dense_layers / 3


JAX_FREE = """
import json, sys
import numpy as np
from bellows.optimizer import admit, allocate
rng = np.random.default_rng(0)
values = rng.random((200, 17))
values[:80, 0] = -np.inf
gpus = allocate(values, 600, method="numpy")
admission = admit(values, 450, required=50, method="numpy")
small = allocate(values[:3, :3], 4)  # "auto" on a tiny table: the NumPy engine too
loaded = sorted(
    name for name in sys.modules
    if name.split(".")[0] in ("jax", "jaxlib") or name == "bellows.optimizer.kernels"
)
print(json.dumps([gpus.tolist(), admission.gpus.tolist(), small.tolist(), loaded]))
"""


def test_the_numpy_path_never_imports_jax() -> None:
    result = subprocess.run(
        [sys.executable, "-c", JAX_FREE], capture_output=True, text=True, timeout=120, check=True
    )
    gpus, admitted, small, loaded = json.loads(result.stdout)
    assert loaded == []
    values = np.random.default_rng(0).random((200, 17))
    values[:80, 0] = -np.inf
    assert gpus == allocate_reference(values, 600).tolist()
    assert sum(admitted) <= 450
    assert small == allocate_reference(values[:3, :3], 4).tolist()


def test_the_compiled_layers_refuse_what_would_read_or_write_outside_their_arrays() -> None:
    run = engine._compiled_run
    assert run is not None
    rows = np.array([[-np.inf, 1.0, 2.0], [0.0, 1.0, 1.5]])
    ok = {
        "lo": np.array([1, 1]), "hi": np.array([2, 4]), "firsts": np.array([1, 0]),
        "lasts": np.array([2, 2]), "starts": np.array([0, 2, 6]),
    }  # fmt: skip

    def call(**change: object) -> tuple[bool, float]:
        args = {**ok, **change}
        choices = args.pop("choices", np.zeros(6, dtype=np.uint8))
        gpus = args.pop("gpus", np.zeros(2, dtype=np.int64))
        table = args.pop("rows", rows)
        order = ("lo", "hi", "firsts", "lasts", "starts")
        return run(table, *(args[name] for name in order), choices, gpus)

    found, objective = call()
    assert found
    assert objective == 3.5  # 2 + 1.5: both rows at their best
    bad: list[dict[str, object]] = [
        {"lo": np.array([3, 1])},  # lo > hi
        {"lo": np.array([-1, 1]), "starts": np.array([0, 4, 8])},  # a negative window
        {"starts": np.array([0, 2, 7])},  # choices do not match the windows
        {"lasts": np.array([3, 2])},  # a count past the row
        {"firsts": np.array([-1, 0])},
        {"hi": np.array([2, 4, 5])},  # wrong length
        {"lo": np.array([1.0, 1.0])},  # not int64
        {"rows": rows.astype(np.float32)},
        {"rows": np.asfortranarray(np.ones((2, 3)))[:, :2]},  # not C-contiguous
        {"choices": np.zeros(6, dtype=np.uint64)},  # 8-byte choices
        {"choices": np.zeros(5, dtype=np.uint8)},  # fewer choices than states
    ]
    for change in bad:
        with pytest.raises((ValueError, TypeError)):
            call(**change)
    frozen = np.zeros(6, dtype=np.uint8)
    frozen.flags.writeable = False
    with pytest.raises((ValueError, TypeError)):
        call(choices=frozen)
