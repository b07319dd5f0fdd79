"""The Maven pins agree with the pyspark wheel they join on Spark's class path."""

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pyspark

from kafka_audit.jars import _pom

_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def _property(name: str) -> str:
    root = ET.parse(_pom("spark")).getroot()
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
