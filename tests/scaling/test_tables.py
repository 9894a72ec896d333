"""TSF tables: the vectorized core equals a scalar loop, and facts every table must obey.

Every test here runs twice: with the compiled weighing of candidates (``_batches.c``) and
with the NumPy chunks that run where it is not built, chosen through ``tsf_tables``'s
``compiled`` parameter.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from bellows.jobs import Allocation, JobSpec, SpecError, StepProfile, is_feasible
from bellows.scaling import (
    ClusterProfile,
    LinkCost,
    default_cluster,
    single_gpu_throughput,
    step_time,
    throughput,
    throughput_table,
)
from bellows.scaling import tables as scaling_tables
from bellows.scaling.tables import TsfTables

WEIGHING = {"compiled": True}  # the weighing this module's tables ask for (the fixture sets it)


@pytest.fixture(autouse=True, scope="module", params=["compiled", "numpy chunks"])
def weighing(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each test on both weighings (module-scoped: hypothesis allows no function fixtures)."""
    WEIGHING["compiled"] = request.param == "compiled"
    try:
        yield str(request.param)
    finally:
        WEIGHING["compiled"] = True


def tsf_tables(jobs: list[JobSpec], cluster: ClusterProfile, **kw: object) -> TsfTables:
    """The tables on the weighing this run of the module tests (or ``compiled=`` given)."""
    kw.setdefault("compiled", WEIGHING["compiled"])
    return scaling_tables.tsf_tables(jobs, cluster, **kw)  # type: ignore[arg-type]


def test_the_compiled_weighing_is_built() -> None:
    # pip builds it wherever a C compiler is at hand (setup.py), CI's machine included; a
    # missing build would silently weigh every TSF row in the slower NumPy chunks.
    assert scaling_tables._compiled_best is not None, "bellows.scaling._batches was not built"


FREE = ClusterProfile(LinkCost(0.0, 0.0), LinkCost(0.0, 0.0), source="no communication cost")


@st.composite
def profiles(draw: st.DrawFn) -> StepProfile:
    batches = sorted(draw(st.sets(st.integers(1, 48), min_size=1, max_size=6)))
    # Any positive times, not only increasing ones: noisy real profiles have dips and jumps.
    seconds = [draw(st.floats(0.005, 2.0)) for _ in batches]
    return StepProfile(tuple(batches), tuple(seconds))


@st.composite
def jobs(draw: st.DrawFn) -> JobSpec:
    k_max = draw(st.integers(1, 8))
    m_max = draw(st.integers(1, 40))
    b_min = draw(st.integers(1, 120))
    b_max = draw(st.integers(b_min, 200))
    batch = draw(st.integers(b_min, b_max))
    elastic = draw(st.booleans())
    gpus = draw(st.integers(1, k_max))
    try:
        return JobSpec(
            name="j",
            b_min=b_min,
            b_max=b_max,
            batch_size=batch,
            k_max=k_max,
            m_max=m_max,
            weights=draw(st.integers(1, 200_000_000)),
            work=1e6,
            profile=draw(profiles()),
            elastic=elastic,
            gpus=gpus,
        )
    except SpecError:
        assume(False)
        raise


@st.composite
def clusters(draw: st.DrawFn) -> ClusterProfile:
    def link() -> LinkCost:
        return LinkCost(draw(st.floats(0.0, 0.01)), draw(st.floats(0.0, 2e-8)))

    return ClusterProfile(
        intra_node=link(),
        inter_node=link(),
        overlap=draw(st.sampled_from([1.0, 1.5, draw(st.floats(1.0, 8.0))])),
        gpus_per_node=draw(st.integers(1, 4)),
    )


def scalar_row(job: JobSpec, cluster: ClusterProfile, width: int, fixed: bool) -> list[float]:
    """TSF by brute force: every feasible (k, b) through the scalar ``throughput``."""
    x1 = single_gpu_throughput(job, cluster)
    row = [-math.inf]
    for k in range(1, width + 1):
        if not job.elastic or fixed:
            ok = is_feasible(job, Allocation(k, job.batch_size), fixed_batch=True)
            row.append(throughput(job, k, job.batch_size, cluster) / x1 if ok else -math.inf)
            continue
        best = -math.inf
        for b in range(job.b_min, job.b_max + 1):
            if k <= job.k_max and b % k == 0 and 1 <= b // k <= job.m_max:
                best = max(best, throughput(job, k, b, cluster) / x1)
        row.append(best)
    return row


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    st.lists(jobs(), min_size=1, max_size=5),
    clusters(),
    st.booleans(),
    st.one_of(st.none(), st.integers(-2, 2)),
)
def test_tables_equal_scalar_loop(
    batch: list[JobSpec], cluster: ClusterProfile, fixed: bool, extra: int | None
) -> None:
    # Default width, or narrower / wider than the largest k_max.
    width = None if extra is None else max(1, max(job.k_max for job in batch) + extra)
    tables = tsf_tables(batch, cluster, fixed_batch=fixed, width=width)
    cols = tables.width
    for j, job in enumerate(batch):
        expected = np.array(scalar_row(job, cluster, cols, fixed))
        got = tables.values[j]
        assert np.array_equal(np.isinf(got), np.isinf(expected)), (got, expected)
        finite = np.isfinite(expected)
        np.testing.assert_allclose(got[finite], expected[finite], rtol=1e-9)
        for k in np.flatnonzero(finite):
            b = int(tables.batch[j, k])
            assert is_feasible(job, Allocation(int(k), b), fixed_batch=fixed)
            x = throughput(job, int(k), b, cluster)
            assert tables.throughput[j, k] == pytest.approx(x, rel=1e-9)
        assert np.all(tables.batch[j, ~finite] == 0)
        assert np.all(tables.throughput[j, ~finite] == 0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    st.lists(jobs(), min_size=1, max_size=6),
    clusters(),
    st.sampled_from([1, 7, 50, scaling_tables._CHUNK_ELEMENTS]),
)
def test_compiled_and_chunked_weighing_are_the_same_bits(
    batch: list[JobSpec], cluster: ClusterProfile, elements: int
) -> None:
    # the NumPy path weighs candidates in chunks (one per column at the smallest): ties
    # between chunks keep the earlier (smaller) batch, as the compiled loop's strict > does
    kept = scaling_tables._CHUNK_ELEMENTS
    try:
        compiled = tsf_tables(batch, cluster, fixed_batch=False, compiled=True)
        scaling_tables._CHUNK_ELEMENTS = elements
        cut = tsf_tables(batch, cluster, fixed_batch=False, compiled=False)
    finally:
        scaling_tables._CHUNK_ELEMENTS = kept
    for part in ("values", "batch", "throughput"):
        assert getattr(cut, part).tobytes() == getattr(compiled, part).tobytes(), part


def _weighing_arguments(**changes: object) -> dict[str, object]:
    n, c, cols = 2, 3, 4
    given: dict[str, object] = {
        "cand": np.array([[1, 2, 4], [3, 0, 0]], dtype=np.int64),
        "sizes": np.array([3, 1], dtype=np.int64),
        "t_proc": np.full((n, c), 0.1),
        "t_proc_g": np.full((n, c), 0.1),
        "t_ar": np.zeros((n, cols)),
        "t_ar_g": np.zeros((n, cols)),
        "lo": np.ones((n, cols), dtype=np.int64),
        "hi": np.full((n, cols), 4, dtype=np.int64),
        "feasible": np.ones((n, cols), dtype=bool),
        "g": 1.0,
        "rate": np.full((n, cols), -np.inf),
        "batch": np.zeros((n, cols), dtype=np.int64),
    }
    given.update(changes)
    return given


def test_overlapped_times_are_the_same_bits_in_both_weighings() -> None:
    """With an overlap g != 1 each time is pow(t_proc^g + t_ar^g, 1/g): the NumPy chunks
    must take the C library's pow, as the compiled loop does (NumPy's SIMD power differs
    from it in the last bit on about one value in twenty on CPUs with AVX-512)."""
    best = scaling_tables._compiled_best
    assert best is not None
    rng = np.random.default_rng(7)
    n, c, cols, g = 40, 16, 9, 0.63
    cand = np.tile(np.arange(1, c + 1, dtype=np.int64), (n, 1))
    t_proc = rng.uniform(1e-3, 2.0, (n, c))
    t_ar = rng.uniform(1e-4, 0.5, (n, cols))
    lo = np.ones((n, cols), dtype=np.int64)
    hi = np.full((n, cols), c, dtype=np.int64)
    feasible = np.ones((n, cols), dtype=bool)
    feasible[:, 0] = False
    args = _weighing_arguments(
        cand=cand, sizes=np.full(n, c, dtype=np.int64), t_proc=t_proc, t_proc_g=t_proc**g,
        t_ar=t_ar, t_ar_g=t_ar**g, lo=lo, hi=hi, feasible=feasible, g=g,
        rate=np.full((n, cols), -np.inf), batch=np.zeros((n, cols), dtype=np.int64),
    )  # fmt: skip
    best(*args.values())

    class Cluster:
        overlap = g

    mix = scaling_tables._Mixer(Cluster(), t_ar, t_proc)  # type: ignore[arg-type]
    rate, batch = scaling_tables._weigh_in_chunks(cand, mix, lo=lo, hi=hi, feasible=feasible)
    assert rate.tobytes() == args["rate"].tobytes()  # type: ignore[union-attr]
    assert np.array_equal(batch, args["batch"])  # type: ignore[arg-type]


def _read_only(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


def test_the_compiled_weighing_checks_its_arguments() -> None:
    best = scaling_tables._compiled_best
    assert best is not None
    ok = _weighing_arguments()
    best(*ok.values())
    # the most samples per second: the largest batch in range (k = 0: all 0, the first)
    assert ok["batch"].tolist() == [[1, 4, 4, 4], [3, 3, 3, 3]]  # type: ignore[attr-defined]
    assert ok["rate"][0, 2] == 2 * 4 / 0.1  # type: ignore[index]
    bad: list[tuple[dict[str, object], type[Exception], str]] = [
        ({"sizes": np.array([4, 1], dtype=np.int64)}, ValueError, "sizes[0]"),
        ({"sizes": np.array([3], dtype=np.int64)}, ValueError, "sizes: expected int64 of shape"),
        ({"lo": np.ones((2, 3), dtype=np.int64)}, ValueError, "lo: expected int64 of shape (2, 4)"),
        ({"t_ar": np.zeros((2, 4), dtype=np.float32)}, ValueError, "t_ar: expected float64"),
        ({"feasible": np.ones((2, 4), dtype=np.int64)}, ValueError, "feasible: expected bool"),
        ({"rate": np.full((4, 2), -np.inf).T}, TypeError, "rate: expected a C-contiguous writable"),
        ({"batch": _read_only(np.zeros((2, 4), dtype=np.int64))}, TypeError, "batch"),
        ({"cand": np.array([1, 2], dtype=np.int64)}, ValueError, "cand, rate: expected two"),
        ({"g": 0.0}, ValueError, "g: expected a finite number > 0"),
        ({"g": math.nan}, ValueError, "g: expected a finite number > 0"),
    ]  # fmt: skip
    for changes, error, words in bad:
        with pytest.raises(error, match=re.escape(words)):
            best(*_weighing_arguments(**changes).values())


def job(**changes: object) -> JobSpec:
    spec: dict[str, object] = {
        "name": "resnet",
        "b_min": 32,
        "b_max": 1024,
        "batch_size": 256,
        "k_max": 8,
        "m_max": 128,
        "weights": 25_557_032,
        "work": 1e6,
        "profile": StepProfile((32, 64, 128), (0.1, 0.18, 0.34)),
    }
    spec.update(changes)
    return JobSpec(**spec)  # type: ignore[arg-type]


def test_column_zero_and_beyond_k_max_are_minus_inf() -> None:
    tables = tsf_tables([job(k_max=3)], default_cluster(), fixed_batch=False, width=6)
    assert tables.values.shape == (1, 7)
    assert tables.values[0, 0] == -math.inf
    assert np.all(np.isinf(tables.values[0, 4:]))
    assert np.all(np.isfinite(tables.values[0, 1:4]))


def test_one_gpu_at_the_x1_batch_has_tsf_one() -> None:
    spec = job(b_max=100, batch_size=64, m_max=128)  # x1_batch = 100, a feasible batch on one GPU
    tables = tsf_tables([spec], default_cluster(), fixed_batch=False)
    assert spec.x1_batch == 100
    assert tables.values[0, 1] >= 1.0
    assert tables.batch[0, 1] == 100  # t_proc(m)/m falls up to 128, so the largest batch wins


def test_free_communication_scales_linearly() -> None:
    # With no Allreduce cost and every batch allowed, k GPUs at the best per-GPU batch are
    # exactly k times one GPU.
    spec = job(b_min=1, b_max=8 * 128, m_max=128)
    values = tsf_tables([spec], FREE, fixed_batch=False).values[0]
    np.testing.assert_allclose(values[1:], np.arange(1, 9) * values[1], rtol=1e-12)


def test_elastic_is_never_worse_than_fixed_where_the_fixed_batch_divides() -> None:
    spec = job(batch_size=240)
    elastic = tsf_tables([spec], default_cluster(), fixed_batch=False).values[0]
    fixed = tsf_tables([spec], default_cluster(), fixed_batch=True).values[0]
    for k in range(1, spec.k_max + 1):
        if 240 % k == 0 and 240 // k <= spec.m_max:
            assert elastic[k] >= fixed[k]


def test_communication_makes_tsf_sublinear() -> None:
    spec = job()
    values = tsf_tables([spec], default_cluster(), fixed_batch=False).values[0]
    free = tsf_tables([spec], FREE, fixed_batch=False).values[0]
    assert np.all(values[2:] < free[2:])
    assert values[1] == pytest.approx(free[1])  # one GPU: no Allreduce at all


def test_fixed_batch_charges_the_slowest_gpu() -> None:
    spec = job(batch_size=100, b_min=32, m_max=128)
    cluster = default_cluster()
    tables = tsf_tables([spec], cluster, fixed_batch=True)
    x1 = single_gpu_throughput(spec, cluster)
    # 100 samples on 3 GPUs: the slowest carries ceil(100/3) = 34.
    t = cluster.combine(0.1 + (34 - 32) / 32 * 0.08, cluster.allreduce_seconds(spec.weights, 3))
    assert tables.values[0, 3] == pytest.approx(100 / t / x1, rel=1e-12)
    assert tables.batch[0, 3] == 100
    assert step_time(spec, 3, 100, cluster) == pytest.approx(t, rel=1e-12)


def test_fixed_batch_needs_a_sample_per_gpu_and_memory() -> None:
    spec = job(batch_size=33, b_min=2, m_max=16, k_max=8)
    values = tsf_tables([spec], default_cluster(), fixed_batch=True).values[0]
    assert math.isinf(values[1])  # 33 per GPU > m_max 16
    assert math.isinf(values[2])  # 17 per GPU > m_max 16
    assert np.all(np.isfinite(values[3:9]))


def test_rigid_job_has_one_entry_in_both_policies() -> None:
    spec = job(elastic=False, gpus=4, batch_size=250)
    cluster = default_cluster()
    for fixed in (False, True):
        tables = tsf_tables([spec], cluster, fixed_batch=fixed)
        assert np.flatnonzero(np.isfinite(tables.values[0])).tolist() == [4]
        assert tables.batch[0, 4] == 250
        expected = throughput(spec, 4, 250, cluster) / single_gpu_throughput(spec, cluster)
        assert tables.values[0, 4] == pytest.approx(expected, rel=1e-12)


def test_tables_are_read_only_and_width_is_checked() -> None:
    tables = tsf_tables([job()], default_cluster(), fixed_batch=False)
    with pytest.raises(ValueError, match="read-only"):
        tables.values[0, 1] = 0.0
    with pytest.raises(SpecError, match="width"):
        tsf_tables([job()], default_cluster(), fixed_batch=False, width=0)
    empty = tsf_tables([], default_cluster(), fixed_batch=True, width=3)
    assert empty.values.shape == (0, 4)


def test_throughput_table_matches_scalar() -> None:
    spec = job(k_max=3, m_max=40, b_min=20, b_max=90, batch_size=60)
    cluster = default_cluster()
    grid = throughput_table(spec, cluster)
    assert grid.shape == (4, 41)
    for k in range(4):
        for m in range(41):
            ok = k >= 1 and m >= 1 and 20 <= k * m <= 90
            expected = throughput(spec, k, k * m, cluster) if ok else 0.0
            assert grid[k, m] == pytest.approx(expected, rel=1e-12)
