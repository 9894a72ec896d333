"""Where an opted-in job's pods report progress: env Bellows writes with the batch.

A job reports its progress (docs/training-contract.md, section 5) when its pods have
``BELLOWS_PROGRESS_URL`` and know which job they are. The controller writes that into the
training containers of every opted-in job it sizes, the way it writes the batch env vars
(:class:`TargetEnv`): the URL and reply prefix as references to the namespace's progress
Secret (``controller.progress.secretName``, which the chart makes in each namespace it lets
report; the references are ``optional``, so a pod of a namespace without one starts and
reports nothing), the job's namespace and name and the subject prefix as values. The
password never enters the job's spec.

These are *defaults*: an entry of that name the owner already wrote (their own NATS, a
``valueFrom`` of their own, ``BELLOWS_PROGRESS_URL=""`` to turn reporting off) is kept as
it is, and Bellows never reads them back to decide anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["PROGRESS_ENV_NAMES", "ProgressEndpoint", "TargetEnv", "defaults_of"]

PROGRESS_ENV_NAMES = (
    "BELLOWS_PROGRESS_URL",
    "BELLOWS_PROGRESS_INBOX",
    "BELLOWS_PROGRESS_PREFIX",
    "BELLOWS_JOB_NAMESPACE",
    "BELLOWS_JOB_NAME",
)


@dataclass(frozen=True)
class ProgressEndpoint:
    """The progress Secret's name in each job namespace (keys ``url`` and ``inbox``) and
    the subjects' prefix (``nats.subjectPrefix``)."""

    secret: str
    prefix: str

    def env(self, namespace: str, name: str) -> dict[str, dict[str, Any]]:
        """The env entries (without their names) that point the job's pods at it."""

        def secret(key: str) -> dict[str, Any]:
            ref = {"name": self.secret, "key": key, "optional": True}
            return {"valueFrom": {"secretKeyRef": ref}}

        url, inbox, prefix, job_namespace, job_name = PROGRESS_ENV_NAMES
        return {
            url: secret("url"),
            inbox: secret("inbox"),
            prefix: {"value": self.prefix},
            job_namespace: {"value": namespace},
            job_name: {"value": name},
        }


class TargetEnv(dict[str, str]):
    """The env a sizing writes: the batch env vars' literal values (this dict, compared with
    what the job holds), and ``defaults``, entries set only in a container that has no entry
    of that name (:class:`ProgressEndpoint`'s)."""

    def __init__(
        self,
        values: Mapping[str, str],
        defaults: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        super().__init__(values)
        self.defaults: dict[str, Mapping[str, Any]] = dict(defaults or {})


def defaults_of(env: Mapping[str, str]) -> Mapping[str, Mapping[str, Any]]:
    """``env``'s defaults (none unless it is a :class:`TargetEnv`)."""
    return env.defaults if isinstance(env, TargetEnv) else {}
