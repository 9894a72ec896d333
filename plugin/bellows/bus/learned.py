"""The controller's learned state in a JetStream key-value bucket (``nats.learnedBucket``).

One value per job, under the job's key (``<kind>/<namespace>/<name>``, which NATS takes as a
key as it is); the bytes are :mod:`bellows.service.learned_state`'s, this module only keeps
them. The bucket is created by :func:`bellows.bus.streams.ensure_learned_kv`.
"""

from __future__ import annotations

import contextlib
from typing import Final

from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

__all__ = ["LOAD_WAIT_S", "KvLearnedStore"]

LOAD_WAIT_S: Final = 10.0  # the longest wait for the next record while loading


class KvLearnedStore:
    """:class:`bellows.service.memory.LearnedStore` in a key-value bucket."""

    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv

    async def load(self) -> dict[str, bytes]:
        """Every record, by job (one ordered pass over the bucket; deleted ones skipped).

        Read up to the bucket's last revision at the start, not only to the watcher's "no
        more" marker: nats-py can put that marker in too early, before values already on
        their way (nats-io/nats.py#842), which loaded no record at all now and then on a
        busy machine. Deletes are read too (they may be the last revision), then dropped."""
        last = (await self._kv.status()).stream_info.state.last_seq
        if not last:
            return {}
        watcher = await self._kv.watchall()
        records: dict[str, bytes] = {}
        seen = 0
        try:
            while seen < last:
                entry = await watcher.updates(timeout=LOAD_WAIT_S)  # type: ignore[no-untyped-call]
                if entry is None:  # "the values there were are read": maybe too early
                    continue
                seen = max(seen, entry.revision or 0)
                if entry.operation is None and entry.value:
                    records[entry.key] = entry.value
                else:  # a delete or a purge
                    records.pop(entry.key, None)
            return records
        finally:
            with contextlib.suppress(Exception):
                await watcher.stop()  # type: ignore[no-untyped-call]

    async def save(self, job: str, record: bytes) -> None:
        await self._kv.put(job, record)

    async def delete(self, job: str) -> None:
        with contextlib.suppress(KeyNotFoundError):
            await self._kv.delete(job)
