"""The Bellows training contract, as helpers a PyTorch training script can copy and use.

Bellows halts a job (its pods get SIGTERM and are deleted), changes its number of workers
and its global batch size, and starts it again. A script honours the contract when it

1. reads its world size and rank from the environment the operator writes (``WORLD_SIZE``,
   ``RANK`` for PyTorchJob; ``OMPI_COMM_WORLD_SIZE``/``OMPI_COMM_WORLD_RANK`` or
   ``PMI_SIZE``/``PMI_RANK`` under ``mpirun`` in an MPIJob) and its global batch size from
   the env var its ``bellows.io/batch-size-env`` annotation names (default here
   ``BELLOWS_GLOBAL_BATCH_SIZE``) or the per-GPU one ``bellows.io/local-batch-size-env``
   names (``BELLOWS_LOCAL_BATCH_SIZE``);
2. checkpoints to storage that outlives its pods, on SIGTERM and every few steps, and
   resumes from the newest checkpoint whatever the new world size and batch are;
3. counts progress in samples, not epochs or steps, so that the work is the same at any
   batch size, and feeds every sample of the data stream exactly once per pass; and
4. scales its learning rate with the global batch (linear scaling by default).

Optionally (5.) it reports its progress to Bellows (:class:`ProgressReporter`), so that the
controller learns the job's real speed and restart cost instead of trusting its profile, and
(6.) its gradient noise (:class:`GradientNoise`), so that it learns how much a larger batch
costs in samples (statistical efficiency) and picks batches by goodput.

This file depends only on the standard library and torch (and, for the optional reporter,
the ``nats-py`` client), so it can be copied next to a training script into any image. See
docs/training-contract.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import math
import os
import queue
import random
import re
import signal
import statistics
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist

__all__ = [
    "HALT_EXIT_CODE",
    "Checkpointer",
    "ContractError",
    "ElasticEnv",
    "GradientNoise",
    "HaltSignal",
    "ProgressReporter",
    "SampleStream",
    "scale_lr",
    "shard_bounds",
    "shard_sizes",
    "squared_norm",
]

DEFAULT_BATCH_ENV = "BELLOWS_GLOBAL_BATCH_SIZE"
DEFAULT_LOCAL_BATCH_ENV = "BELLOWS_LOCAL_BATCH_SIZE"
DEFAULT_HOSTFILE = "/etc/mpi/hostfile"
DEFAULT_MASTER_PORT = 29500

HALT_EXIT_CODE = 128 + signal.SIGTERM
"""Exit status after a halt: never 0, so a halted pod is never mistaken for a finished job."""


class ContractError(ValueError):
    """The environment does not say what the contract needs; names the variable and value."""

    def __init__(self, name: str, value: object, valid: str) -> None:
        self.name = name
        super().__init__(f"{name}={value!r} is invalid: expected {valid}")


def _int_env(environ: Mapping[str, str], name: str, *, minimum: int) -> int | None:
    text = environ.get(name)
    if text is None:
        return None
    if not text.strip().isdigit() or int(text) < minimum:
        raise ContractError(name, text, f"an integer >= {minimum}")
    return int(text)


@dataclass(frozen=True)
class ElasticEnv:
    """Where this process stands in the job: its rank, the world and the global batch."""

    world_size: int
    rank: int
    local_rank: int
    master_addr: str
    master_port: int
    global_batch: int

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.world_size:
            raise ContractError("RANK", self.rank, f"in [0, WORLD_SIZE={self.world_size})")
        if self.global_batch < self.world_size:
            # Bellows never gives a job more workers than samples per step (m >= 1).
            raise ContractError(
                "global batch", self.global_batch, f">= the world size ({self.world_size})"
            )

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        batch_env: str = DEFAULT_BATCH_ENV,
        local_batch_env: str = DEFAULT_LOCAL_BATCH_ENV,
        default_batch: int | None = None,
    ) -> ElasticEnv:
        """From the variables the training operator sets on PyTorchJob pods (or torchrun)."""
        env = os.environ if environ is None else environ
        world = _int_env(env, "WORLD_SIZE", minimum=1) or 1
        rank = _int_env(env, "RANK", minimum=0) or 0
        local_rank = _int_env(env, "LOCAL_RANK", minimum=0) or 0
        port = _int_env(env, "MASTER_PORT", minimum=1) or DEFAULT_MASTER_PORT
        batch = _global_batch(env, world, batch_env, local_batch_env, default_batch)
        addr = env.get("MASTER_ADDR", "127.0.0.1")
        return cls(world, rank, local_rank, addr, port, batch)

    @classmethod
    def from_mpi_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        batch_env: str = DEFAULT_BATCH_ENV,
        local_batch_env: str = DEFAULT_LOCAL_BATCH_ENV,
        default_batch: int | None = None,
        hostfile: str = DEFAULT_HOSTFILE,
    ) -> ElasticEnv:
        """From what ``mpirun`` sets (Open MPI, or PMI for MPICH and Intel MPI).

        The rendezvous host is ``MASTER_ADDR`` if set, else the first host of the hostfile
        the MPI Operator writes for the current workers (so it follows every rescale).
        """
        env = os.environ if environ is None else environ
        world = _first_int(env, ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE"), 1) or 1
        rank = _first_int(env, ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "RANK"), 0) or 0
        local = _first_int(env, ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"), 0) or 0
        port = _int_env(env, "MASTER_PORT", minimum=1) or DEFAULT_MASTER_PORT
        addr = env.get("MASTER_ADDR") or _first_host(Path(hostfile))
        batch = _global_batch(env, world, batch_env, local_batch_env, default_batch)
        return cls(world, rank, local, addr, port, batch)

    @property
    def local_batch(self) -> int:
        """Samples this rank processes per step (ranks differ by at most one)."""
        return shard_sizes(self.global_batch, self.world_size)[self.rank]


def _first_int(env: Mapping[str, str], names: tuple[str, ...], minimum: int) -> int | None:
    for name in names:
        value = _int_env(env, name, minimum=minimum)
        if value is not None:
            return value
    return None


def _first_host(hostfile: Path) -> str:
    if not hostfile.is_file():
        raise ContractError("MASTER_ADDR", None, f"set, or a hostfile at {hostfile}")
    for line in hostfile.read_text().splitlines():
        host = line.split("#", 1)[0].split()
        if host:
            return host[0]
    raise ContractError(str(hostfile), "", "at least one host line")


def _global_batch(
    env: Mapping[str, str], world: int, batch_env: str, local_env: str, default: int | None
) -> int:
    batch = _int_env(env, batch_env, minimum=1)
    if batch is not None:
        return batch
    local = _int_env(env, local_env, minimum=1)
    if local is not None:
        return local * world
    if default is not None:
        return default
    raise ContractError(batch_env, None, f"the global batch size (or set {local_env})")


def shard_sizes(global_batch: int, world_size: int) -> list[int]:
    """Samples per rank: as even as possible, the first ``global_batch % world_size`` +1.

    The slowest rank carries ``ceil(global_batch / world_size)``, which is what Bellows'
    time model charges when the batch does not divide evenly.
    """
    base, extra = divmod(global_batch, world_size)
    return [base + (1 if r < extra else 0) for r in range(world_size)]


def shard_bounds(global_batch: int, world_size: int, rank: int) -> tuple[int, int]:
    """``[start, stop)`` of ``rank``'s samples inside one global batch."""
    sizes = shard_sizes(global_batch, world_size)
    start = sum(sizes[:rank])
    return start, start + sizes[rank]


class SampleStream:
    """An endless stream of dataset indices: one seeded permutation per pass (epoch).

    Position ``p`` of the stream is sample ``perm[p // n][p % n]``. Training consumes the
    stream in order, one global batch per step, so the position is just ``samples_seen``:
    resuming at any world size and batch size continues exactly where the job stopped,
    with no sample skipped or repeated.
    """

    def __init__(self, dataset_size: int, seed: int) -> None:
        if dataset_size < 1:
            raise ContractError("dataset_size", dataset_size, "an integer >= 1")
        self.dataset_size = dataset_size
        self.seed = seed
        self._epoch = -1
        self._perm: list[int] = []

    def _permutation(self, epoch: int) -> list[int]:
        if epoch != self._epoch:
            order = list(range(self.dataset_size))
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
            self._epoch, self._perm = epoch, order
        return self._perm

    def indices(self, start: int, count: int) -> list[int]:
        """Dataset indices at stream positions ``[start, start + count)``."""
        out: list[int] = []
        for position in range(start, start + count):
            epoch, offset = divmod(position, self.dataset_size)
            out.append(self._permutation(epoch)[offset])
        return out


def scale_lr(base_lr: float, base_batch: int, batch: int, rule: str = "linear") -> float:
    """Learning rate for global batch ``batch``, given the one tuned at ``base_batch``.

    ``linear`` (Goyal et al. 2017, for SGD): ``lr ∝ batch``; ``sqrt`` (often better for
    Adam-type optimisers): ``lr ∝ sqrt(batch)``; ``none`` keeps ``base_lr``.
    """
    ratio = batch / base_batch
    if rule == "linear":
        return base_lr * ratio
    if rule == "sqrt":
        return base_lr * math.sqrt(ratio)
    if rule == "none":
        return base_lr
    raise ContractError("lr rule", rule, "'linear', 'sqrt' or 'none'")


class Checkpointer:
    """One checkpoint file in a directory that outlives the pods (a shared volume).

    Written atomically (temporary file, then rename) so that a pod killed mid-write
    leaves the previous checkpoint intact.
    """

    def __init__(self, directory: str | os.PathLike[str], name: str = "checkpoint.pt") -> None:
        self.path = Path(directory) / name

    def save(self, state: Mapping[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(self.path.name + ".partial")
        torch.save(dict(state), partial)
        os.replace(partial, self.path)

    def load(self) -> dict[str, Any] | None:
        if not self.path.is_file():
            return None
        state: dict[str, Any] = torch.load(self.path, map_location="cpu", weights_only=False)
        return state


class HaltSignal:
    """Turns SIGTERM (what Kubernetes sends a pod it deletes) into a step-boundary halt.

    The handler only sets a flag; :meth:`agreed` makes every rank stop after the same step
    (one rank may see the signal a step later than another).
    """

    def __init__(self) -> None:
        self.requested = False

    def install(self) -> HaltSignal:
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True

    def agreed(self, device: torch.device | None = None) -> bool:
        """Whether any rank was asked to halt (a MAX all-reduce when distributed).

        ``device`` is where the collective runs: the GPU with NCCL, the CPU with gloo.
        """
        if not (dist.is_available() and dist.is_initialized()):
            return self.requested
        flag = torch.tensor([1 if self.requested else 0], dtype=torch.int32, device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())


def squared_norm(tensors: Any) -> float:
    """The squared L2 norm of ``tensors`` (gradients) together, in float64."""
    total = torch.zeros((), dtype=torch.float64)
    for t in tensors:
        if t is not None:
            total += t.detach().double().pow(2).sum().cpu()
    return float(total)


class GradientNoise:
    """Smoothed, unbiased estimates of ``|G|^2`` and ``tr(Sigma)`` from one step's gradients.

    ``G`` is the true mean gradient, ``Sigma`` the per-sample gradient covariance, so
    ``tr(Sigma) / |G|^2`` is the gradient noise scale in samples (McCandlish et al. 2018,
    appendix A; Pollux's and AdaptDL's estimator). A mean gradient over ``m`` samples has
    ``E|g_m|^2 = |G|^2 + tr(Sigma) / m``: two means over different numbers of samples of the
    same step give both unknowns. Each step, :meth:`update` takes

    * ``small``: the mean over the pieces of ``|g_i|^2``, each ``g_i`` the mean gradient of a
      piece of the batch of ``m_i`` samples (with DDP or MPI each replica's local gradient,
      before the all-reduce; with one replica, two micro-batches);
    * ``inverse``: the mean over the pieces of ``1 / m_i``;
    * ``big``: ``|g_b|^2`` of the mean gradient over the whole global batch of ``batch``
      samples (after the all-reduce);

    and each estimate is an exponential moving average (``smoothing`` per step, bias
    corrected as Adam's moments). :attr:`grad_sqr` is ``None`` until its average is positive
    (one step's estimate may be negative, the average of many rarely is).
    """

    def __init__(self, smoothing: float = 0.95) -> None:
        if not 0.0 <= smoothing < 1.0:
            raise ContractError("smoothing", smoothing, "in [0, 1)")
        self.smoothing = smoothing
        self._sqr = self._var = self._weight = 0.0
        self.steps = 0

    def update(self, small: float, inverse: float, big: float, batch: int) -> None:
        """One step's norms (see the class docstring); a step with one piece is skipped."""
        spread = inverse - 1.0 / batch
        if spread <= 0 or not all(math.isfinite(v) for v in (small, inverse, big)):
            return
        var = max(0.0, (small - big) / spread)  # tr(Sigma)
        sqr = big - var / batch  # |G|^2
        keep = self.smoothing
        self._sqr = keep * self._sqr + (1 - keep) * sqr
        self._var = keep * self._var + (1 - keep) * var
        self._weight = keep * self._weight + (1 - keep)
        self.steps += 1

    @property
    def grad_sqr(self) -> float | None:
        """``|G|^2``, smoothed (``None``: no positive estimate yet)."""
        if self._weight <= 0 or self._sqr <= 0:
            return None
        return self._sqr / self._weight

    @property
    def grad_var(self) -> float | None:
        """``tr(Sigma)``, the per-sample gradient variance, smoothed (with :attr:`grad_sqr`)."""
        if self.grad_sqr is None:
            return None
        return self._var / self._weight

    @property
    def noise_scale(self) -> float | None:
        """``tr(Sigma) / |G|^2``, samples."""
        sqr, var = self.grad_sqr, self.grad_var
        return None if sqr is None or var is None else var / sqr


PROGRESS_URL_ENV = "BELLOWS_PROGRESS_URL"
PROGRESS_QUEUE = 16  # reports waiting to be published; more are dropped
_RECONNECT_S = 5.0  # after a failed connection, drop reports this long before trying again
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_JOB_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


class ProgressReporter:
    """Publishes progress to Bellows on JetStream; never blocks, slows or fails training.

    :meth:`step` only appends to a list and, every ``every_steps`` steps or ``every_s``
    seconds, puts one small report in a bounded queue (a full queue drops it). A daemon thread
    publishes from the queue to ``<prefix>.progress.v1.<namespace>.<job>``; a lost or absent
    server, a missing ``nats`` package or a refused publish cost the job nothing but the
    report (counted in :attr:`dropped`). The first step after the reporter is made is
    reported once as ``job.started`` with the seconds since ``started_at`` (by default the
    moment the reporter was made: make it first thing in the process), the restart cost
    this start actually paid. Create it on one rank (rank 0) only.
    """

    def __init__(
        self,
        *,
        url: str,
        namespace: str,
        name: str,
        prefix: str = "bellows",
        creds: str | None = None,
        inbox: str = "_INBOX",
        every_steps: int = 50,
        every_s: float = 30.0,
        started_at: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url, self.creds, self.inbox = url, creds, inbox
        self.namespace, self.name = namespace, name
        self.subject = f"{prefix}.progress.v1.{namespace}.{name.replace('.', '_')}"
        self.every_steps, self.every_s = every_steps, every_s
        self._clock = clock
        self._started_at = clock() if started_at is None else started_at
        self._window: list[float] = []
        self._last = 0.0
        self._previous: float | None = None
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=PROGRESS_QUEUE)
        self.published = 0
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="bellows-progress", daemon=True)
        self._thread.start()

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **kwargs: Any
    ) -> ProgressReporter | None:
        """A reporter configured by env, or ``None`` when ``BELLOWS_PROGRESS_URL`` is unset.

        ``BELLOWS_PROGRESS_URL`` (server), ``BELLOWS_PROGRESS_CREDS`` (credentials file),
        ``BELLOWS_PROGRESS_PREFIX`` (subject prefix, default ``bellows``),
        ``BELLOWS_PROGRESS_INBOX`` (reply subject prefix, default ``_INBOX``),
        ``BELLOWS_JOB_NAMESPACE`` and ``BELLOWS_JOB_NAME`` (which job: required),
        ``BELLOWS_PROGRESS_EVERY_STEPS`` (default 50), ``BELLOWS_PROGRESS_EVERY_S`` (30).
        """
        env = os.environ if environ is None else environ
        url = env.get(PROGRESS_URL_ENV, "").strip()
        if not url:
            return None
        namespace = env.get("BELLOWS_JOB_NAMESPACE", "").strip()
        name = env.get("BELLOWS_JOB_NAME", "").strip()
        if not _NAMESPACE.fullmatch(namespace):
            raise ContractError("BELLOWS_JOB_NAMESPACE", namespace, "the job's namespace")
        if not _JOB_NAME.fullmatch(name):
            raise ContractError("BELLOWS_JOB_NAME", name, "the job's name")
        every_s_text = env.get("BELLOWS_PROGRESS_EVERY_S", "30")
        try:
            every_s = float(every_s_text)
        except ValueError:
            every_s = math.nan
        if not math.isfinite(every_s) or every_s <= 0:
            raise ContractError("BELLOWS_PROGRESS_EVERY_S", every_s_text, "seconds > 0")
        return cls(
            url=url,
            namespace=namespace,
            name=name,
            prefix=env.get("BELLOWS_PROGRESS_PREFIX", "bellows").strip() or "bellows",
            creds=env.get("BELLOWS_PROGRESS_CREDS", "").strip() or None,
            inbox=env.get("BELLOWS_PROGRESS_INBOX", "").strip() or "_INBOX",
            every_steps=_int_env(env, "BELLOWS_PROGRESS_EVERY_STEPS", minimum=1) or 50,
            every_s=every_s,
            **kwargs,
        )

    def step(
        self,
        samples_seen: int,
        world_size: int,
        global_batch: int,
        seconds: float | None = None,
        *,
        noise: GradientNoise | None = None,
    ) -> None:
        """Record one finished step; now and then queue a report.

        ``seconds`` is the step's time; by default the time since the previous call (the
        first step after a start is then only reported as the start, ``job.started``).
        ``noise``: the job's :class:`GradientNoise`, whose estimates each ``job.progress``
        report then carries (``gradSqr``, ``gradVar``: payload ``bellows.io/v2``).
        """
        now = self._clock()
        fields = {"samplesSeen": samples_seen, "worldSize": world_size, "globalBatch": global_batch}
        if self._previous is None:
            self._offer("job.started", restartSeconds=max(0.0, now - self._started_at), **fields)
            self._last = now  # windows are timed from the first step
        elif seconds is None:
            seconds = now - self._previous
        self._previous = now
        if seconds is not None and math.isfinite(seconds) and seconds > 0:
            self._window.append(seconds)
        if self._window and (
            len(self._window) >= self.every_steps or now - self._last >= self.every_s
        ):
            median = statistics.median(self._window)
            sqr = None if noise is None else noise.grad_sqr
            var = None if noise is None else noise.grad_var
            if sqr is not None and var is not None:
                fields = {**fields, "gradSqr": sqr, "gradVar": var}
            self._offer("job.progress", stepSeconds=median, steps=len(self._window), **fields)
            self._window.clear()
            self._last = now

    def close(self, timeout_s: float = 1.0) -> None:
        """Publish what is queued, for at most ``timeout_s`` seconds, and stop the thread."""
        try:
            self._queue.put(None, timeout=timeout_s)
        except queue.Full:
            return
        self._thread.join(timeout_s)

    def _offer(self, kind: str, **fields: Any) -> None:
        doc = {
            "apiVersion": "bellows.io/v2" if "gradSqr" in fields else "bellows.io/v1",
            "type": kind,
            "namespace": self.namespace,
            "name": self.name,
            "time": datetime.now(UTC).isoformat(),
            **fields,
        }
        try:
            self._queue.put_nowait(json.dumps(doc, separators=(",", ":")).encode())
        except queue.Full:
            self.dropped += 1

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        client: Any = None
        retry_at = 0.0
        try:
            while (payload := self._queue.get()) is not None:
                if client is None and time.monotonic() >= retry_at:
                    client = loop.run_until_complete(self._connect())
                    retry_at = time.monotonic() + _RECONNECT_S
                if client is None:
                    self.dropped += 1
                    continue
                try:
                    loop.run_until_complete(
                        client.jetstream().publish(self.subject, payload, timeout=2.0)
                    )
                    self.published += 1
                except Exception:  # a report is a hint: lose it, never the job
                    self.dropped += 1
        finally:
            if client is not None:
                # closing a broken connection may fail too
                with contextlib.suppress(Exception):
                    loop.run_until_complete(client.close())
            loop.close()

    async def _connect(self) -> Any:
        try:
            nats = importlib.import_module("nats")  # optional: only reporting jobs need it
        except ImportError:
            return None
        options: dict[str, Any] = {
            "inbox_prefix": self.inbox,
            "connect_timeout": 2,
            "max_reconnect_attempts": 3,
            "reconnect_time_wait": 1,
            "allow_reconnect": True,
        }
        if self.creds:
            options["user_credentials"] = self.creds

        async def quiet(*_: Any) -> None:  # the client would print every lost connection
            return None

        options["error_cb"] = options["disconnected_cb"] = quiet
        try:
            return await nats.connect(self.url, **options)
        except Exception:  # no server, wrong credentials: no reports, training goes on
            return None
