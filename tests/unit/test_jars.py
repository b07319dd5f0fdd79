"""The Maven pins agree with the pyspark wheel they join on Spark's class path, and the
local cluster's Kafka versions with the broker's pin."""

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pyspark

from kafka_audit.jars import KAFKA_VERSIONS, _marker, _overrides, _pom

_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def _property(name: str, pom: str = "spark") -> str:
    root = ET.parse(_pom(pom)).getroot()
    return root.find(f"m:properties/m:{name}", _NS).text.strip()


def _shipped(artifact: str) -> set[str]:
    jars = Path(pyspark.__file__).parent / "jars"
    return {m.group(1) for p in jars.glob(f"{artifact}-*.jar")
            if (m := re.fullmatch(rf"{artifact}-(\d[\w.\-]*)\.jar", p.name))}


def test_the_kafka_source_is_at_pysparks_version():
    assert _property("spark.version") == pyspark.__version__


def test_hadoop_aws_is_at_the_hadoop_version_pyspark_ships():
    """S3A (hadoop-aws) calls Hadoop's internals: it must be the release of the
    hadoop-client jars pyspark ships, or the jobs fail on an object-store warehouse."""
    shipped = _shipped("hadoop-client-api")
    assert len(shipped) == 1, shipped
    assert _property("hadoop.version") == shipped.pop()


def test_the_first_kafka_version_is_the_pinned_one_and_each_other_its_own_class_path():
    assert KAFKA_VERSIONS[0] == _property("kafka.version", "kafka")
    assert KAFKA_VERSIONS == tuple(sorted(KAFKA_VERSIONS, key=lambda v: tuple(
        map(int, v.split(".")))))  # the tools run on the last: the newest
    assert _overrides("kafka") == [] and _overrides("kafka-4.4.0") == ["-Dkafka.version=4.4.0"]
    # another version is fetched anew, never taken for the pinned one's complete folder
    assert _pom("kafka-4.4.0") == _pom("kafka") and _marker("kafka-4.4.0") != _marker("kafka")


def test_two_fetches_at_once_run_maven_once_and_leave_one_whole_folder(tmp_path,
                                                                      monkeypatch):
    """Two processes needing the same jars (two test sessions, a CI clone beside a checkout)
    fetch them once: the second waits on the lock and finds the folder complete."""
    import os
    import threading

    from kafka_audit import jars

    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "mvn"
    fake.parent.mkdir()
    # a Maven that takes a while and copies one jar into -DoutputDirectory
    fake.write_text(f'#!/bin/sh\necho run >> "{calls}"\nsleep 1\nfor a in "$@"; do case '
                    '"$a" in -DoutputDirectory=*) touch "${a#-DoutputDirectory=}/x-1.0.jar";; '
                    'esac; done\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("KAFKA_AUDIT_JAR_CACHE", str(tmp_path / "cache"))
    errors = []

    def fetch():
        try:
            jars.ensure_jars(("kafka-4.4.0",), quiet=True)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=fetch) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and calls.read_text().count("run") == 1
    assert jars._complete("kafka-4.4.0")
    assert [p.name for p in (tmp_path / "cache" / "kafka-4.4.0").glob("*.jar")] == ["x-1.0.jar"]


def test_a_built_plugin_is_taken_where_no_gcc_is(tmp_path, monkeypatch):
    """The container image builds the plugin in its build stage and carries no compiler:
    the library built there from the same sources is taken; with none built, or one built
    from other sources, the error names gcc."""
    import shutil

    import pytest

    from kafka_audit import jars
    from kafka_audit.errors import JarsMissing

    built = jars.plugin_library(quiet=True, folder=tmp_path / "built")
    which = shutil.which
    monkeypatch.setattr(jars.shutil, "which", lambda name: None if name == "gcc"
                        else which(name))
    assert jars.plugin_library(quiet=True, folder=tmp_path / "built") == built
    with pytest.raises(JarsMissing, match="gcc is needed"):
        jars.plugin_library(quiet=True, folder=tmp_path / "none")
    with pytest.raises(JarsMissing, match="gcc is needed"):  # a test's variant: built anew
        jars.plugin_library(quiet=True, folder=tmp_path / "built", defines=("X=1",))
    # built from other sources (the package upgraded since): not taken
    (tmp_path / "built" / ".sources").write_text("0" * 64)
    with pytest.raises(JarsMissing, match="gcc is needed"):
        jars.plugin_library(quiet=True, folder=tmp_path / "built")
