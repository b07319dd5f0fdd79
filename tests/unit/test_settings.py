
import pytest
import yaml
from pydantic import BaseModel, SecretStr, ValidationError

from kafka_audit.errors import ConfigError
from kafka_audit.settings import (
    NON_SETTINGS_ENV,
    REDACTED,
    ClusterSettings,
    Settings,
    deep_merge,
    default_home,
    get_settings,
    redacted,
)

from ..support.clean_env import clean_env  # noqa: F401 (autouse)


def overlay(tmp_path, monkeypatch, data) -> str:
    path = tmp_path / "overlay.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    monkeypatch.setenv("KAFKA_AUDIT_CONFIG", str(path))
    return str(path)


def config_error() -> str:
    with pytest.raises(ConfigError) as info:
        get_settings()
    message = str(info.value)
    assert "\n" not in message
    return message


def test_defaults_load_from_yaml():
    s = Settings()
    assert s.cluster.nodes == 3
    assert s.cluster.broker_overrides["replica.lag.time.max.ms"] == 4000
    assert s.cluster.bootstrap.count(",") == 2


def test_environment_overrides(monkeypatch):
    monkeypatch.setenv("KAFKA_AUDIT_AUDIT__SETTLE_SECONDS", "7")
    get_settings.cache_clear()
    try:
        assert get_settings().audit.settle_seconds == 7
    finally:
        get_settings.cache_clear()


def test_unsafe_values_are_refused():
    with pytest.raises(ValidationError):
        ClusterSettings(host="10.0.0.1")
    with pytest.raises(ValidationError):
        Settings(producer={"acks": "2"})


def test_overlay_merges_deeply(tmp_path, monkeypatch):
    defaults = get_settings().cluster.broker_overrides
    assert len(defaults) > 1 and defaults["num.io.threads"] == 2
    get_settings.cache_clear()
    overlay(tmp_path, monkeypatch, {"cluster": {"broker_overrides": {"num.io.threads": 8}},
                                    "audit": {"settle_seconds": 3}})
    s = get_settings()
    assert s.cluster.broker_overrides == {**defaults, "num.io.threads": 8}
    assert s.cluster.nodes == 3 and s.cluster.broker_base_port == 29091
    assert s.audit.settle_seconds == 3 and s.audit.interval_seconds == 5


def test_environment_merges_over_overlay(tmp_path, monkeypatch):
    overlay(tmp_path, monkeypatch, {"audit": {"settle_seconds": 3, "interval_seconds": 2}})
    monkeypatch.setenv("KAFKA_AUDIT_AUDIT__SETTLE_SECONDS", "9")
    monkeypatch.setenv("KAFKA_AUDIT_CLUSTER__BROKER_OVERRIDES", '{"num.io.threads": 4}')
    s = get_settings()
    assert (s.audit.settle_seconds, s.audit.interval_seconds) == (9, 2)
    assert s.cluster.broker_overrides["num.io.threads"] == 4
    assert s.cluster.broker_overrides["replica.lag.time.max.ms"] == 4000


def test_keyword_arguments_merge_with_defaults():
    s = Settings(home="/tmp/x", cluster={"broker_base_port": 19091}, audit={"settle_seconds": 1})
    assert s.cluster.broker_base_port == 19091 and s.cluster.nodes == 3
    assert s.cluster.broker_overrides == Settings().cluster.broker_overrides
    assert s.audit.settle_seconds == 1 and s.audit.interval_seconds == 5


def test_deep_merge_does_not_modify_its_inputs():
    base = {"a": {"b": 1, "c": {"d": 2}}}
    assert deep_merge(base, {"a": {"c": {"e": 3}}}) == {"a": {"b": 1, "c": {"d": 2, "e": 3}}}
    assert base == {"a": {"b": 1, "c": {"d": 2}}}


def test_an_empty_section_in_the_overlay_changes_nothing(tmp_path, monkeypatch):
    overlay(tmp_path, monkeypatch, "audit:\n  # settle_seconds: 1\n")
    assert get_settings().audit.settle_seconds == 30


def test_yaml_typo_names_the_key_and_the_nearest(tmp_path, monkeypatch):
    path = overlay(tmp_path, monkeypatch, {"audit": {"settle_secondz": 1}})
    message = config_error()
    assert "audit.settle_secondz" in message
    assert "did you mean audit.settle_seconds?" in message
    assert path in message


def test_a_typo_in_an_optional_section_suggests_its_own_key(tmp_path, monkeypatch):
    """``profile.sasl`` is optional (None without SASL): its keys were no candidates, and a
    misspelled ``pasword_file`` there suggested ``profile.tls.key_password_file``."""
    overlay(tmp_path, monkeypatch, {"profile": {"security_protocol": "SASL_SSL", "sasl": {
        "mechanism": "SCRAM-SHA-512", "username": "u", "pasword_file": "/p"}}})
    message = config_error()
    assert "did you mean profile.sasl.password_file?" in message
    overlay(tmp_path, monkeypatch, {"profile": {"pasword_file": "/p"}})  # in the wrong section
    assert "did you mean profile.sasl.password_file?" in config_error()


def test_yaml_typos_at_every_depth_are_all_reported(tmp_path, monkeypatch):
    overlay(tmp_path, monkeypatch, {"auditt": {"settle_seconds": 1},
                                    "settle_seconds": 1,
                                    "cluster": {"broker_overides": {"a": 1}}})
    message = config_error()
    assert "auditt in" in message and "did you mean audit?" in message
    assert "settle_seconds in" in message and "did you mean audit.settle_seconds?" in message
    assert "cluster.broker_overides" in message
    assert "did you mean cluster.broker_overrides?" in message
    assert message.count("; ") == 2


def test_unknown_keyword_argument_is_refused():
    with pytest.raises(ValidationError, match="settle_secondz"):
        Settings(audit={"settle_secondz": 1})


@pytest.mark.parametrize("name, read_as", [
    ("KAFKA_AUDIT_AUDIT__SETTLE_SECOND", "audit.settle_second"),
    ("KAFKA_AUDIT_AUDITT__SETTLE_SECONDS", "auditt.settle_seconds"),
])
def test_environment_typo_names_the_variable_and_the_nearest(monkeypatch, name, read_as):
    monkeypatch.setenv(name, "9")
    message = config_error()
    assert message.startswith(f"[config] {name}: unknown setting {read_as}")
    assert "did you mean KAFKA_AUDIT_AUDIT__SETTLE_SECONDS?" in message


def test_environment_below_a_value_is_refused(monkeypatch):
    monkeypatch.setenv("KAFKA_AUDIT_AUDIT__SETTLE_SECONDS__MAX", "9")
    assert "KAFKA_AUDIT_AUDIT__SETTLE_SECONDS__MAX: unknown setting" in config_error()


def test_non_settings_variables_are_accepted(tmp_path, monkeypatch):
    assert set(NON_SETTINGS_ENV) == {"KAFKA_AUDIT_CONFIG", "KAFKA_AUDIT_JAR_CACHE",
                                     "KAFKA_AUDIT_SPARK_HISTORIES"}
    overlay(tmp_path, monkeypatch, {"audit": {"settle_seconds": 4}})
    monkeypatch.setenv("KAFKA_AUDIT_JAR_CACHE", str(tmp_path))
    monkeypatch.setenv("KAFKA_AUDIT_SPARK_HISTORIES", "5")
    monkeypatch.setenv("KAFKA_AUDIT_HOME", str(tmp_path))
    s = get_settings()
    assert s.audit.settle_seconds == 4 and s.home == tmp_path


def test_bad_value_names_the_dotted_path(monkeypatch):
    monkeypatch.setenv("KAFKA_AUDIT_AUDIT__SETTLE_SECONDS", "-1")
    monkeypatch.setenv("KAFKA_AUDIT_PRODUCER__ACKS", "2")
    message = config_error()
    assert ("audit.settle_seconds from KAFKA_AUDIT_AUDIT__SETTLE_SECONDS: "
            "Input should be greater than or equal to 0 (got '-1')") in message
    assert "producer.acks from KAFKA_AUDIT_PRODUCER__ACKS: acks must be 0, 1, all or -1" in message
    assert message.count("; ") == 1


def test_bad_value_in_the_overlay_names_the_file(tmp_path, monkeypatch):
    path = overlay(tmp_path, monkeypatch, {"cluster": {"host": "10.0.0.1"}})
    message = config_error()
    assert f"cluster.host in {path}: the local cluster binds to loopback only" in message


def test_bad_json_in_the_environment_names_the_variable(monkeypatch):
    monkeypatch.setenv("KAFKA_AUDIT_CLUSTER__BROKER_OVERRIDES", "num.io.threads=4")
    assert "cluster.broker_overrides from KAFKA_AUDIT_CLUSTER__BROKER_OVERRIDES: not valid JSON" \
        in config_error()


def test_missing_overlay_file(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKA_AUDIT_CONFIG", str(tmp_path / "nope.yaml"))
    assert config_error() == f"[config] KAFKA_AUDIT_CONFIG={tmp_path / 'nope.yaml'}: no such file"


def test_invalid_yaml_names_the_file_and_line(tmp_path, monkeypatch):
    path = overlay(tmp_path, monkeypatch, "audit:\n  settle_seconds: [1\n")
    message = config_error()
    assert message.startswith(f"[config] {path} line 3 column 1: invalid YAML")


def test_overlay_must_be_a_mapping(tmp_path, monkeypatch):
    path = overlay(tmp_path, monkeypatch, "- audit\n")
    assert f"{path}: expected a mapping of sections" in config_error()


class _Sasl(BaseModel):
    mechanism: str = "PLAIN"
    password: str = "hunter2"
    credential: SecretStr = SecretStr("typed-secret")
    optional_credential: SecretStr | None = None
    oauth: dict = {"Token_URL": "https://idp", "scope": "kafka"}


class _Client(BaseModel):
    user: str = "audit"
    sasl: _Sasl = _Sasl()
    secrets: list[str] = ["a"]


def test_redaction_by_type_and_by_name():
    # an unset secret prints as None, and an endpoint's URL as it is (kafka_audit/redact.py)
    assert redacted(_Client()) == {
        "user": "audit",
        "sasl": {"mechanism": "PLAIN", "password": REDACTED, "credential": REDACTED,
                 "optional_credential": None,
                 "oauth": {"Token_URL": "https://idp", "scope": "kafka"}},
        "secrets": REDACTED,
    }


def test_redaction_of_a_broker_property():
    s = Settings(cluster={"broker_overrides": {"sasl.jaas.config": "user=a password=b"}})
    shown = redacted(s)
    assert shown["cluster"]["broker_overrides"]["sasl.jaas.config"] == REDACTED
    assert shown["cluster"]["broker_overrides"]["num.io.threads"] == 2
    assert shown["home"] == str(default_home()) and shown["audit"]["settle_seconds"] == 30
    assert "password=b" not in yaml.safe_dump(shown)
