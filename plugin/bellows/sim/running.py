"""Running independent simulations at once: in this process, on local cores, or on Ray.

A :class:`Task` is one unit of work: a module-level function (so that it pickles by name), its
arguments, and the keys of the *shared* objects (traces) it takes first. A runner takes the
tasks and the shared objects and yields each task's :class:`Finished` as it completes, in the
order they complete; callers put them back in their own order.

* :class:`InProcess` runs them one after another in this process (``--workers 1``).
* :class:`LocalPool` runs them on a pool of spawned processes (``--workers N``). Spawned, not
  forked: the optimizer may have loaded JAX, which must not be forked. At most ``workers``
  tasks are in flight, so a worker that dies costs only those, and they run again alone, so
  that only the task that kills its worker is charged for it.
* :class:`RayCluster` runs them as Ray tasks (``--ray ADDRESS``; Ray is the optional extra
  ``bellows[ray]``, imported only here). Each shared object goes into the object store once
  (``ray.put``), tasks receive references, and results stream back with ``ray.wait``.

The same rule everywhere: a task that raises (or whose worker dies) is tried once more; if it
fails again it is reported as failed, with the error, and the run carries on. A task's result
does not depend on where it ran: the functions are pure given their arguments.
"""

from __future__ import annotations

import importlib
import math
import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Protocol

from bellows.inputs import brief

__all__ = [
    "ATTEMPTS",
    "RAY_EXTRA",
    "Finished",
    "InProcess",
    "LocalPool",
    "RayCluster",
    "RayMissingError",
    "RayUnreachableError",
    "Runner",
    "Task",
    "TaskFailedError",
    "collect",
    "default_workers",
    "make_runner",
]

ATTEMPTS = 2
"""Tries per task: a failed task is retried once, then reported as failed."""

RAY_EXTRA = "pip install 'bellows[ray]'"


@dataclass(frozen=True)
class Task:
    """One unit of work: ``function(*shared objects named by shared, *args)``.

    ``cost`` is a rough relative size: parallel runners start the largest tasks first, so that
    a long run does not start last and leave the other workers idle at the end.
    """

    key: str
    function: Callable[..., Any]
    args: tuple[Any, ...] = ()
    shared: tuple[str, ...] = ()
    cost: float = 1.0


@dataclass(frozen=True)
class Finished:
    """A task's result, or the error of its last try (``error`` set, ``value`` None)."""

    key: str
    value: Any = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class TaskFailedError(RuntimeError):
    """Tasks that failed twice; the message names each with its error."""

    def __init__(self, failed: Sequence[Finished]) -> None:
        self.failed = tuple(failed)
        lines = "; ".join(f"{f.key}: {f.error}" for f in self.failed[:5])
        more = f" (and {len(self.failed) - 5} more)" if len(self.failed) > 5 else ""
        super().__init__(f"{len(self.failed)} run(s) failed twice: {lines}{more}")


class RayMissingError(RuntimeError):
    """``--ray`` was asked for, but Ray is not installed."""


class RayUnreachableError(RuntimeError):
    """``--ray ADDRESS`` names no Ray cluster this process can join (or start, for local)."""


class Runner(Protocol):
    """Runs tasks and yields each one's :class:`Finished` as it completes."""

    @property
    def description(self) -> str: ...

    def run(self, tasks: Sequence[Task], shared: Mapping[str, object]) -> Iterator[Finished]: ...


def _check(tasks: Sequence[Task], shared: Mapping[str, object]) -> None:
    keys = [t.key for t in tasks]
    if len(set(keys)) != len(keys):
        raise ValueError("task keys must be unique")
    missing = {k for t in tasks for k in t.shared} - set(shared)
    if missing:
        raise ValueError(f"tasks name shared objects that were not given: {sorted(missing)}")


def _largest_first(tasks: Sequence[Task]) -> list[Task]:
    # stable: equal costs keep the caller's order
    return sorted(tasks, key=lambda t: -t.cost if math.isfinite(t.cost) else 0.0)


def _call(function: Callable[..., Any], *args: Any) -> Any:
    """What a worker runs (module-level, so that it pickles by name)."""
    return function(*args)


def _arguments(task: Task, shared: Mapping[str, object]) -> tuple[Any, ...]:
    return (*(shared[k] for k in task.shared), *task.args)


class InProcess:
    """One task after another, in this process."""

    description = "in this process"

    def run(self, tasks: Sequence[Task], shared: Mapping[str, object]) -> Iterator[Finished]:
        _check(tasks, shared)
        for task in tasks:
            error = ""
            for _ in range(ATTEMPTS):
                try:
                    value = task.function(*_arguments(task, shared))
                except Exception as err:  # a failed task is reported, never the end of a run
                    error = brief(err)
                    continue
                yield Finished(task.key, value)
                break
            else:
                yield Finished(task.key, error=error)


def default_workers() -> int:
    """The cores this process may use (its CPU affinity where the system has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


class LocalPool:
    """Tasks on ``workers`` spawned processes, at most ``workers`` in flight."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.workers = workers

    @property
    def description(self) -> str:
        return f"on {self.workers} local worker processes"

    def _pool(self) -> ProcessPoolExecutor:
        context = multiprocessing.get_context("spawn")
        return ProcessPoolExecutor(max_workers=self.workers, mp_context=context)

    def run(self, tasks: Sequence[Task], shared: Mapping[str, object]) -> Iterator[Finished]:
        _check(tasks, shared)
        queue = deque(_largest_first(tasks))
        tries: dict[str, int] = {}
        suspects: set[str] = set()  # in flight when a worker died: run alone until cleared
        flying: dict[Future[Any], Task] = {}
        pool = self._pool()
        try:
            while queue or flying:
                while queue and self._room(queue[0], flying, suspects):
                    task = queue.popleft()
                    tries[task.key] = tries.get(task.key, 0) + 1
                    args = _arguments(task, shared)
                    flying[pool.submit(_call, task.function, *args)] = task
                done, _ = wait(list(flying), return_when=FIRST_COMPLETED)
                broken = False
                for future in done:
                    error = future.exception()
                    if isinstance(error, BrokenProcessPool):
                        broken = True
                        continue
                    task = flying.pop(future)
                    suspects.discard(task.key)
                    if error is None:
                        yield Finished(task.key, future.result())
                    elif tries[task.key] < ATTEMPTS:
                        queue.appendleft(task)
                    else:
                        yield Finished(task.key, error=brief(error))
                if broken:
                    # A worker died (killed, out of memory, os._exit): the pool cannot say
                    # whose task it ran. Alone in flight, that task was it and spends a try;
                    # else each task in flight runs again, alone, without spending one.
                    hit = list(flying.values())
                    flying.clear()
                    pool.shutdown(wait=False, cancel_futures=True)
                    pool = self._pool()
                    for task in reversed(hit):
                        if len(hit) > 1:
                            tries[task.key] -= 1
                            suspects.add(task.key)
                        if tries[task.key] < ATTEMPTS:
                            queue.appendleft(task)
                        else:
                            yield Finished(task.key, error="its worker process died")
        finally:
            pool.shutdown(wait=not flying, cancel_futures=True)

    def _room(self, task: Task, flying: Mapping[Future[Any], Task], suspects: set[str]) -> bool:
        """Whether ``task`` may start now: a suspect runs alone, others ``workers`` at once."""
        if any(t.key in suspects for t in flying.values()):
            return False
        return not flying if task.key in suspects else len(flying) < self.workers


def _ray() -> Any:
    """The ``ray`` module, imported only when asked for."""
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise RayMissingError(
            f"--ray needs Ray, an optional extra of Bellows: {RAY_EXTRA}"
        ) from None


def _ray_error(err: BaseException) -> str:
    """The task's own exception where Ray carries one (its ``cause``), else Ray's error."""
    cause = getattr(err, "cause", None)
    return brief(cause if isinstance(cause, BaseException) else err)


class RayCluster:
    """Tasks on a Ray cluster: ``address`` is ``auto``, ``host:port``, ``ray://host:port``,
    or ``local`` (a Ray instance started here for this run, on ``workers`` CPUs, else all).

    A process already connected to Ray (a notebook, a test) keeps its connection, whatever
    ``address`` says; otherwise the connection made here is closed at the end of the run.
    """

    def __init__(self, address: str, *, workers: int | None = None) -> None:
        self.ray = _ray()
        self.address = address
        self.workers = workers

    @property
    def description(self) -> str:
        return f"on Ray ({self.address})"

    def _connect(self) -> bool:
        """Connect unless connected; True when this call made the connection."""
        if self.ray.is_initialized():
            return False
        options: dict[str, Any] = {"logging_level": "warning", "log_to_driver": False}
        if self.address == "local":
            options.update(include_dashboard=False, num_cpus=self.workers)
        else:
            options["address"] = self.address
        try:
            self.ray.init(**options)
        except Exception as err:  # ConnectionError, a refused or missing GCS, ...
            raise RayUnreachableError(f"--ray {self.address}: {brief(err)}") from None
        return True

    def run(self, tasks: Sequence[Task], shared: Mapping[str, object]) -> Iterator[Finished]:
        _check(tasks, shared)
        if not tasks:
            return  # nothing to run: no cluster to join
        ray = self.ray
        connected_here = self._connect()
        pending: dict[Any, Task] = {}
        try:
            used = {k for t in tasks for k in t.shared}
            refs = {key: ray.put(shared[key]) for key in sorted(used)}  # each object once
            remote = ray.remote(max_retries=ATTEMPTS - 1, retry_exceptions=True)(_call)
            cpus = int(ray.cluster_resources().get("CPU", 1))
            window = max(4 * cpus, 16)  # enough queued to keep every CPU busy, no more
            queue = deque(_largest_first(tasks))
            while queue or pending:
                while queue and len(pending) < window:
                    task = queue.popleft()
                    args = (*(refs[k] for k in task.shared), *task.args)
                    pending[remote.remote(task.function, *args)] = task
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    task = pending.pop(ref)
                    try:
                        value = ray.get(ref)
                    except Exception as err:  # RayTaskError, a lost worker, ...: after the retry
                        yield Finished(task.key, error=_ray_error(err))
                        continue
                    yield Finished(task.key, value)
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
            if connected_here:
                ray.shutdown()


def make_runner(workers: int | None, ray_address: str | None = None) -> Runner:
    """The runner for ``--workers`` and ``--ray``: Ray when an address is given (``workers``
    CPUs for a ``local`` instance; ``None``: all), else a local pool of ``workers``
    processes, else (one worker, or ``None``) this process."""
    if ray_address:
        return RayCluster(ray_address, workers=workers)
    return LocalPool(workers) if workers is not None and workers > 1 else InProcess()


def collect(
    runner: Runner,
    tasks: Sequence[Task],
    shared: Mapping[str, object],
    *,
    on_done: Callable[[Finished], None] = lambda _: None,
) -> dict[str, Any]:
    """Every task's value by key, ``on_done`` called as each completes; when any failed
    twice, :class:`TaskFailedError` names them all once every other task has finished."""
    values: dict[str, Any] = {}
    failed: list[Finished] = []
    for finished in runner.run(tasks, shared):
        if finished.ok:
            values[finished.key] = finished.value
        else:
            failed.append(finished)
        on_done(finished)
    if failed:
        raise TaskFailedError(failed)
    return values
