"""Opening a NATS connection from :class:`NatsSettings`: authentication, TLS, reconnects.

The secrets leave their :class:`Secret` wrapper only inside :func:`connect_options`, whose
result goes straight to ``nats.connect`` and is never logged.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import nats
import structlog
from nats.aio.client import Client

from bellows.bus.settings import NatsSettings, TlsSettings, userinfo_free

__all__ = ["NatsUnreachableError", "connect", "connect_options", "tls_context"]

_log = structlog.get_logger("bellows.bus")


class NatsUnreachableError(ConnectionError):
    """No NATS server of the settings answered the first connect; the message names them."""


def tls_context(tls: TlsSettings) -> ssl.SSLContext:
    """A client TLS context that verifies the server (and presents a certificate if set)."""
    context = ssl.create_default_context(
        cafile=str(tls.ca_file) if tls.ca_file is not None else None
    )
    if tls.cert_file is not None and tls.key_file is not None:
        context.load_cert_chain(str(tls.cert_file), str(tls.key_file))
    return context


def connect_options(settings: NatsSettings, *, reconnect_wait_s: float = 1.0) -> dict[str, Any]:
    """Keyword arguments for ``nats.connect`` (holds secrets: do not log the result)."""
    options: dict[str, Any] = {
        "servers": list(settings.servers),
        "name": settings.name,
        "connect_timeout": settings.connect_timeout_s,
        "allow_reconnect": True,
        # A controller outlives any one server restart: keep trying, never give up.
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": reconnect_wait_s,
        # Replies (JetStream acks, fetched messages, API answers) come to this prefix; one
        # per NATS user lets the server's permissions keep them from every other user.
        "inbox_prefix": settings.inbox_prefix,
    }
    if settings.user is not None and settings.password is not None:
        options["user"] = settings.user
        options["password"] = settings.password.reveal()
    if settings.token is not None:
        options["token"] = settings.token.reveal()
    if settings.nkey_seed_file is not None:
        options["nkeys_seed"] = str(settings.nkey_seed_file)
    if settings.credentials_file is not None:
        options["user_credentials"] = str(settings.credentials_file)
    if settings.tls.enabled:
        options["tls"] = tls_context(settings.tls)
    if settings.tls.hostname is not None:
        options["tls_hostname"] = settings.tls.hostname
    return options


def _shown_servers(settings: NatsSettings) -> list[str]:
    # NatsSettings refuses userinfo in URLs; masking here too keeps a secret out of the logs
    # should a URL ever reach this point by another way.
    return [userinfo_free(url) for url in settings.servers]


async def _on_error(exc: Exception) -> None:
    _log.warning("nats.error", error=str(exc), error_type=type(exc).__name__)


async def _on_disconnected() -> None:
    _log.warning("nats.disconnected")


async def _on_reconnected() -> None:
    _log.info("nats.reconnected")


async def connect(
    settings: NatsSettings, *, reconnect_wait_s: float = 1.0, initial_attempts: int = 3
) -> Client:
    """A connected client; logs where it connects and how it authenticates, not with what.

    The first connection tries each server ``initial_attempts`` times and then raises (a
    wrong password or an absent server fails at start, naming the cause); once connected,
    the client reconnects forever.
    """
    options = connect_options(settings, reconnect_wait_s=reconnect_wait_s)
    options["max_reconnect_attempts"] = initial_attempts
    errors: list[Exception] = []

    async def on_error(exc: Exception) -> None:
        errors.append(exc)
        await _on_error(exc)

    clients: list[Client] = []

    async def on_disconnected() -> None:
        # nats-py reports its own close() as a disconnection too; only a lost link is news.
        if clients and clients[0].is_closed:
            _log.info("nats.closed")
        else:
            await _on_disconnected()

    # nats-py can stall after a failed TLS handshake instead of retrying; bound the wait.
    budget = (
        (settings.connect_timeout_s + reconnect_wait_s) * initial_attempts * len(settings.servers)
    )
    try:
        client = await asyncio.wait_for(
            nats.connect(
                error_cb=on_error,
                disconnected_cb=on_disconnected,
                reconnected_cb=_on_reconnected,
                **options,
            ),
            timeout=budget,
        )
    except TimeoutError:
        cause = f"{type(errors[-1]).__name__}: {errors[-1]}" if errors else "no answer"
        raise NatsUnreachableError(
            f"could not connect to NATS at {', '.join(_shown_servers(settings))} within "
            f"{budget:.0f} s "
            f"({cause})"
        ) from None
    except nats.errors.NoServersError:
        cause = f"{type(errors[-1]).__name__}: {errors[-1]}" if errors else "no server answered"
        raise NatsUnreachableError(
            f"could not connect to NATS at {', '.join(_shown_servers(settings))} ({cause})"
        ) from None
    # nats-py reads this option on every reconnect; -1 would also make the first connect
    # above spin forever, hence it is set only now.
    client.options["max_reconnect_attempts"] = -1
    clients.append(client)
    _log.info(
        "nats.connected",
        servers=_shown_servers(settings),
        auth=settings.auth_method,
        tls=settings.tls.enabled or any(url.startswith("tls://") for url in settings.servers),
    )
    return client
