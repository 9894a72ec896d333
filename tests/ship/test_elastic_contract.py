"""The training-contract helpers in examples/training/elastic.py, without processes."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import REPO

pytest.importorskip("torch")
sys.path.insert(0, str(REPO / "examples" / "training"))
import itertools

import elastic


@given(st.integers(1, 10_000), st.integers(1, 64))
def test_shards_cover_the_batch_and_differ_by_at_most_one(batch: int, world: int) -> None:
    sizes = elastic.shard_sizes(batch, world)
    assert sum(sizes) == batch
    assert max(sizes) == math.ceil(batch / world)
    assert max(sizes) - min(sizes) <= 1
    bounds = [elastic.shard_bounds(batch, world, r) for r in range(world)]
    assert bounds[0][0] == 0
    assert bounds[-1][1] == batch
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))


@given(st.integers(1, 50), st.integers(0, 3), st.lists(st.integers(1, 40), max_size=12))
def test_stream_consumed_in_any_batches_is_each_pass_a_permutation(
    size: int, seed: int, batches: list[int]
) -> None:
    stream = elastic.SampleStream(size, seed)
    position, seen = 0, []
    for batch in batches:
        seen.extend(stream.indices(position, batch))
        position += batch
    assert seen == elastic.SampleStream(size, seed).indices(0, position)
    for start in range(0, len(seen) - size + 1, size):
        assert sorted(seen[start : start + size]) == list(range(size))


def test_stream_passes_are_shuffled_differently() -> None:
    stream = elastic.SampleStream(100, 7)
    assert stream.indices(0, 100) != stream.indices(100, 100)


@pytest.mark.parametrize(
    ("rule", "expected"), [("linear", 0.4), ("sqrt", 0.1 * 2.0), ("none", 0.1)]
)
def test_learning_rate_follows_the_batch(rule: str, expected: float) -> None:
    assert elastic.scale_lr(0.1, 64, 256, rule) == pytest.approx(expected)


def test_unknown_lr_rule_is_refused() -> None:
    with pytest.raises(elastic.ContractError, match="lr rule='cubic'"):
        elastic.scale_lr(0.1, 64, 128, "cubic")


def test_env_from_pytorchjob_variables() -> None:
    env = elastic.ElasticEnv.from_env(
        {
            "WORLD_SIZE": "3",
            "RANK": "2",
            "MASTER_ADDR": "job-master-0",
            "MASTER_PORT": "23456",
            "BELLOWS_GLOBAL_BATCH_SIZE": "100",
        }
    )
    assert (env.world_size, env.rank, env.master_addr, env.master_port) == (
        3,
        2,
        "job-master-0",
        23456,
    )
    assert env.global_batch == 100
    assert env.local_batch == 33  # 34, 33, 33


def test_local_batch_env_is_multiplied_by_the_world() -> None:
    env = elastic.ElasticEnv.from_env(
        {"WORLD_SIZE": "4", "RANK": "0", "BELLOWS_LOCAL_BATCH_SIZE": "16"}
    )
    assert env.global_batch == 64


def test_custom_env_name_from_the_annotation() -> None:
    env = elastic.ElasticEnv.from_env({"GBS": "48"}, batch_env="GBS")
    assert env.global_batch == 48
    assert env.world_size == 1


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({}, "BELLOWS_GLOBAL_BATCH_SIZE=None"),
        ({"BELLOWS_GLOBAL_BATCH_SIZE": "many"}, "BELLOWS_GLOBAL_BATCH_SIZE='many'"),
        ({"BELLOWS_GLOBAL_BATCH_SIZE": "0"}, "integer >= 1"),
        ({"WORLD_SIZE": "2", "RANK": "2", "BELLOWS_GLOBAL_BATCH_SIZE": "8"}, "RANK=2"),
        ({"WORLD_SIZE": "4", "BELLOWS_GLOBAL_BATCH_SIZE": "3"}, "global batch=3"),
    ],
)
def test_bad_environment_is_named(environ: dict[str, str], message: str) -> None:
    with pytest.raises(elastic.ContractError, match=message.replace("(", r"\(")):
        elastic.ElasticEnv.from_env(environ)


def test_mpi_env_meets_at_the_first_hostfile_host(tmp_path: Path) -> None:
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("# written by the MPI Operator\njob-worker-0 slots=1\njob-worker-1\n")
    env = elastic.ElasticEnv.from_mpi_env(
        {
            "OMPI_COMM_WORLD_SIZE": "2",
            "OMPI_COMM_WORLD_RANK": "1",
            "OMPI_COMM_WORLD_LOCAL_RANK": "0",
            "BELLOWS_GLOBAL_BATCH_SIZE": "32",
        },
        hostfile=str(hostfile),
    )
    assert (env.world_size, env.rank, env.master_addr) == (2, 1, "job-worker-0")
    pmi = elastic.ElasticEnv.from_mpi_env(
        {"PMI_SIZE": "4", "PMI_RANK": "3", "MASTER_ADDR": "h", "BELLOWS_LOCAL_BATCH_SIZE": "2"}
    )
    assert (pmi.world_size, pmi.rank, pmi.global_batch) == (4, 3, 8)
    with pytest.raises(elastic.ContractError, match="MASTER_ADDR"):
        elastic.ElasticEnv.from_mpi_env(
            {"OMPI_COMM_WORLD_SIZE": "1", "BELLOWS_GLOBAL_BATCH_SIZE": "1"},
            hostfile=str(tmp_path / "missing"),
        )


def test_checkpoint_is_replaced_atomically(tmp_path: Path) -> None:
    checkpointer = elastic.Checkpointer(tmp_path / "ckpt")
    assert checkpointer.load() is None
    checkpointer.save({"step": 1})
    checkpointer.save({"step": 2})
    loaded = checkpointer.load()
    assert loaded is not None
    assert loaded["step"] == 2
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["checkpoint.pt"]


def test_halt_exit_code_is_never_success() -> None:
    assert elastic.HALT_EXIT_CODE == 143


def test_gradient_noise_recovers_known_gradient_statistics() -> None:
    """Gradients of known mean and per-sample variance: the estimator (pieces of 16 samples
    against their batch of 64) converges to both, whatever the smoothing's start."""
    import numpy as np  # noqa: PLC0415

    rng = np.random.default_rng(0)
    dim, pieces, m = 50, 4, 16
    mean = rng.normal(size=dim) * 0.2
    sqr, var = float(mean @ mean), float(dim * 1.0**2)  # Sigma = I: tr(Sigma) = 50
    noise = elastic.GradientNoise(smoothing=0.99)
    assert noise.grad_sqr is None
    assert noise.grad_var is None
    assert noise.noise_scale is None
    for _ in range(2000):
        samples = mean + rng.normal(size=(pieces, m, dim))
        local = samples.mean(axis=1)
        small = float((local**2).sum(axis=1).mean())
        big = float((samples.reshape(-1, dim).mean(axis=0) ** 2).sum())
        noise.update(small, 1.0 / m, big, pieces * m)
    assert noise.grad_sqr == pytest.approx(sqr, rel=0.25)
    assert noise.grad_var == pytest.approx(var, rel=0.1)
    assert noise.noise_scale == pytest.approx(var / sqr, rel=0.3)


def test_gradient_noise_skips_a_step_of_one_piece() -> None:
    noise = elastic.GradientNoise()
    noise.update(1.0, 1.0 / 8, 1.0, 8)  # one piece: 1/m = 1/b, nothing to tell apart
    assert noise.steps == 0
    assert noise.grad_sqr is None
    with pytest.raises(elastic.ContractError, match="smoothing"):
        elastic.GradientNoise(smoothing=1.0)
