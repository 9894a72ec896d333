"""Structured logs: JSON or console, library records included, secrets never written."""

from __future__ import annotations

import io
import json
import logging

import structlog

from bellows.bus import Secret
from bellows.service.config import LogFormat, LoggingSettings, LogLevel
from bellows.service.logging import configure_logging


def lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_json_lines_carry_level_logger_time_and_fields():
    out = io.StringIO()
    configure_logging(LoggingSettings(format=LogFormat.JSON), stream=out)
    structlog.get_logger("bellows.test").info("round.done", decisions=3)
    logging.getLogger("nats.aio.client").warning("library says %s", "hello")
    structlog.get_logger("bellows.test").debug("hidden")  # below the level
    records = lines(out)
    assert [r["event"] for r in records] == ["round.done", "library says hello"]
    assert records[0]["level"] == "info"
    assert records[0]["logger"] == "bellows.test"
    assert records[0]["decisions"] == 3
    assert records[0]["timestamp"].endswith("Z")


def test_secrets_never_reach_the_log():
    out = io.StringIO()
    configure_logging(LoggingSettings(format=LogFormat.JSON, level=LogLevel.DEBUG), stream=out)
    log = structlog.get_logger("bellows.test")
    log.info("connect", password="pw-1", settings={"token": "tok-2", "user": "me"})
    log.info("connect", secret=Secret("seed-3"), values=[Secret("seed-4")])
    log.info("fine", passed=True, tokens_seen=None)
    text = out.getvalue()
    for secret in ("pw-1", "tok-2", "seed-3", "seed-4"):
        assert secret not in text
    records = lines(out)
    assert records[0]["settings"]["user"] == "me"
    assert records[2]["passed"] is True


def test_console_format_is_readable_text():
    out = io.StringIO()
    configure_logging(LoggingSettings(format=LogFormat.CONSOLE), stream=out)
    structlog.get_logger("bellows.test").warning("job.rejected", job="team-a/bert")
    text = out.getvalue()
    assert "job.rejected" in text
    assert "job=team-a/bert" in text
    assert not text.lstrip().startswith("{")


def test_auto_is_json_when_not_on_a_terminal():
    out = io.StringIO()
    configure_logging(LoggingSettings(format=LogFormat.AUTO), stream=out)
    structlog.get_logger("bellows.test").info("x")
    assert lines(out)[0]["event"] == "x"
