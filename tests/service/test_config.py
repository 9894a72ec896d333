"""Configuration: one schema; defaults < file < env < flags; errors name the key."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jsonschema
import pytest
import yaml

from bellows.autoscaler.config import Policy
from bellows.bus import NatsSettings, Secret
from bellows.inputs import SpecError
from bellows.service.config import (
    BellowsConfig,
    CapacitySettings,
    ConfigError,
    ControllerSettings,
    LeaderElectionSettings,
    MetricsSettings,
    config_json_schema,
    config_markdown,
    load_config,
    redacted,
)
from bellows.service.config_fields import leaves

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


FILE = """
apiVersion: bellows.io/v1alpha1
kind: BellowsConfig
namespaces: [team-a, team-b]
nats:
  servers: [nats://nats.nats.svc:4222]
  ackWaitSeconds: 45
  tls: {caFile: /etc/ca.pem}
controller:
  policy: baseline
  deltaSeconds: 120
  capacity: {gpus: 40, nodeSelector: {pool: gpu}}
logging: {format: json}
"""


def test_defaults_need_no_file():
    config = load_config(env={})
    assert config == BellowsConfig()
    core = config.controller.autoscaler_config()
    assert (core.mode.value, core.delta_s, core.restart_s, core.backfill) == (
        "bellows", 120.0, 60.0, True,
    )  # fmt: skip
    paper = load_config(env={"BELLOWS_CONTROLLER_MODE": "paper"}).controller.autoscaler_config()
    assert (paper.mode.value, paper.delta_s, paper.restart_s, paper.backfill) == (
        "paper", 600.0, 0.0, False,
    )  # fmt: skip
    assert paper.queue  # the live controller keeps the queue in either mode
    mixed = load_config(
        env={}, overrides=["controller.mode=paper", "controller.restartCostSeconds=30"]
    )
    assert mixed.controller.autoscaler_config().restart_s == 30.0


def test_file_then_env_then_flags(tmp_path):
    path = write(tmp_path, FILE)
    from_file = load_config(path, env={})
    assert from_file.namespaces == ("team-a", "team-b")
    assert from_file.nats.ack_wait_s == 45.0
    assert from_file.nats.tls.ca_file == Path("/etc/ca.pem")
    assert from_file.controller.policy is Policy.BASELINE
    assert from_file.controller.capacity.node_selector == {"pool": "gpu"}
    assert from_file.nats.max_deliver == 20  # default kept

    env = {
        "BELLOWS_CONTROLLER_DELTA_SECONDS": "60",
        "BELLOWS_NATS_SERVERS": "nats://a:4222, nats://b:4222",
        "BELLOWS_CONTROLLER_QUEUE": "false",
        "BELLOWS_SHARED_DATA": "/elsewhere",  # not a config variable: ignored
    }
    from_env = load_config(path, env=env)
    assert from_env.controller.delta_s == 60.0
    assert from_env.nats.servers == ("nats://a:4222", "nats://b:4222")
    assert from_env.controller.queue is False
    assert from_env.controller.policy is Policy.BASELINE  # still from the file

    from_flags = load_config(
        path, env=env, overrides=["controller.deltaSeconds=0", "namespaces=team-c"]
    )
    assert from_flags.controller.delta_s == 0.0
    assert from_flags.namespaces == ("team-c",)


def test_the_file_path_may_come_from_env(tmp_path):
    path = write(tmp_path, "controller: {deltaSeconds: 30}\n")
    assert load_config(env={"BELLOWS_CONFIG": str(path)}).controller.delta_s == 30.0


@pytest.mark.parametrize(
    ("text", "env", "flags", "expected"),
    [
        ("nats: {ackWait: 3}\n", {}, [], ("nats.ackWait", "file")),
        ("controler: {}\n", {}, [], ("controler", "file")),
        ("controller: {deltaSeconds: soon}\n", {}, [], ("controller.deltaSeconds", "file")),
        ("controller: {deltaSeconds: -1}\n", {}, [], ("controller.deltaSeconds", "file")),
        ("controller: {policy: greedy}\n", {}, [], ("controller.policy", "file")),
        ("controller: 3\n", {}, [], ("controller", "file")),
        ("nats: {maxDeliver: true}\n", {}, [], ("nats.maxDeliver", "file")),
        ("", {"BELLOWS_NATS_ACK_WAIT": "3"}, [], ("BELLOWS_NATS_ACK_WAIT", "env")),
        ("", {"BELLOWS_NATS_MAX_DELIVER": "many"}, [], ("nats.maxDeliver", "env")),
        ("", {"BELLOWS_NATS_SERVERS": "http://x"}, [], ("nats.servers[0]", "env")),
        ("", {}, ["controller.delta=1"], ("controller.delta", "flag")),
        ("", {}, ["logging.level=loud"], ("logging.level", "flag")),
        (
            "leaderElection: {renewDeadlineSeconds: 20}\n",
            {},
            [],
            ("leaderElection.renewDeadlineSeconds", "file"),
        ),
        ("nats: {tls: {certFile: /c.pem}}\n", {}, [], ("nats.tls.keyFile", "default")),
        ("namespaces: [Team_A]\n", {}, [], ("namespaces[0]", "file")),
    ],
)
def test_bad_config_fails_naming_the_key_and_its_source(tmp_path, text, env, flags, expected):
    key, source = expected
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), env=env, overrides=flags)
    assert info.value.key == key
    assert info.value.source.startswith(source)
    assert key in str(info.value)


def test_unreadable_or_invalid_yaml_names_the_file(tmp_path):
    with pytest.raises(ConfigError, match="readable file"):
        load_config(tmp_path / "missing.yaml", env={})
    with pytest.raises(ConfigError, match="valid YAML"):
        load_config(write(tmp_path, "nats: [unclosed\n"), env={})


def test_secrets_are_masked_in_repr_errors_and_show(tmp_path):
    config = load_config(
        env={"BELLOWS_NATS_USER": "bellows", "BELLOWS_NATS_PASSWORD": "hunter2-secret"}
    )
    assert config.nats.password == Secret("hunter2-secret")
    assert "hunter2-secret" not in repr(config)
    assert redacted(config)["nats"]["password"] == "********"
    assert "hunter2-secret" not in json.dumps(redacted(config))
    with pytest.raises(ConfigError) as info:
        load_config(
            env={
                "BELLOWS_NATS_TOKEN": "tok-123",
                "BELLOWS_NATS_USER": "u",
                "BELLOWS_NATS_PASSWORD": "pw-456",
            }
        )
    assert "tok-123" not in str(info.value)
    assert "pw-456" not in str(info.value)


def test_the_json_schema_accepts_what_the_loader_accepts_and_refuses_unknown_keys(tmp_path):
    schema = config_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(yaml.safe_load(FILE), schema)
    jsonschema.validate(redacted(BellowsConfig()), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"nats": {"ackWait": 3}}, schema)


def test_env_names_are_unique():
    names = [leaf.env for leaf in leaves(BellowsConfig)]
    assert len(names) == len(set(names))


def test_the_docs_hold_the_current_key_reference():
    docs = (REPO / "docs" / "configuration.md").read_text()
    assert config_markdown() in docs, "regenerate with: bellows config reference"


def test_the_chart_and_manifest_configs_load_where_present():
    # The shipped config must load with this schema (kept in step with the chart).
    path = REPO / "manifests" / "base" / "config.yaml"
    if not path.exists():
        pytest.skip("manifests not generated in this checkout")
    load_config(path, env={})


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: ControllerSettings(delta_s=math.nan), "delta_s"),
        (lambda: ControllerSettings(restart_cost_s=1e9), "restart_cost_s"),
        (lambda: CapacitySettings(gpus=2**40), "gpus"),
        (lambda: MetricsSettings(port=True), "port"),
        (lambda: NatsSettings(max_bytes=10), "max_bytes"),
        (lambda: NatsSettings(ack_wait_s=math.inf), "ack_wait_s"),
        (lambda: LeaderElectionSettings(controller_lease="Bad_Name"), "controller_lease"),
    ],
)
def test_sections_built_in_code_check_the_same_bounds(build, field):
    with pytest.raises(SpecError) as info:
        build()
    assert info.value.field == field


def test_numbers_are_normalised_and_the_reference_shows_their_range():
    assert isinstance(NatsSettings(ack_wait_s=3).ack_wait_s, float)
    table = config_markdown()
    assert "| `nats.maxDeliver` | integer [1, 10000] |" in table
    assert "| `nats.ackWaitSeconds` | number (0, 86400] |" in table


def test_the_remaining_exponent_reaches_the_core_and_is_bounded():
    """``controller.remainingExponent`` (null: the core's 0.3) sets the power of the
    remaining objective's weights; out of [0, 1] the key is named."""
    assert load_config(env={}).controller.autoscaler_config().remaining_exponent == 0.3
    config = load_config(env={}, overrides=["controller.remainingExponent=0.35"])
    assert config.controller.autoscaler_config().remaining_exponent == 0.35
    with pytest.raises(ConfigError) as info:
        load_config(env={}, overrides=["controller.remainingExponent=2"])
    assert "remainingExponent" in str(info.value)


def test_the_early_share_is_the_modes_unless_set_and_zero_turns_it_off():
    """``controller.earlyShare`` null: the mode's (0.05 in Bellows mode, off in paper mode);
    0: off; a share sets the early round in either mode; out of [0, 1] the key is named."""

    def share(*overrides: str) -> float | None:
        return (
            load_config(env={}, overrides=list(overrides))
            .controller.autoscaler_config()
            .early_share
        )

    assert share() == 0.05
    assert share("controller.earlyShare=0.2") == 0.2
    assert share("controller.mode=paper") is None
    assert share("controller.earlyShare=0") is None
    assert share("controller.earlyShare=0.5", "controller.mode=paper") == 0.5
    with pytest.raises(ConfigError) as info:
        load_config(env={}, overrides=["controller.earlyShare=1.5"])
    assert "earlyShare" in str(info.value)
