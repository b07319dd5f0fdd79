"""Where the warehouse lives: a local folder (the default), or an S3 bucket or S3-compatible
object store (``warehouse: s3://bucket/prefix`` and the ``storage`` section).

Concurrent writers of one table (producer hosts appending to ``acks`` beside the service)
stay correct because delta-rs 1.x creates each commit file with ``If-None-Match: *``: of
two writers of one version the store lets one create it and answers the other 412, which
delta-rs retries at the next version. AWS S3 honours that header (since 2024), and so does
the S3-compatible server of the tests; a store that ignored it would lose commits
silently, which is why ``kafka-audit check`` probes for it. delta-rs 1.x has no DynamoDB
lock any more and needs none.

One connection per process: the ``storage`` section of the settings, registered here when
a :class:`~kafka_audit.settings.Settings` with a remote warehouse is made, and read by the
table layer (``store.py``) for every table, data file and log it touches. Each library is
given the same connection in its own words: delta-rs's storage options
(:func:`delta_options`), a ``pyarrow.fs`` file system for the Delta log's fast paths and
single data files (:func:`locate`), and Spark's S3A properties (:func:`spark_properties`).

The secret access key comes from the setting itself, an environment variable or a file,
as the Kafka profile's passwords do, and is never printed (the secrets rule of
``redact.py`` hides ``secret_access_key`` by its name; :func:`remember_secret` hides its
value in any text that is logged).
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from kafka_audit.errors import ConfigError
from kafka_audit.profile import secret_from

__all__ = ["StorageSettings", "is_remote", "register", "locate", "Located", "delta_options",
           "spark_properties", "spark_uri", "probe", "REMOTE_SCHEMES"]

#: the URI schemes of an object-store warehouse (``s3a://`` is Spark's name for ``s3://``)
REMOTE_SCHEMES = ("s3://", "s3a://")


class StorageSettings(BaseModel):
    """The object store of a remote warehouse (``warehouse: s3://bucket/prefix``); unused
    with a local one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoint_url: str | None = Field(
        None, description="the S3 API's URL, for an S3-compatible store "
        "(http://127.0.0.1:8333); none: AWS S3 in the region")
    region: str = Field("us-east-1", min_length=1, description="the bucket's region")
    path_style: bool = Field(
        False, description="address the bucket in the path (http://host/bucket/key), as "
        "most S3-compatible stores want; false: virtual-hosted (bucket.host), as AWS wants")
    access_key_id: str | None = Field(
        None, description="the access key's id; none (with no secret): the AWS SDKs' own "
        "chain (environment, instance profile)")
    secret_access_key: SecretStr | None = Field(
        None, description="the secret itself (KAFKA_AUDIT_STORAGE__SECRET_ACCESS_KEY); set "
        "one of it, secret_access_key_env or secret_access_key_file")
    secret_access_key_env: str | None = Field(
        None, description="the variable holding the secret access key")
    secret_access_key_file: Path | None = Field(
        None, description="a file holding the secret access key")

    @field_validator("endpoint_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("http://", "https://")):
            raise ValueError(f"{v!r} is not an http:// or https:// URL")
        return v.rstrip("/") if v else v

    def secret(self) -> str | None:
        """The secret access key (None: the SDKs' own credential chain)."""
        return secret_from(self.secret_access_key, self.secret_access_key_env,
                           self.secret_access_key_file, "storage.secret_access_key")

    def credentials(self) -> tuple[str, str] | None:
        """``(access key id, secret)``, or None for the SDKs' own chain; one without the
        other is refused."""
        secret = self.secret()
        if (self.access_key_id is None) != (secret is None):
            raise ConfigError("storage: access_key_id and the secret access key go together "
                              "(or set neither, for the AWS SDKs' own credential chain)")
        return None if secret is None else (self.access_key_id, secret)


def is_remote(uri: str | Path) -> bool:
    return str(uri).startswith(REMOTE_SCHEMES)


@dataclass(frozen=True)
class Located:
    """Where a path is for ``pyarrow.fs``: the file system and the path within it."""

    fs: Any  # pyarrow.fs.FileSystem
    path: str


_lock = threading.Lock()
_storage: StorageSettings | None = None


def register(storage: StorageSettings) -> None:
    """The object store of this process's remote warehouse (the last one registered: the
    auditor talks to one)."""
    global _storage
    with _lock:
        if storage != _storage:
            _storage = storage
            _filesystem.cache_clear()
            _delta_options.cache_clear()


def _registered() -> StorageSettings:
    if _storage is None:
        raise ConfigError("a remote warehouse (s3://...) is used before its storage settings "
                          "were loaded")
    return _storage


@functools.lru_cache(maxsize=4)
def _filesystem(storage: StorageSettings):
    from pyarrow import fs

    creds = storage.credentials()
    scheme = endpoint = None
    if storage.endpoint_url:
        scheme, _, endpoint = storage.endpoint_url.partition("://")
    return fs.S3FileSystem(
        access_key=creds[0] if creds else None, secret_key=creds[1] if creds else None,
        region=storage.region, scheme=scheme, endpoint_override=endpoint,
        force_virtual_addressing=not storage.path_style, connect_timeout=10,
        request_timeout=30)


def locate(uri: str | Path) -> Located:
    """The file system of ``uri`` and its path within it: the registered object store for
    ``s3://bucket/key`` (path ``bucket/key``), the local file system otherwise."""
    text = str(uri)
    for scheme in REMOTE_SCHEMES:
        if text.startswith(scheme):
            return Located(_filesystem(_registered()), text[len(scheme):])
    return Located(_local(), text)


@functools.cache
def _local():
    from pyarrow import fs

    return fs.LocalFileSystem()


def delta_options(uri: str | Path) -> dict[str, str] | None:
    """delta-rs's ``storage_options`` for a table at ``uri`` (None: a local table)."""
    if not is_remote(uri):
        return None
    return dict(_delta_options(_registered()))


@functools.lru_cache(maxsize=4)
def _delta_options(storage: StorageSettings) -> dict[str, str]:
    """Once per storage: every table the process opens asks, and the secret may come from a
    file."""
    out = {"AWS_REGION": storage.region,
           "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": str(not storage.path_style).lower()}
    if storage.endpoint_url:
        out["AWS_ENDPOINT_URL"] = storage.endpoint_url
        if storage.endpoint_url.startswith("http://"):
            out["AWS_ALLOW_HTTP"] = "true"
    creds = storage.credentials()
    if creds:
        out["AWS_ACCESS_KEY_ID"], out["AWS_SECRET_ACCESS_KEY"] = creds
    return out


def spark_uri(uri: str | Path) -> str:
    """``uri`` as Spark's Hadoop file systems name it (``s3a://`` for ``s3://``)."""
    text = str(uri)
    return "s3a://" + text[len("s3://"):] if text.startswith("s3://") else text


def spark_properties(storage: StorageSettings) -> dict[str, str]:
    """The S3A properties of a Spark session that reads and writes the warehouse."""
    out = {"spark.hadoop.fs.s3a.endpoint.region": storage.region,
           "spark.hadoop.fs.s3a.path.style.access": str(storage.path_style).lower()}
    if storage.endpoint_url:
        out["spark.hadoop.fs.s3a.endpoint"] = storage.endpoint_url
        out["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(
            storage.endpoint_url.startswith("https://")).lower()
    creds = storage.credentials()
    if creds:
        out["spark.hadoop.fs.s3a.access.key"], out["spark.hadoop.fs.s3a.secret.key"] = creds
        out["spark.hadoop.fs.s3a.aws.credentials.provider"] = (
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider")
    return out


def probe(uri: str, timeout: float = 20) -> str | None:
    """Whether the object store at ``uri`` (a remote warehouse) takes the auditor's writes
    and keeps concurrent writers correct: a scratch object is created there twice with
    ``If-None-Match: *``, as delta-rs creates each commit file. The second create must be
    refused; a store that lets it overwrite would let two writers of one table both commit
    one version, and one commit would be lost without an error. Returns None if sound, else
    why not; raises what the store answers (no such bucket, a refused key), within about
    ``timeout`` seconds. Through obstore: the ``object_store`` crate delta-rs writes with,
    and the one client here that can ask for a create-if-absent."""
    import uuid
    from datetime import timedelta

    import obstore
    from obstore.exceptions import AlreadyExistsError, PreconditionError
    from obstore.store import S3Store

    storage = _registered()
    bucket, _, prefix = uri[len("s3://"):].partition("/")
    config = {"region": storage.region,
              "virtual_hosted_style_request": not storage.path_style}
    if storage.endpoint_url:
        config["endpoint"] = storage.endpoint_url
    creds = storage.credentials()
    if creds:
        config["access_key_id"], config["secret_access_key"] = creds
    store = S3Store(bucket, prefix=prefix or None, config=config, client_options={
        "allow_http": bool(storage.endpoint_url and storage.endpoint_url.startswith("http:")),
        "timeout": f"{int(timeout / 2)}s", "connect_timeout": f"{int(timeout / 4)}s"},
        retry_config={"max_retries": 1, "backoff": {"init_backoff": timedelta(seconds=0.2)},
                      "retry_timeout": timedelta(seconds=timeout / 2)})
    key = f"_kafka_audit_check/{uuid.uuid4().hex}"
    obstore.put(store, key, b"first", mode="create")
    try:
        obstore.put(store, key, b"second", mode="create")
    except (AlreadyExistsError, PreconditionError):
        return None
    finally:
        obstore.delete(store, key)
    return ("the object store let a second create of one object overwrite the first (it "
            "ignores If-None-Match on PUT): concurrent writers of one table would lose "
            "commits without an error")
