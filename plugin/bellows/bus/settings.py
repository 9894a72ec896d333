"""How to reach NATS and shape the streams: the ``nats`` section of Bellows' configuration.

Frozen dataclasses validated on construction. ``metadata["doc"]`` on each field is the text
the configuration schema and ``docs/configuration.md`` show; a number's field also carries
its valid range (``minimum``, ``maximum``), which :func:`check_bounds` enforces through
:mod:`bellows.inputs` and the schema exports. Passwords, tokens and NKey seeds are held in
:class:`Secret`, whose ``repr`` and ``str`` never show the value.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from bellows.bus.subjects import validate_prefix
from bellows.inputs import SpecError, check_float, check_int, check_name

__all__ = [
    "MAX_SECONDS",
    "NatsSettings",
    "Secret",
    "TlsSettings",
    "bounded",
    "check_bounds",
    "check_server_url",
    "doc",
    "userinfo_free",
]

_STREAM_NAME = re.compile(r"[A-Za-z0-9_-]{1,200}")
# A NATS user or client name: printable, no spaces (the server splits on them).
_CLIENT_NAME = re.compile(r"[!-~]{1,256}")
_SCHEMES = ("nats", "tls", "ws", "wss")
_MAX_SERVERS: Final = 64
_MAX_URL_CHARS: Final = 1024

MAX_SECONDS: Final = 10 * 365 * 86_400.0
"""The longest duration any setting takes (ten years); NATS holds durations in int64 ns."""

_MIB: Final = 1 << 20


def doc(text: str, **more: Any) -> dict[str, Any]:
    """Field metadata: the documentation line (and extras) the config schema exports."""
    return {"doc": text, **more}


def bounded(text: str, *, minimum: float, maximum: float, open_min: bool = False) -> dict[str, Any]:
    """Field metadata of a number: its documentation line and the range it must lie in.

    ``open_min`` excludes ``minimum`` itself (``> 0`` rather than ``>= 0``).
    """
    return doc(text, minimum=minimum, maximum=maximum, open_min=open_min)


def _number_kind(hint: Any) -> type:
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    return int if int in options else float


def check_bounds(settings: object) -> None:
    """Check every number of a settings dataclass against the bounds in its field metadata.

    Integers go through :func:`bellows.inputs.check_int` (a ``bool`` is not one), other
    numbers through :func:`~bellows.inputs.check_float` (finite, stored as ``float``);
    ``None`` passes for optional fields. Raises :class:`SpecError` naming the field.
    """
    hints = typing.get_type_hints(type(settings))
    for f in dataclasses.fields(settings):  # type: ignore[arg-type]
        if "minimum" not in f.metadata:
            continue
        value = getattr(settings, f.name)
        if value is None and type(None) in typing.get_args(hints[f.name]):
            continue
        low, high = f.metadata["minimum"], f.metadata["maximum"]
        if _number_kind(hints[f.name]) is int:
            check_int(f.name, value, minimum=int(low), maximum=int(high))
        else:
            number = check_float(
                f.name, value, minimum=low, maximum=high, open_min=f.metadata["open_min"]
            )
            object.__setattr__(settings, f.name, number)


def userinfo_free(url: str) -> str:
    """``url`` with any ``user[:password]@`` replaced by ``***@`` (for error messages)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    netloc, slash, path = rest.partition("/")
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    return f"{scheme}{sep}{netloc}{slash}{path}"


def check_server_url(field_name: str, url: object) -> str:
    """A NATS server URL without credentials in it, else :class:`SpecError`.

    Userinfo (``nats://TOKEN@host``, ``nats://user:pass@host``) is refused rather than
    redacted: a URL is logged, listed in ``config show`` and seen in process listings, so
    a secret never belongs in one. The error shows the URL with the userinfo masked.
    """
    valid = "a URL like nats://host:4222 (schemes nats, tls, ws, wss)"
    if not isinstance(url, str) or len(url) > _MAX_URL_CHARS:
        raise SpecError(field_name, url, valid)
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
        _ = parts.port  # raises ValueError on a port out of range
    except ValueError:
        raise SpecError(field_name, userinfo_free(url), valid) from None
    if "@" in parts.netloc:
        raise SpecError(
            field_name,
            userinfo_free(url),
            "a URL without userinfo: set nats.user and nats.password, or nats.token "
            "(env BELLOWS_NATS_PASSWORD, BELLOWS_NATS_TOKEN from a Secret), never in the URL",
        )
    if parts.scheme not in _SCHEMES or not hostname or any(c.isspace() for c in url):
        raise SpecError(field_name, url, valid)
    return url


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


@dataclass(frozen=True)
class NatsSettings:
    """NATS servers, authentication, TLS, and the JetStream names and limits Bellows uses."""

    servers: tuple[str, ...] = field(
        default=("nats://127.0.0.1:4222",),
        metadata=doc(
            "server URLs (nats://, tls://, ws://, wss://; no user or token in them); "
            "comma-separated in env"
        ),
    )
    name: str = field(default="bellows", metadata=doc("client name shown by the server"))
    subject_prefix: str = field(default="bellows", metadata=doc("first tokens of every subject"))
    inbox_prefix: str = field(
        default="_INBOX",
        metadata=doc(
            "first tokens of this client's reply subjects; one per NATS user lets the "
            "server keep each user's replies to itself (docs/security.md)"
        ),
    )
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
    learned_bucket: str = field(
        default="bellows-learned",
        metadata=doc(
            "key-value bucket where the controller keeps what it learned of each job "
            "(read by the next leader; only the controller's NATS user may use it)"
        ),
    )
    duplicate_window_s: float = field(
        default=3600.0,
        metadata=bounded(
            "seconds the stream remembers message ids to drop repeats",
            minimum=0.0,
            maximum=MAX_SECONDS,
            open_min=True,
        ),
    )
    max_age_s: float = field(
        default=7 * 86400.0,
        metadata=bounded(
            "seconds an event (or dead letter) is kept in its stream",
            minimum=0.0,
            maximum=MAX_SECONDS,
            open_min=True,
        ),
    )
    max_bytes: int = field(
        default=256 * _MIB,
        metadata=bounded(
            "bytes the events stream may hold on disk; past it the oldest events go",
            minimum=_MIB,
            maximum=1 << 40,
        ),
    )
    max_messages: int = field(
        default=1_000_000,
        metadata=bounded(
            "events the events stream may hold; past it the oldest go",
            minimum=1,
            maximum=10**10,
        ),
    )
    dead_letter_max_bytes: int = field(
        default=64 * _MIB,
        metadata=bounded(
            "bytes the dead-letter stream may hold on disk; past it the oldest go",
            minimum=_MIB,
            maximum=1 << 40,
        ),
    )
    dead_letter_max_messages: int = field(
        default=100_000,
        metadata=bounded(
            "dead letters the dead-letter stream may hold; past it the oldest go",
            minimum=1,
            maximum=10**10,
        ),
    )
    ack_wait_s: float = field(
        default=30.0,
        metadata=bounded(
            "seconds before an un-acked delivery is sent again",
            minimum=0.0,
            maximum=86_400.0,
            open_min=True,
        ),
    )
    max_deliver: int = field(
        default=20,
        metadata=bounded(
            "deliveries of one event before the server gives up on it", minimum=1, maximum=10_000
        ),
    )
    max_ack_pending: int = field(
        default=20000,
        metadata=bounded(
            "events held un-acked at once (must cover one Δ window)",
            minimum=1,
            maximum=10_000_000,
        ),
    )
    fetch_batch: int = field(
        default=256,
        metadata=bounded("messages asked for per pull request", minimum=1, maximum=100_000),
    )
    connect_timeout_s: float = field(
        default=5.0,
        metadata=bounded(
            "seconds to wait for a server", minimum=0.0, maximum=3600.0, open_min=True
        ),
    )
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
        if isinstance(self.servers, str):
            raise SpecError("servers", self.servers, "a list of server URLs")
        object.__setattr__(self, "servers", tuple(self.servers))
        if not 1 <= len(self.servers) <= _MAX_SERVERS:
            raise SpecError("servers", self.servers, f"1 to {_MAX_SERVERS} server URLs")
        for i, url in enumerate(self.servers):
            check_server_url(f"servers[{i}]", url)
        validate_prefix(self.subject_prefix)
        validate_prefix(self.inbox_prefix, field="inbox_prefix")
        for name in ("stream", "dead_letter_stream", "durable", "kv_bucket", "learned_bucket"):
            check_name(name, getattr(self, name), _STREAM_NAME, "letters, digits, '_' or '-'")
        check_name("name", self.name, _CLIENT_NAME, "printable ASCII without spaces")
        if self.stream == self.dead_letter_stream:
            raise SpecError("dead_letter_stream", self.dead_letter_stream, "a name != stream")
        if self.learned_bucket == self.kv_bucket:
            raise SpecError("learned_bucket", self.learned_bucket, "a name != kv_bucket")
        check_bounds(self)
        if self.duplicate_window_s > self.max_age_s:
            raise SpecError(
                "duplicate_window_s", self.duplicate_window_s, f"<= max_age_s ({self.max_age_s})"
            )
        self._check_auth()

    def _check_auth(self) -> None:
        if self.user is not None:
            check_name("user", self.user, _CLIENT_NAME, "printable ASCII without spaces")
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
