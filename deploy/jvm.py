"""Pinned JVM class paths, fetched once from Maven Central with Maven.

Two Maven files in ``deploy/jvm/`` pin what the JVM processes need:

* ``kafka-broker.pom.xml``: the Kafka broker (``kafka.Kafka``), its storage
  tool and a log4j2 binding;
* ``spark-extras.pom.xml``: the Spark Kafka source at pyspark's exact version
  and Delta's jar for the Spark 4.1 line.

``ensure_jars`` resolves each file with ``maven-dependency-plugin`` into
``.cache/jars/<name>`` (ignored by git) and writes a marker holding the hash of
the Maven file, so a second call is a no-op and an edited pin is fetched again.
Spark sessions get the extras through ``spark.jars``; nothing downloads through
Ivy at run time.

``native_jar`` compiles the project's own JVM code (``deploy/jvm/src``: the
consume job's one-pass read-run folder) with ``javac`` against the jars the
pyspark wheel ships, once per source and pyspark version, into
``.cache/jars/native``; it joins the other extras on ``spark.jars``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from kafka_audit.errors import JarsMissing

__all__ = ["jar_cache", "ensure_jars", "broker_classpath", "spark_jars", "native_jar"]

_POMS = {"kafka": "kafka-broker.pom.xml", "spark": "spark-extras.pom.xml"}
_DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
_VERSION_SUFFIX = re.compile(r"-\d[0-9A-Za-z.\-]*\.jar$")


def jar_cache() -> Path:
    """The cache root: ``$KAFKA_AUDIT_JAR_CACHE`` or ``.cache/jars`` beside the checkout."""
    env = os.environ.get("KAFKA_AUDIT_JAR_CACHE")
    if env:
        return Path(env).resolve()
    return Path(__file__).resolve().parent.parent / ".cache" / "jars"


def _pom(name: str) -> Path:
    return Path(__file__).resolve().parent / "jvm" / _POMS[name]


def _marker(name: str) -> str:
    return hashlib.sha256(_pom(name).read_bytes()).hexdigest()


def _complete(name: str) -> bool:
    marker = jar_cache() / name / ".complete"
    return marker.exists() and marker.read_text().strip() == _marker(name)


def _artifact(jar_name: str) -> str:
    return _VERSION_SUFFIX.sub("", jar_name)


def _drop_provided_by_pyspark(folder: Path) -> list[str]:
    """Remove jars whose artifact pyspark already ships: Spark's class path is 'provided'."""
    import pyspark

    shipped = {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    dropped = []
    for jar in folder.glob("*.jar"):
        if _artifact(jar.name) in shipped:
            jar.unlink()
            dropped.append(jar.name)
    return dropped


def ensure_jars(names: tuple[str, ...] = ("kafka", "spark"), quiet: bool = False) -> Path:
    """Fetch every named class path that is not complete yet; return the cache root."""
    for name in names:
        if _complete(name):
            continue
        if shutil.which("mvn") is None:
            raise JarsMissing("Maven (mvn) is needed once to fetch the pinned jars")
        target = jar_cache() / name
        staging = target.with_name(name + ".staging")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        if not quiet:
            print(f"fetching pinned {name} jars into {target} (once)", flush=True)
        cmd = ["mvn", "-q", "-B", "-f", str(_pom(name)), f"{_DEPENDENCY_PLUGIN}:copy-dependencies",
               f"-DoutputDirectory={staging}", "-DincludeScope=runtime"]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=staging)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
            raise JarsMissing(f"mvn could not resolve {_POMS[name]}:\n{tail}")
        if name == "spark":
            _drop_provided_by_pyspark(staging)
        (staging / ".complete").write_text(_marker(name))
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return jar_cache()


def broker_classpath() -> str:
    folder = ensure_jars(("kafka",)) / "kafka"
    return os.pathsep.join(str(p) for p in sorted(folder.glob("*.jar")))


def _sources() -> list[Path]:
    return sorted((Path(__file__).resolve().parent / "jvm" / "src").rglob("*.java"))


def native_jar(quiet: bool = False) -> Path:
    """The project's JVM code as a jar, compiled when its sources or pyspark changed."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    digest = hashlib.sha256(pyspark.__version__.encode())
    for src in _sources():
        digest.update(src.read_bytes())
    folder = jar_cache() / "native"
    jar, marker = folder / "kafka-audit-spark.jar", folder / ".complete"
    if jar.exists() and marker.exists() and marker.read_text().strip() == digest.hexdigest():
        return jar
    for tool in ("javac", "jar"):
        if shutil.which(tool) is None:
            raise JarsMissing(f"the JDK's {tool} is needed once to build {jar.name}")
    if not quiet:
        print(f"compiling {jar.name} against pyspark {pyspark.__version__} (once)", flush=True)
    staging = folder.with_name("native.staging")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "classes").mkdir(parents=True)
    steps = [["javac", "-Xlint:all,-path", "-Werror", "--release", "17", "-cp", f"{jars}/*",
              "-d", str(staging / "classes"), *map(str, _sources())],
             ["jar", "cf", str(staging / jar.name), "-C", str(staging / "classes"), "."]]
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise JarsMissing(f"{cmd[0]} failed:\n{proc.stdout}{proc.stderr}")
    shutil.rmtree(staging / "classes")
    (staging / ".complete").write_text(digest.hexdigest())
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    return jar


def spark_jars() -> str:
    folder = ensure_jars(("spark",)) / "spark"
    return ",".join([*(str(p) for p in sorted(folder.glob("*.jar"))), str(native_jar())])
