"""Typed settings: conf/defaults.yaml, then KAFKA_AUDIT_* environment variables.

Reach them through :func:`get_settings`; tests call ``get_settings.cache_clear()``
after changing the environment. There is no module-level settings instance.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict


class ClusterSettings(BaseModel):
    nodes: int = Field(3, ge=1, le=9)
    host: str = "127.0.0.1"
    broker_base_port: int = 29091
    controller_base_port: int = 29191
    # brokers replicate over their own listener, so a fault can cut replication alone
    replication_base_port: int = 29291
    heap: str = "-Xms256m -Xmx512m"
    broker_overrides: dict[str, Any] = Field(default_factory=dict)
    ready_timeout_seconds: float = 90

    @field_validator("host")
    @classmethod
    def _loopback_only(cls, v: str) -> str:
        # the local launcher only ever binds to this machine
        if not (v.startswith("127.") or v == "localhost"):
            raise ValueError("the local cluster binds to loopback only (127.0.0.0/8)")
        return v

    def broker_port(self, node: int) -> int:
        return self.broker_base_port + node - 1

    def controller_port(self, node: int) -> int:
        return self.controller_base_port + node - 1

    def replication_port(self, node: int) -> int:
        return self.replication_base_port + node - 1

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.host}:{self.broker_port(n)}" for n in range(1, self.nodes + 1))


class ProducerSettings(BaseModel):
    acks: str = "all"
    idempotence: bool = False
    retries: int = 2
    linger_ms: int = 5
    message_timeout_ms: int = 30000
    ledger_flush_seconds: float = Field(1.0, gt=0)
    ledger_flush_rows: int = Field(50000, gt=0)

    @field_validator("acks")
    @classmethod
    def _acks(cls, v: str) -> str:
        if str(v) not in {"0", "1", "all", "-1"}:
            raise ValueError("acks must be 0, 1, all or -1")
        return str(v)


class SparkSettings(BaseModel):
    master: str = "local[2]"
    driver_memory: str = "2g"
    shuffle_partitions: int = 4
    consume_trigger_seconds: float = 2
    max_offsets_per_trigger: int = Field(10_000_000, gt=0)
    driver_rows: int = Field(200_000, ge=0)


class AuditSettings(BaseModel):
    settle_seconds: float = Field(30, ge=0)
    interval_seconds: float = Field(5, gt=0)
    lookback_seconds: float = Field(30, ge=0)
    unseen_after_seconds: float = Field(120, gt=0)
    read_retention_seconds: float = Field(600, gt=0)
    reread_timeout_seconds: float = Field(30, gt=0)
    hot_rewrite_passes: int = Field(10, gt=0)


class WatchSettings(BaseModel):
    interval_seconds: float = Field(0.5, gt=0)


class ApiSettings(BaseModel):
    host: str = "127.0.0.1"
    port: int = 8088
    page_size_max: int = Field(1000, gt=0)


class _YamlSource(PydanticBaseSettingsSource):
    """Lowest-priority source: conf/defaults.yaml, then the file named by KAFKA_AUDIT_CONFIG."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        import os

        data: dict[str, Any] = yaml.safe_load(
            resources.files("kafka_audit.conf").joinpath("defaults.yaml").read_text()
        )
        extra = os.environ.get("KAFKA_AUDIT_CONFIG")
        if extra:
            over = yaml.safe_load(Path(extra).read_text()) or {}
            for key, value in over.items():
                if isinstance(value, dict) and isinstance(data.get(key), dict):
                    data[key] = {**data[key], **value}
                else:
                    data[key] = value
        return data


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="KAFKA_AUDIT_", env_nested_delimiter="__")

    home: Path = Path("var")
    cluster: ClusterSettings = ClusterSettings()
    producer: ProducerSettings = ProducerSettings()
    spark: SparkSettings = SparkSettings()
    audit: AuditSettings = AuditSettings()
    watch: WatchSettings = WatchSettings()
    api: ApiSettings = ApiSettings()

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings,
                                   dotenv_settings, file_secret_settings):
        return (init_settings, env_settings, _YamlSource(settings_cls))

    @property
    def home_dir(self) -> Path:
        return self.home.resolve()

    @property
    def warehouse(self) -> Path:
        return self.home_dir / "warehouse"

    def table_path(self, name: str) -> str:
        return str(self.warehouse / name)

    @property
    def checkpoints(self) -> Path:
        return self.home_dir / "checkpoints"


@functools.cache
def get_settings() -> Settings:
    return Settings()
