import pytest
from pydantic import ValidationError

from kafka_audit.settings import ClusterSettings, Settings, get_settings


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
