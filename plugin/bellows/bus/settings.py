"""How to reach NATS and shape the streams: the ``nats`` section of Bellows' configuration.

Frozen dataclasses validated on construction. ``metadata["doc"]`` on each field is the text
the configuration schema and ``docs/configuration.md`` show. Passwords, tokens and NKey
seeds are held in :class:`Secret`, whose ``repr`` and ``str`` never show the value.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bellows.bus.subjects import validate_prefix
from bellows.jobs import SpecError

__all__ = ["NatsSettings", "Secret", "TlsSettings", "doc"]

_STREAM_NAME = re.compile(r"[A-Za-z0-9_-]+")
_SCHEMES = ("nats", "tls", "ws", "wss")


def doc(text: str, **more: Any) -> dict[str, Any]:
    """Field metadata: the documentation line (and extras) the config schema exports."""
    return {"doc": text, **more}


class Secret:
    """A string that must never be logged: ``repr``/``str`` print a mask."""

    __slots__ = ("_value",)
    MASK = "********"

    def __init__(self, value: str) -> None:
        if not isinstance(value, str) or not value:
            raise SpecError("secret", Secret.MASK, "a non-empty string")
        self._value = value

    def reveal(self) -> str:
        """The value itself, for the one call that needs it (connecting)."""
        return self._value

    def __repr__(self) -> str:
        return f"Secret('{self.MASK}')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True)
class TlsSettings:
    """TLS towards the NATS servers (used when any file is set or a URL says ``tls://``)."""

    ca_file: Path | None = field(default=None, metadata=doc("CA bundle to verify the server"))
    cert_file: Path | None = field(
        default=None, metadata=doc("client certificate (mutual TLS); needs keyFile")
    )
    key_file: Path | None = field(default=None, metadata=doc("client private key"))
    hostname: str | None = field(
        default=None, metadata=doc("server name to verify, if not the URL's host")
    )

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            missing = "key_file" if self.key_file is None else "cert_file"
            raise SpecError(missing, None, "set together with cert_file and key_file")

    @property
    def enabled(self) -> bool:
        return any(f is not None for f in (self.ca_file, self.cert_file))


def _positive(name: str, value: float, *, allow_zero: bool = False) -> None:
    ok = math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        raise SpecError(name, value, "a finite number " + (">= 0" if allow_zero else "> 0"))


@dataclass(frozen=True)
class NatsSettings:
    """NATS servers, authentication, TLS, and the JetStream names Bellows uses."""

    servers: tuple[str, ...] = field(
        default=("nats://127.0.0.1:4222",),
        metadata=doc("server URLs (nats://, tls://, ws://, wss://); comma-separated in env"),
    )
    name: str = field(default="bellows", metadata=doc("client name shown by the server"))
    subject_prefix: str = field(default="bellows", metadata=doc("first tokens of every subject"))
    stream: str = field(default="BELLOWS_EVENTS", metadata=doc("JetStream stream of events"))
    dead_letter_stream: str = field(
        default="BELLOWS_DEADLETTER", metadata=doc("stream that keeps refused messages")
    )
    durable: str = field(
        default="bellows-controller", metadata=doc("durable pull consumer of the controller")
    )
    kv_bucket: str = field(
        default="bellows-bridge", metadata=doc("key-value bucket where the bridge keeps its place")
    )
    duplicate_window_s: float = field(
        default=3600.0, metadata=doc("seconds the stream remembers message ids to drop repeats")
    )
    max_age_s: float = field(
        default=7 * 86400.0, metadata=doc("seconds an event is kept in the stream")
    )
    ack_wait_s: float = field(
        default=30.0, metadata=doc("seconds before an un-acked delivery is sent again")
    )
    max_deliver: int = field(
        default=20, metadata=doc("deliveries of one event before the server gives up on it")
    )
    max_ack_pending: int = field(
        default=20000, metadata=doc("events held un-acked at once (must cover one Δ window)")
    )
    fetch_batch: int = field(default=256, metadata=doc("messages asked for per pull request"))
    connect_timeout_s: float = field(default=5.0, metadata=doc("seconds to wait for a server"))
    user: str | None = field(default=None, metadata=doc("user name (with password)"))
    password: Secret | None = field(
        default=None, metadata=doc("password (secret; prefer env BELLOWS_NATS_PASSWORD)")
    )
    token: Secret | None = field(default=None, metadata=doc("authentication token (secret)"))
    nkey_seed_file: Path | None = field(default=None, metadata=doc("file holding an NKey seed"))
    credentials_file: Path | None = field(
        default=None, metadata=doc("credentials file (user JWT + NKey seed)")
    )
    tls: TlsSettings = field(default_factory=TlsSettings, metadata=doc("TLS options"))

    def __post_init__(self) -> None:
        object.__setattr__(self, "servers", tuple(self.servers))
        if not self.servers:
            raise SpecError("servers", self.servers, "at least one server URL")
        for i, url in enumerate(self.servers):
            parts = urlsplit(url) if isinstance(url, str) else None
            if parts is None or parts.scheme not in _SCHEMES or not parts.hostname:
                raise SpecError(f"servers[{i}]", url, "a URL like nats://host:4222")
            if parts.password:
                # A password inside a URL would end up in logs and process listings.
                raise SpecError(f"servers[{i}]", "<url with password>", "a URL without userinfo")
        validate_prefix(self.subject_prefix)
        for name in ("stream", "dead_letter_stream", "durable", "kv_bucket"):
            value = getattr(self, name)
            if not isinstance(value, str) or not _STREAM_NAME.fullmatch(value):
                raise SpecError(name, value, "letters, digits, '_' or '-'")
        if self.stream == self.dead_letter_stream:
            raise SpecError("dead_letter_stream", self.dead_letter_stream, "a name != stream")
        for name in ("duplicate_window_s", "max_age_s", "ack_wait_s", "connect_timeout_s"):
            _positive(name, getattr(self, name))
        if self.duplicate_window_s > self.max_age_s:
            raise SpecError(
                "duplicate_window_s", self.duplicate_window_s, f"<= max_age_s ({self.max_age_s})"
            )
        for name in ("max_deliver", "max_ack_pending", "fetch_batch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecError(name, value, "an integer >= 1")
        self._check_auth()

    def _check_auth(self) -> None:
        if (self.user is None) != (self.password is None):
            missing = "password" if self.password is None else "user"
            raise SpecError(missing, None, "set together with user and password")
        methods = [
            name
            for name, value in (
                ("user", self.user),
                ("token", self.token),
                ("nkey_seed_file", self.nkey_seed_file),
                ("credentials_file", self.credentials_file),
            )
            if value is not None
        ]
        if len(methods) > 1:
            raise SpecError(
                methods[1], "<set>", f"unset: only one way to authenticate ({methods[0]} is set)"
            )

    @property
    def auth_method(self) -> str:
        """Which authentication is configured (for logs; never the secret itself)."""
        if self.user is not None:
            return "user-password"
        if self.token is not None:
            return "token"
        if self.nkey_seed_file is not None:
            return "nkey"
        if self.credentials_file is not None:
            return "credentials"
        return "none"
