"""Hostile configuration: secrets in server URLs, and config files that are not what they seem.

A token or password inside a NATS URL is refused (as ``bellows config check`` and every
service start say), never logged and never printed by ``bellows config show``. A config
file that is not UTF-8, nests too deep, holds an alias bomb, a 5000-digit integer, NaN or a
NUL in a path fails with a :class:`ConfigError` naming the file (and the key where there is
one), never a traceback.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from bellows.bus import NatsSettings, connect
from bellows.bus.server import running_nats_server
from bellows.bus.settings import userinfo_free
from bellows.cli.config import config as config_group
from bellows.inputs import SpecError
from bellows.service.config import BellowsConfig, ConfigError, config_json_schema, load_config
from bellows.service.config_files import MAX_CONFIG_BYTES, MAX_CONFIG_DEPTH

SECRET = "s3cr3t-T0KEN-value"
URLS_WITH_SECRETS = [
    f"nats://{SECRET}@nats.example:4222",
    f"nats://bellows:{SECRET}@nats.example:4222",
    f"tls://{SECRET}:@nats.example",
    f"wss://{SECRET}@nats.example/path",
]


@pytest.mark.parametrize("url", URLS_WITH_SECRETS)
def test_a_secret_in_a_server_url_is_refused_and_not_repeated(url: str) -> None:
    with pytest.raises(SpecError) as info:
        NatsSettings(servers=("nats://ok:4222", url))
    assert info.value.field == "servers[1]"
    assert SECRET not in str(info.value)
    assert "nats.token" in info.value.valid  # says where the secret belongs


@pytest.mark.parametrize("url", URLS_WITH_SECRETS)
@pytest.mark.parametrize("source", ["file", "env", "flag"])
def test_config_check_and_show_refuse_it_without_printing_it(
    url: str, source: str, tmp_path: Path
) -> None:
    args: list[str] = []
    env = {}
    if source == "file":
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump({"nats": {"servers": [url]}}))
        args = ["--config", str(path)]
    elif source == "env":
        env = {"BELLOWS_NATS_SERVERS": url}
    else:
        args = ["--set", f"nats.servers={url}"]
    for command in ("show", "check"):
        result = CliRunner().invoke(config_group, [command, *args], env=env)
        assert result.exit_code == 2, result.output
        assert "nats.servers[0]" in result.output
        assert "without userinfo" in result.output
        assert SECRET not in result.output


def test_userinfo_is_masked_wherever_a_url_is_shown() -> None:
    assert userinfo_free(f"nats://{SECRET}@h:4222") == "nats://***@h:4222"
    assert userinfo_free(f"nats://u:{SECRET}@h/p@q") == "nats://***@h/p@q"
    assert userinfo_free("nats://h:4222") == "nats://h:4222"


async def test_the_connected_log_line_names_servers_and_method_only(tmp_path: Path) -> None:
    async with running_nats_server(tmp_path) as server:
        with capture_logs() as logs:
            client = await connect(NatsSettings(servers=(server.url,)))
            await client.close()
    (line,) = [entry for entry in logs if entry["event"] == "nats.connected"]
    assert line["servers"] == [server.url]
    assert line["auth"] == "none"


def write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "config.yaml"
    path.write_bytes(data)
    return path


HOSTILE_FILES: dict[str, tuple[bytes, str, str]] = {
    # name: (content, key the error names, words of what would be valid)
    "invalid UTF-8": (b"nats:\n  name: \xff\xfe\n", "--config", "UTF-8"),
    "deep YAML": (b"a: " + b"[" * 100_000 + b"]" * 100_000, "--config", "nesting deeper"),
    "deep JSON": (b'{"a":' * 50_000 + b"1" + b"}" * 50_000, "--config", "nesting deeper"),
    "deep block mapping": (
        "".join("  " * i + f"k{i}:\n" for i in range(40)).encode(),
        "--config",
        "nesting deeper",
    ),
    "alias bomb": (
        b"a: &a [x, x, x, x, x, x, x, x, x]\n"
        + b"".join(
            f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n".encode()
            for p, c in zip("abcdefgh", "bcdefghi", strict=True)
        ),
        "--config",
        "alias",
    ),
    "duplicate key": (b"nats: {}\ncontroller: {}\nnats: {}\n", "--config", "twice"),
    "5000-digit int": (b"nats:\n  maxDeliver: " + b"9" * 5000 + b"\n", "--config", "integer"),
    "30-digit int": (b"nats:\n  maxDeliver: " + b"9" * 30 + b"\n", "nats.maxDeliver", "[1, "),
    "NaN": (b"controller:\n  deltaSeconds: .nan\n", "controller.deltaSeconds", "finite"),
    "infinity": (b"controller:\n  deltaSeconds: 1.0e+400\n", "controller.deltaSeconds", "finite"),
    "bool as int": (b"nats:\n  maxDeliver: true\n", "nats.maxDeliver", "integer"),
    "impossible date": (b"controller:\n  deltaSeconds: 2001-13-45\n", "--config", "YAML"),
    "bad !!int": (b"nats:\n  maxDeliver: !!int x\n", "--config", "YAML"),
    "bad !!timestamp": (b"nats:\n  name: !!timestamp x\n", "--config", "YAML"),
    "python tag": (b"nats: !!python/object:os.system {}\n", "--config", "YAML"),
    "NUL in a path": (b'nats:\n  credentialsFile: "a\\0b"\n', "nats.credentialsFile", "control"),
    "newline in a name": (b'nats:\n  user: "a\\nb"\n', "nats.user", "control"),
    "huge string": (b"nats:\n  name: " + b"x" * 10_000 + b"\n", "nats.name", "4096"),
    "too large": (b"# " + b"x" * MAX_CONFIG_BYTES + b"\n", "--config", "at most"),
    "GPUs beyond the bound": (
        b"controller:\n  capacity: {gpus: 100000000}\n",
        "controller.capacity.gpus",
        "[0, ",
    ),
    "tiny stream": (b"nats:\n  maxBytes: 10\n", "nats.maxBytes", "[1048576, "),
    "unhashable key": (b"? [a]\n: 1\n", "--config", "YAML"),
    "newline in an unknown key": (b'nats:\n  "a\\nb": 1\n', "nats.a\nb", "one of"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_FILES))
def test_a_hostile_config_file_is_one_clear_error(name: str, tmp_path: Path) -> None:
    data, key, valid = HOSTILE_FILES[name]
    path = write(tmp_path, data)
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    error = info.value
    assert error.key == key
    assert valid in error.valid
    assert str(path) in str(error)  # the file is named, as the value or the source
    assert len(str(error)) < 600
    assert "\n" not in str(error)


def test_a_directory_or_a_missing_file_names_itself(tmp_path: Path) -> None:
    # a long path too: the operator's own path is shown whole, not cut like a hostile value
    for path in (tmp_path, tmp_path / "missing.yaml", tmp_path / ("d" * 120) / "missing.yaml"):
        with pytest.raises(ConfigError, match="readable file") as info:
            load_config(path, env={})
        assert str(path) in str(info.value)


def test_what_tools_write_is_still_read(tmp_path: Path) -> None:
    # a BOM, integral floats for integers (Helm's JSON numbers), JSON itself
    document = {"nats": {"maxDeliver": 20.0, "maxBytes": 1 << 20}, "controller": {"queue": False}}
    path = write(tmp_path, "\ufeff".encode() + json.dumps(document).encode())
    config = load_config(path, env={})
    assert config.nats.max_deliver == 20
    assert config.nats.max_bytes == 1 << 20
    assert config.controller.queue is False
    assert MAX_CONFIG_DEPTH >= 4


@pytest.mark.parametrize(
    ("name", "value", "valid"),
    [
        ("BELLOWS_NATS_MAX_DELIVER", "١٢", "ASCII digits"),
        ("BELLOWS_NATS_MAX_DELIVER", "1_0", "ASCII digits"),
        ("BELLOWS_NATS_MAX_DELIVER", "9" * 5000, "ASCII digits"),
        ("BELLOWS_CONTROLLER_DELTA_SECONDS", "nan", "ASCII decimal"),
        ("BELLOWS_CONTROLLER_DELTA_SECONDS", "1e400", "finite"),
        ("BELLOWS_NATS_ACK_WAIT_SECONDS", "0", "> 0"),
        ("BELLOWS_NATS_DURABLE", "a.b", "letters"),
        ("BELLOWS_NATS_INBOX_PREFIX", "_INBOX.*", "tokens"),
        ("BELLOWS_METRICS_PORT", "65536", "[0, 65535]"),
    ],
)
def test_env_values_go_through_the_bounded_parser(name: str, value: str, valid: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(env={name: value})
    assert valid in info.value.valid
    assert len(str(info.value)) < 600


def test_the_schema_carries_the_bounds() -> None:
    nats = config_json_schema()["properties"]["nats"]["properties"]
    assert nats["maxBytes"]["minimum"] == 1 << 20
    assert nats["maxBytes"]["maximum"] == 1 << 40
    assert nats["ackWaitSeconds"]["exclusiveMinimum"] == 0
    assert math.isfinite(nats["maxAgeSeconds"]["maximum"])


yaml_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                ["nats", "controller", "capacity", "gpus", "maxDeliver", "servers", "x", "tls"]
            )
            | st.text(max_size=8),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(document=yaml_values)
def test_any_yaml_document_loads_or_is_one_config_error(document: object, tmp_path: Path) -> None:
    path = write(tmp_path, yaml.safe_dump({"nats": document}, allow_unicode=True).encode())
    error = _error_of(path)
    assert error is None or "\n" not in str(error)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_any_bytes_load_or_are_one_config_error(data: bytes, tmp_path: Path) -> None:
    error = _error_of(write(tmp_path, data))
    assert error is None or "\n" not in str(error)


def _error_of(path: Path) -> ConfigError | None:
    """The ConfigError of loading ``path`` (None when it loads); anything else propagates."""
    try:
        assert isinstance(load_config(path, env={}), BellowsConfig)
    except ConfigError as error:
        return error
    return None
