"""Authentication (user/password, token, NKey) and TLS against a real nats-server."""

from __future__ import annotations

import os
from dataclasses import replace

import nats.errors
import nkeys
import pytest
from structlog.testing import capture_logs

from bellows.bus import EventPublisher, NatsSettings, Secret, TlsSettings, connect
from bellows.bus.server import ServerAuth, ServerTls, running_nats_server
from bellows.bus.streams import ensure_streams

from .conftest import arrived
from .tls_certs import make_certs

PASSWORD = "s3cr3t-horse-battery"


async def round_trip(settings: NatsSettings) -> None:
    client = await connect(settings)
    try:
        js = client.jetstream()
        await ensure_streams(js, settings)
        publisher = EventPublisher(js, prefix=settings.subject_prefix, stream=settings.stream)
        assert not (await publisher.publish(arrived())).duplicate
    finally:
        await client.close()


async def test_user_and_password_and_the_password_is_never_logged(tmp_path):
    auth = ServerAuth(users=(("bellows", PASSWORD),))
    async with running_nats_server(tmp_path, auth=auth) as server:
        good = NatsSettings(servers=(server.url,), user="bellows", password=Secret(PASSWORD))
        bad = NatsSettings(servers=(server.url,), user="bellows", password=Secret("wrong-one"))
        with capture_logs() as logs:
            await round_trip(good)
            with pytest.raises((nats.errors.Error, OSError)):
                await connect(bad, initial_attempts=1, reconnect_wait_s=0.1)
        assert any(entry.get("auth") == "user-password" for entry in logs)
        text = repr(logs) + repr(good) + str(good.password)
        assert PASSWORD not in text
        assert "wrong-one" not in text


async def test_token(tmp_path):
    async with running_nats_server(tmp_path, auth=ServerAuth(token="t0ken-value")) as server:
        await round_trip(NatsSettings(servers=(server.url,), token=Secret("t0ken-value")))
        with pytest.raises((nats.errors.Error, OSError)):
            await connect(NatsSettings(servers=(server.url,)), initial_attempts=1)


async def test_nkey_seed_file(tmp_path):
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    public = nkeys.from_seed(bytearray(seed)).public_key.decode()
    seed_file = tmp_path / "user.nk"
    seed_file.write_bytes(seed)
    async with running_nats_server(tmp_path / "srv", auth=ServerAuth(nkeys=(public,))) as server:
        await round_trip(NatsSettings(servers=(server.url,), nkey_seed_file=seed_file))


async def test_tls_with_a_private_ca(tmp_path):
    ca, cert, key = make_certs(tmp_path)
    tls = ServerTls(cert_file=cert, key_file=key)
    async with running_nats_server(tmp_path / "srv", tls=tls) as server:
        assert server.url.startswith("tls://")
        await round_trip(NatsSettings(servers=(server.url,), tls=TlsSettings(ca_file=ca)))
        # Without the CA the server's certificate is not trusted.
        with pytest.raises((nats.errors.Error, OSError)):
            await connect(
                NatsSettings(servers=(server.url,), connect_timeout_s=1.0),
                initial_attempts=1,
                reconnect_wait_s=0.1,
            )


async def test_own_reply_subjects_let_the_server_keep_replies_private(tmp_path):
    # The user may subscribe only under its own prefix: NATS's default _INBOX is refused.
    auth = tmp_path / "auth.conf"
    auth.write_text(
        "authorization { users = [ { user: bellows, password: "
        f'"{PASSWORD}", permissions: {{ subscribe: {{ allow: ["_INBOX_bellows.me.>"] }} }} }}'
        " ] }\n"
    )
    async with running_nats_server(tmp_path / "srv", include=auth) as server:
        own = NatsSettings(
            servers=(server.url,),
            user="bellows",
            password=Secret(PASSWORD),
            inbox_prefix="_INBOX_bellows.me",
        )
        await round_trip(own)
        client = await connect(replace(own, inbox_prefix="_INBOX"))
        try:
            with capture_logs() as logs, pytest.raises((nats.errors.Error, TimeoutError)):
                await ensure_streams(client.jetstream(timeout=1.0), own)
        finally:
            await client.close()
        assert any("permissions violation" in str(e.get("error", "")).lower() for e in logs)
