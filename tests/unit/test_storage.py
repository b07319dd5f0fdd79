"""The warehouse's place (``warehouse``, ``storage``): a folder by default, an object
store's URI with its connection, each library given the same connection, and the secret
access key never printed. No object store here: what each library is told (the real
store's tests are in tests/cluster/test_object_store.py)."""

from __future__ import annotations

import json
import secrets

import pytest
import yaml

from kafka_audit import storage
from kafka_audit.app import cli
from kafka_audit.errors import ConfigError
from kafka_audit.settings import Settings, get_settings

from ..support.clean_env import clean_env  # noqa: F401 (autouse)


def test_a_local_warehouse_is_the_default_and_a_folder_is_made_absolute(tmp_path,
                                                                           monkeypatch):
    s = Settings(home=tmp_path / "h")
    assert s.warehouse_uri == str(tmp_path / "h" / "warehouse") and not s.remote_warehouse
    moved = s.model_copy(update={"home": tmp_path / "elsewhere"})  # the default follows home
    assert moved.table_path("acks") == str(tmp_path / "elsewhere" / "warehouse" / "acks")
    assert s.table_path("acks") == str(tmp_path / "h" / "warehouse" / "acks")
    monkeypatch.chdir(tmp_path)
    assert Settings(home=tmp_path, warehouse="tables").warehouse_uri == str(tmp_path / "tables")
    assert storage.delta_options(s.table_path("acks")) is None
    assert storage.locate(s.table_path("acks")).path == s.table_path("acks")


def test_an_object_store_warehouse_and_what_each_library_is_told(tmp_path):
    key = "sk-" + secrets.token_hex(8)
    s = Settings(home=tmp_path, warehouse="s3://audit-bucket/prod/", storage={
        "endpoint_url": "http://127.0.0.1:8333/", "path_style": True, "region": "eu-west-1",
        "access_key_id": "AKIDTEST", "secret_access_key": key})
    assert s.warehouse_uri == "s3://audit-bucket/prod" and s.remote_warehouse
    assert s.table_path("acks") == "s3://audit-bucket/prod/acks"
    assert storage.delta_options(s.table_path("acks")) == {
        "AWS_REGION": "eu-west-1", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:8333", "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": key}
    at = storage.locate("s3://audit-bucket/prod/acks/_delta_log")
    assert at.path == "audit-bucket/prod/acks/_delta_log"
    assert type(at.fs).__name__ == "S3FileSystem" and at.fs.region == "eu-west-1"
    assert storage.spark_uri(s.table_path("acks")) == "s3a://audit-bucket/prod/acks"
    props = storage.spark_properties(s.storage)
    assert props["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:8333"
    assert props["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert props["spark.hadoop.fs.s3a.secret.key"] == key
    assert props["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"


def test_settings_sent_to_another_process_register_their_object_store(tmp_path,
                                                                     monkeypatch):
    """The service pickles its settings to its API process, where no validator runs: the
    copy registers the store all the same (it once served 500s on a bucket)."""
    import pickle

    from kafka_audit.app.api_process import child_settings

    s = Settings(home=tmp_path, warehouse="s3://audit-bucket/prod", storage={
        "endpoint_url": "http://127.0.0.1:8333", "access_key_id": "AKIDTEST",
        "secret_access_key": "sk-" + secrets.token_hex(8)})
    sent = pickle.dumps(child_settings(s))
    monkeypatch.setattr(storage, "_storage", None)  # as in a process just started
    with pytest.raises(ConfigError, match="before its storage settings"):
        storage.locate(s.table_path("acks"))
    copy = pickle.loads(sent)
    assert copy.storage == s.storage
    assert storage.delta_options(copy.table_path("acks"))["AWS_ACCESS_KEY_ID"] == "AKIDTEST"


def test_aws_itself_with_the_sdks_own_credentials(tmp_path):
    s = Settings(home=tmp_path, warehouse="s3://b")
    assert storage.delta_options(s.table_path("t")) == {  # the SDK chain finds the key
        "AWS_REGION": "us-east-1", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "true"}


@pytest.mark.parametrize("warehouse, why", [
    ("s3://", "s3://bucket"), ("gs://bucket/x", "no other object store"),
    ("s3a://bucket/x", "s3://bucket")])
def test_a_warehouse_uri_it_cannot_use_is_refused(tmp_path, warehouse, why):
    with pytest.raises(Exception, match=why):
        Settings(home=tmp_path, warehouse=warehouse)


def test_credentials_go_together_and_come_from_one_place(tmp_path, monkeypatch):
    half = Settings(home=tmp_path, warehouse="s3://b", storage={"access_key_id": "AKID"})
    with pytest.raises(ConfigError, match="go together"):
        storage.delta_options(half.table_path("t"))
    (tmp_path / "secret").write_text("from-a-file\n")
    monkeypatch.setenv("MY_S3_SECRET", "from-the-env")
    by_file = Settings(home=tmp_path, warehouse="s3://b", storage={
        "access_key_id": "AKID", "secret_access_key_file": str(tmp_path / "secret")})
    assert by_file.storage.credentials() == ("AKID", "from-a-file")
    by_env = Settings(home=tmp_path, warehouse="s3://b", storage={
        "access_key_id": "AKID", "secret_access_key_env": "MY_S3_SECRET"})
    assert by_env.storage.credentials() == ("AKID", "from-the-env")
    both = Settings(home=tmp_path, warehouse="s3://b", storage={
        "access_key_id": "AKID", "secret_access_key_env": "MY_S3_SECRET",
        "secret_access_key": "inline"})
    with pytest.raises(ConfigError, match="set one of"):
        both.storage.credentials()
    with pytest.raises(Exception, match="http:// or https://"):
        Settings(home=tmp_path, storage={"endpoint_url": "127.0.0.1:8333"})


@pytest.mark.parametrize("fmt", [[], ["--json"]])
def test_config_show_hides_the_secret_access_key(tmp_path, monkeypatch, capsys, fmt):
    key = "sk-" + secrets.token_hex(12)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"home": str(tmp_path), "warehouse": "s3://b/p",
                                    "storage": {"access_key_id": "AKIDSHOWN",
                                                "secret_access_key": key}}))
    monkeypatch.setenv("KAFKA_AUDIT_CONFIG", str(path))
    get_settings.cache_clear()
    assert cli.main(["config", "show", *fmt]) == 0
    out = capsys.readouterr().out
    assert key not in out
    shown = (json.loads(out) if fmt else yaml.safe_load(out))["storage"]
    assert shown["secret_access_key"] == "***" and shown["access_key_id"] == "AKIDSHOWN"


def test_a_spark_session_on_the_object_store_commits_conditionally(tmp_path):
    from kafka_audit.jobs.spark import object_store_properties

    s = Settings(home=tmp_path, warehouse="s3://b/p",
                 storage={"endpoint_url": "http://127.0.0.1:8333", "path_style": True})
    props = object_store_properties(s.storage)
    assert props["spark.delta.logStore.s3a.impl"] == "kafka_audit.spark.ConditionalPutLogStore"
    assert props["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:8333"
    # the streaming checkpoint beside the tables, in Spark's words; on disk, under home
    assert s.checkpoint_uri("consume") == "s3a://b/p/_checkpoints/consume"
    local = Settings(home=tmp_path)
    assert local.checkpoint_uri("consume") == str(tmp_path.resolve() / "checkpoints/consume")
