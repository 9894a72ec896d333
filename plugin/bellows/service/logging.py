"""Structured logs: JSON in the cluster, readable on a terminal, secrets never written.

:func:`configure_logging` sets up structlog once per process and routes the standard
``logging`` records of libraries (nats-py, aiohttp, kubernetes) through the same
processors, so every line has one format. :func:`redact_secrets` is a processor that masks
any value held in a :class:`~bellows.bus.settings.Secret` and any key that names a secret.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any, TextIO

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from bellows.bus.settings import Secret
from bellows.service.config import LogFormat, LoggingSettings

__all__ = ["configure_logging", "redact_secrets"]

MASK = Secret.MASK
_SECRET_KEY = re.compile(r"pass(word)?|token|secret|seed|credential|authorization", re.I)


def _mask(value: Any, key: str = "") -> Any:
    if isinstance(value, Secret):
        return MASK
    if key and _SECRET_KEY.search(key) and value is not None and not isinstance(value, bool):
        return MASK
    if isinstance(value, dict):
        return {k: _mask(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_mask(v) for v in value)
    return value


def redact_secrets(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """Mask secrets in every field of a log event (nested dicts and lists included)."""
    for key, value in list(event_dict.items()):
        event_dict[key] = _mask(value, key)
    return event_dict


def _shared_processors() -> list[Processor]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact_secrets,
    ]


def _renderer(settings: LoggingSettings, stream: TextIO) -> Processor:
    fmt = settings.format
    if fmt is LogFormat.AUTO:
        fmt = LogFormat.CONSOLE if stream.isatty() else LogFormat.JSON
    if fmt is LogFormat.JSON:
        return structlog.processors.JSONRenderer()
    return structlog.dev.ConsoleRenderer(colors=stream.isatty())


def configure_logging(settings: LoggingSettings, *, stream: TextIO | None = None) -> None:
    """Send structlog and standard logging to ``stream`` (stderr) in the chosen format."""
    stream = stream or sys.stderr
    level = logging.getLevelNamesMapping()[settings.level.value.upper()]
    shared = _shared_processors()
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            _renderer(settings, stream),
        ],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_bellows", False):
            root.removeHandler(old)
    handler._bellows = True  # type: ignore[attr-defined]  # ours to replace on reconfigure
    root.addHandler(handler)
    root.setLevel(level)
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
