"""The NATS subject layout: where each event, dead letter and resume point lives.

Pure string functions, documented in ``docs/events.md``::

    <prefix>.events.v<N>.<namespace>.<kind>.<name>.<event>   arrival / completion events
    <prefix>.deadletter.<code>                               events the controller refused

``<kind>`` is ``pytorchjob`` or ``mpijob`` and ``<event>`` is ``arrived`` or ``completed``.
A job name may contain dots (a DNS-1123 subdomain) but a subject token may not, so dots in
names become underscores, which a Kubernetes name never holds: the mapping is reversible.

Subjects route and filter, and the stream's permissions and the controller's namespace
filter act on them; the payload is what the controller acts on. So the consumer accepts an
event only where both name the same job (:func:`subject_mismatch`): a payload for ``team-b``
published on a ``team-a`` subject would otherwise pass a filter meant to keep it out.
"""

from __future__ import annotations

import re

from bellows.bus.codec import SCHEMA_VERSION
from bellows.bus.events import Event, EventType
from bellows.inputs import SpecError, shown
from bellows.refs import JobKind

__all__ = [
    "EVENT_TOKENS",
    "dead_letter_subject",
    "dead_letter_wildcard",
    "event_subject",
    "events_wildcard",
    "name_from_token",
    "name_token",
    "namespace_filter",
    "subject_mismatch",
    "validate_prefix",
]

EVENT_TOKENS: dict[EventType, str] = {
    EventType.ARRIVED: "arrived",
    EventType.COMPLETED: "completed",
}

_KIND_TOKENS: dict[JobKind, str] = {kind: kind.value.lower() for kind in JobKind}

# A prefix is one or more subject tokens; wildcards and whitespace would change routing.
_PREFIX = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")


def validate_prefix(prefix: str, *, field: str = "subject_prefix") -> str:
    """``prefix`` if it is a valid literal subject prefix, else :class:`SpecError`."""
    if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
        raise SpecError(field, prefix, "dot-separated tokens of letters, digits, '_' or '-'")
    return prefix


def name_token(name: str) -> str:
    """A Kubernetes name as one subject token (dots become underscores)."""
    return name.replace(".", "_")


def name_from_token(token: str) -> str:
    """The inverse of :func:`name_token`."""
    return token.replace("_", ".")


def event_subject(prefix: str, event: Event, *, version: int = SCHEMA_VERSION) -> str:
    """The subject ``event`` is published on."""
    job = event.job
    return ".".join(
        (
            prefix,
            "events",
            f"v{version}",
            job.namespace,
            _KIND_TOKENS[job.kind],
            name_token(job.name),
            EVENT_TOKENS[event.type],
        )
    )


def subject_mismatch(prefix: str, subject: str, event: Event) -> str | None:
    """Why ``subject`` is not where ``event`` belongs (``None`` when it is).

    The reason names each part (version, namespace, kind, name, event type) that the subject
    and the payload disagree on, with both values, truncated.
    """
    expected = event_subject(prefix, event)
    if subject == expected:
        return None
    head = f"{prefix}.events."
    tokens = subject[len(head) :].split(".") if subject.startswith(head) else []
    if len(tokens) != len(_PARTS):
        return (
            f"subject {shown(subject)} is not an event subject: expected "
            f"{head}v<N>.<namespace>.<kind>.<name>.<event>, here {shown(expected)}"
        )
    wanted = expected[len(head) :].split(".")
    differences = [
        f"{part} {shown(got)} in the subject but {shown(want)} in the payload"
        for part, got, want in zip(_PARTS, tokens, wanted, strict=True)
        if got != want
    ]
    return f"subject and payload name different jobs: {'; '.join(differences)}"


_PARTS = ("version", "namespace", "kind", "name", "event")


def events_wildcard(prefix: str) -> str:
    """Every event subject of every schema version (what the events stream captures).

    Versions the consumer does not understand still land in the stream, so that they reach
    the dead-letter subject with a reason instead of vanishing.
    """
    return f"{prefix}.events.>"


def namespace_filter(prefix: str, namespace: str) -> str:
    """Every event of one namespace, any version (for a controller that watches a few)."""
    return f"{prefix}.events.*.{namespace}.>"


def dead_letter_subject(prefix: str, code: str) -> str:
    """Where a refused message goes; ``code`` says why (e.g. ``malformed_json``)."""
    return f"{prefix}.deadletter.{code}"


def dead_letter_wildcard(prefix: str) -> str:
    """Every dead-letter subject (what the dead-letter stream captures)."""
    return f"{prefix}.deadletter.>"
