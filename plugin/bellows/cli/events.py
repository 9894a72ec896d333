"""``bellows events``: publish a job event (for pipeline steps) and print the event schema.

:mod:`bellows.bus` (the NATS client) is imported when a command runs, not at ``--help``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from bellows.cli.choices import EVENT_TYPES, JOB_KINDS, OUTCOMES
from bellows.cli.config import config_options, load_from_cli
from bellows.cli.params import JsonFile
from bellows.jobs import SpecError

if TYPE_CHECKING:
    from bellows.bus import Event, JobRef

__all__ = ["events"]


@click.group("events")
def events() -> None:
    """Job arrival and completion events on NATS JetStream."""


@events.command("schema")
def schema() -> None:
    """Print the JSON Schema of the current event version."""
    from bellows.bus.codec import event_schema  # lazy, see the docstring

    click.echo(json.dumps(event_schema(), indent=2))


def _build(
    *,
    event_type: str,
    ref: JobRef,
    when: datetime,
    resource_version: str | None,
    source: str,
    outcome: str | None,
    spec: dict[str, Any] | None,
) -> Event:
    from bellows.bus import EventType, JobArrived, JobCompleted, Outcome

    if EventType(event_type) is EventType.ARRIVED:
        return JobArrived(ref, when, resource_version, source, spec)
    if outcome is None:
        raise click.UsageError("--outcome is required for job.completed")
    return JobCompleted(ref, when, Outcome(outcome), resource_version, source)


@events.command("publish")
@click.option("--type", "event_type", type=click.Choice(EVENT_TYPES), required=True)
@click.option("--kind", type=click.Choice(JOB_KINDS), required=True)
@click.option("--namespace", required=True)
@click.option("--name", required=True)
@click.option("--uid", required=True, help="metadata.uid of the job (the dedupe key)")
@click.option("--resource-version", default=None, help="metadata.resourceVersion, if known")
@click.option("--outcome", type=click.Choice(OUTCOMES), default=None)
@click.option(
    "--time",
    "when",
    type=click.DateTime(["%Y-%m-%dT%H:%M:%S%z"]),
    default=None,
    help="When it happened, e.g. 2025-05-01T12:00:00+0000 (default: now)",
)
@click.option("--source", default="pipeline", show_default=True, help="who publishes")
@click.option(
    "--spec-file",
    "spec",
    type=JsonFile(max_bytes=64 * 1024, max_depth=8, mapping=True),
    default=None,
    help="JSON object with the job's Bellows settings (job.arrived only)",
)
@config_options
def publish(  # click passes every option by keyword
    *,
    event_type: str,
    kind: str,
    namespace: str,
    name: str,
    uid: str,
    resource_version: str | None,
    outcome: str | None,
    when: datetime | None,
    source: str,
    spec: dict[str, Any] | None,
    config_file: Path | None,
    overrides: tuple[str, ...],
) -> None:
    """Publish one event; a repeat of the same fact (uid, type) is dropped by the stream."""
    import asyncio  # lazy, see the docstring

    from bellows.bus import JobKind, JobRef, publish_events

    settings = load_from_cli(config_file, overrides)
    try:
        ref = JobRef(JobKind(kind), namespace, name, uid)
        event = _build(
            event_type=event_type,
            ref=ref,
            when=when or datetime.now(UTC),
            resource_version=resource_version,
            source=source,
            outcome=outcome,
            spec=spec,
        )
    except SpecError as exc:
        raise click.UsageError(str(exc)) from None
    (result,) = asyncio.run(publish_events(settings.nats, [event]))
    click.echo(
        json.dumps(
            {
                "subject": result.subject,
                "msgId": result.msg_id,
                "sequence": result.sequence,
                "duplicate": result.duplicate,
            }
        )
    )
