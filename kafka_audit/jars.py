"""Pinned JVM class paths, fetched once from Maven Central with Maven.

The Maven files in ``deploy/maven/`` (data a deployer reads: the pins) pin what the JVM
processes need:

* ``kafka-broker.pom.xml``: the Kafka broker (``kafka.Kafka``), its storage
  tool and a log4j2 binding; at its pinned version (``kafka``), or at another of
  :data:`KAFKA_VERSIONS` for the local cluster (``cluster.kafka_version``: the
  property overridden, into ``kafka-<version>``);
* ``kafka-zookeeper.pom.xml``: the same for the ZooKeeper-era versions
  (:data:`ZOOKEEPER_VERSIONS`): Kafka 3.9, its ZooKeeper server and log4j 1 (reload4j);
* ``spark-extras.pom.xml``: the Spark Kafka source at pyspark's exact version
  and Delta's jar for the Spark 4.1 line;
* ``s3proxy.pom.xml``: the S3-compatible server of the tests (fetched by ``dev.sh``'s
  setup, not by ``kafka-audit setup``: a deployment brings its own object store).

``ensure_jars`` resolves each file with ``maven-dependency-plugin`` into
``<jar_cache()>/<name>`` (the per-user cache) and writes a marker holding the hash of
the Maven file, so a second call is a no-op and an edited pin is fetched again.
Spark sessions get the extras through ``spark.jars``; nothing downloads through
Ivy at run time.

``native_jar`` compiles the project's own JVM code for Spark (``jobs/consume/ReadRuns.java``:
the consume job's one-pass read-run fold; ``jobs/ConditionalPutLogStore.java``: Delta's
commits to an object store) with ``javac`` against the jars the pyspark wheel ships and
the extras, once per source and class path, into the cache's ``native`` folder; it joins
the other extras on ``spark.jars``.

``plugin_library`` builds the producers' librdkafka interceptor plugin
(``producers/plugin/kaudit.c``) with gcc the same way, once per source, compiler
and librdkafka header, into ``<jar_cache()>/kaudit-plugin``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from kafka_audit.errors import JarsMissing

__all__ = ["jar_cache", "ensure_jars", "broker_classpath", "tools_classpath", "spark_jars",
           "native_jar", "client_tools_jar", "plugin_library", "KAFKA_VERSIONS",
           "ZOOKEEPER_VERSIONS", "LOCAL_VERSIONS"]

_POMS = {"kafka": "kafka-broker.pom.xml", "spark": "spark-extras.pom.xml",
         "s3proxy": "s3proxy.pom.xml"}
#: the KRaft versions the local cluster runs (``cluster.kafka_version``), each proven by
#: the scenario matrix: the pinned one (``kafka-broker.pom.xml``) first, then the newest
#: 4.x Maven Central serves here (the tools' jars: :func:`tools_classpath`)
KAFKA_VERSIONS = ("4.1.1", "4.4.0")
#: the ZooKeeper-era versions it runs too (``kafka-zookeeper.pom.xml``: a ZooKeeper
#: server beside the brokers, no KRaft): Kafka 3.9, the last line with ZooKeeper
ZOOKEEPER_VERSIONS = ("3.9.2",)
#: every version the local cluster runs
LOCAL_VERSIONS = KAFKA_VERSIONS + ZOOKEEPER_VERSIONS
_DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
_VERSION_SUFFIX = re.compile(r"-\d[0-9A-Za-z.\-]*\.jar$")


def jar_cache() -> Path:
    """The cache root: ``$KAFKA_AUDIT_JAR_CACHE``, else ``jars`` in the per-user cache folder
    (``$XDG_CACHE_HOME/kafka-audit``, ``~/.cache/kafka-audit`` by default): never inside the
    installed package or the current directory."""
    env = os.environ.get("KAFKA_AUDIT_JAR_CACHE")
    if env:
        return Path(env).resolve()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).resolve() / "kafka-audit" / "jars"


def _pom(name: str) -> Path:
    if name.partition("-")[2] in ZOOKEEPER_VERSIONS:
        return _folder("kafka_audit.deploy.maven") / "kafka-zookeeper.pom.xml"
    return _folder("kafka_audit.deploy.maven") / _POMS[name.partition("-")[0]]


def _overrides(name: str) -> list[str]:
    """The Maven properties a class path's name sets: ``kafka-4.4.0``, the broker's at 4.4.0."""
    base, _, version = name.partition("-")
    return [f"-D{base}.version={version}"] if version else []


def _marker(name: str) -> str:
    return hashlib.sha256(_pom(name).read_bytes()
                          + "\n".join(_overrides(name)).encode()).hexdigest()


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


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    """``<cache>/<name>.lock`` held: one process at a time fetches or builds ``name`` (two
    test sessions, a CI clone beside a checkout), the others wait and then find it done."""
    jar_cache().mkdir(parents=True, exist_ok=True)
    with open(jar_cache() / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def ensure_jars(names: tuple[str, ...] = ("kafka", "spark"), quiet: bool = False) -> Path:
    """Fetch every named class path that is not complete yet; return the cache root."""
    for name in names:
        if _complete(name):
            continue
        with _locked(name):
            if not _complete(name):  # another process may have fetched it meanwhile
                _fetch(name, quiet)
    return jar_cache()


def _fetch(name: str, quiet: bool) -> None:
    if shutil.which("mvn") is None:
        raise JarsMissing("Maven (mvn) is needed once to fetch the pinned jars")
    target = jar_cache() / name
    staging = target.with_name(name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    if not quiet:
        print(f"fetching pinned {name} jars into {target} (once)", flush=True)
    cmd = ["mvn", "-q", "-B", "-f", str(_pom(name)), f"{_DEPENDENCY_PLUGIN}:copy-dependencies",
           f"-DoutputDirectory={staging}", "-DincludeScope=runtime", *_overrides(name)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=staging)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
        raise JarsMissing(f"mvn could not resolve {_pom(name).name} "
                          f"{' '.join(_overrides(name))}:\n{tail}")
    if name == "spark":
        _drop_provided_by_pyspark(staging)
    (staging / ".complete").write_text(_marker(name))
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)


def broker_classpath(version: str | None = None, quiet: bool = False) -> str:
    """The broker's class path: the pinned version's, or ``version``'s (one of
    :data:`KAFKA_VERSIONS`, fetched once; ``quiet``: without a progress line)."""
    if version is not None and version not in LOCAL_VERSIONS:
        raise JarsMissing(f"Kafka {version} is not one the local cluster runs: "
                          f"{', '.join(LOCAL_VERSIONS)}")
    name = "kafka" if version in (None, KAFKA_VERSIONS[0]) else f"kafka-{version}"
    folder = ensure_jars((name,), quiet=quiet) / name
    return os.pathsep.join(str(p) for p in sorted(folder.glob("*.jar")))


def _folder(package: str) -> Path:
    """The folder of one of our packages, found by name: the jars are the ground floor, so
    they look up the parts' source files without importing the parts."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise JarsMissing(f"{package} is not installed beside kafka_audit")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def _sources(*packages: str, patterns: tuple[str, ...] = ("*.java",)) -> list[Path]:
    """The source files beside the modules of ``packages`` (``jobs/consume/*.java``...)."""
    return sorted(f for package in packages for pattern in patterns
                  for f in _folder(package).glob(pattern))


def _compile(name: str, sources: list[Path], classpath: str, against: str,
             quiet: bool) -> Path:
    """``sources`` as ``<cache>/<name>/<name>.jar``, compiled once per source and class path
    (a marker holds their digest); ``against`` names the class path in the progress line."""
    digest = hashlib.sha256(f"{against}\n{classpath}".encode())
    for src in sources:
        digest.update(src.read_bytes())
    folder = jar_cache() / name
    jar, marker = folder / f"{name}.jar", folder / ".complete"

    def built() -> bool:
        return jar.exists() and marker.exists() and \
            marker.read_text().strip() == digest.hexdigest()

    if built():
        return jar
    with _locked(name):
        if not built():  # another process may have built it meanwhile
            _build(name, sources, classpath, against, quiet, digest.hexdigest())
    return jar


def _build(name: str, sources: list[Path], classpath: str, against: str, quiet: bool,
           digest: str) -> None:
    folder = jar_cache() / name
    jar = folder / f"{name}.jar"
    for tool in ("javac", "jar"):
        if shutil.which(tool) is None:
            raise JarsMissing(f"the JDK's {tool} is needed once to build {jar.name}")
    if not quiet:
        print(f"compiling {jar.name} against {against} (once)", flush=True)
    staging = folder.with_name(f"{name}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "classes").mkdir(parents=True)
    steps = [["javac", "-Xlint:all,-path", "-Werror", "--release", "17", "-cp", classpath,
              "-d", str(staging / "classes"), *map(str, sources)],
             ["jar", "cf", str(staging / jar.name), "-C", str(staging / "classes"), "."]]
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise JarsMissing(f"{cmd[0]} failed:\n{proc.stdout}{proc.stderr}")
    shutil.rmtree(staging / "classes")
    (staging / ".complete").write_text(digest)
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)


def native_jar(quiet: bool = False) -> Path:
    """The Spark jobs' JVM code as a jar: the consume job's fold (``jobs/consume/*.java``) and
    the Delta log store of an object-store warehouse (``jobs/*.java``), compiled against the
    pyspark wheel's own jars and the pinned extras when the sources or the jars changed."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    extras = ensure_jars(("spark",), quiet=quiet) / "spark"
    return _compile("native", _sources("kafka_audit.jobs.consume", "kafka_audit.jobs"),
                    f"{jars}/*{os.pathsep}{extras}/*", f"pyspark {pyspark.__version__}", quiet)


def tools_classpath(quiet: bool = False) -> str:
    """The Kafka jars the Java tools run on: the newest of :data:`KAFKA_VERSIONS`, whose
    metadata serde reads the records of every older version (4.1's cannot read 4.4's)."""
    return broker_classpath(KAFKA_VERSIONS[-1], quiet)


def client_tools_jar(quiet: bool = False) -> Path:
    """The Java tools that use Kafka's own client and metadata classes, compiled against
    :func:`tools_classpath`: ``kafka-audit check``'s probe (``kafka_audit/app/Preflight.java``)
    and the watcher's metadata-log tail (``jobs/watcher/MetadataTail.java``)."""
    return _compile("client-tools", _sources("kafka_audit.app", "kafka_audit.jobs.watcher"),
                    tools_classpath(quiet), f"Kafka {KAFKA_VERSIONS[-1]}'s jars", quiet)


def spark_jars() -> str:
    folder = ensure_jars(("spark",)) / "spark"
    return ",".join([*(str(p) for p in sorted(folder.glob("*.jar"))), str(native_jar())])


PLUGIN_DIR = "kaudit-plugin"
#: gcc flags of the plugin: a shared object that does not link librdkafka (its rd_kafka_*
#: symbols resolve from the client's own library at load time), exporting conf_init only
PLUGIN_CFLAGS = ["-O2", "-g", "-fPIC", "-shared", "-fvisibility=hidden", "-std=gnu11",
                 "-Wall", "-Wextra", "-Werror", "-pthread"]
#: after the sources (a library before them is dropped by --as-needed): OpenSSL's libcrypto,
#: for the stamp MAC (HMAC-SHA256, kaudit.stamp.key.file)
PLUGIN_LIBS = ["-lcrypto"]


def _plugin_sources() -> list[Path]:
    return _sources("kafka_audit.producers.plugin", patterns=("*.c", "*.h"))


def plugin_library(quiet: bool = False, defines: tuple[str, ...] = (),
                   folder: Path | None = None) -> Path:
    """The librdkafka interceptor plugin (``producers/plugin/kaudit.c``) as
    ``<cache>/kaudit-plugin/libkaudit.so``, built with gcc once per source, compiler and
    librdkafka header (a marker holds their digest).

    The headers come from Debian's ``librdkafka-dev`` (``dev.sh`` installs it): the plugin
    uses only APIs that librdkafka 2.0.2's header already declares, and it is loaded into
    whatever librdkafka the client runs (the confluent-kafka wheel's 2.16.0, kcat's 2.0.2),
    which it checks at load time. ``defines`` and ``folder``: a variant for tests.
    Without gcc, a library already built there from these same sources is taken (the
    container image builds it in its build stage and carries no compiler); one built from
    other sources (an upgrade since) is not."""
    target = folder or jar_cache() / PLUGIN_DIR
    lib, marker, built_from = target / "libkaudit.so", target / ".complete", target / ".sources"
    sources = _plugin_sources()
    from_digest = hashlib.sha256(b"".join([*(s.read_bytes() for s in sources),
                                           *(d.encode() for d in defines)])).hexdigest()
    if shutil.which("gcc") is None:
        if lib.exists() and marker.exists() and built_from.exists() and \
                built_from.read_text().strip() == from_digest:
            return lib
        raise JarsMissing("gcc is needed once to build the kaudit plugin (Debian: gcc)")
    probe = subprocess.run(["gcc", "-E", "-M", "-x", "c", "-"], input="#include "
                           "<librdkafka/rdkafka.h>\n", capture_output=True, text=True)
    if probe.returncode != 0:
        raise JarsMissing("the librdkafka headers are needed to build the kaudit plugin "
                          "(Debian: librdkafka-dev): " + probe.stderr.strip().splitlines()[-1])
    ssl = subprocess.run(["gcc", "-E", "-M", "-x", "c", "-"], input="#include "
                         "<openssl/evp.h>\n", capture_output=True, text=True)
    if ssl.returncode != 0:
        raise JarsMissing("OpenSSL's headers are needed to build the kaudit plugin (Debian: "
                          "libssl-dev): " + ssl.stderr.strip().splitlines()[-1])
    headers = [Path(p) for p in probe.stdout.replace("\\\n", " ").split()[2:]
               if "rdkafka" in p]
    version = subprocess.run(["gcc", "-dumpfullversion"], capture_output=True, text=True)
    digest = hashlib.sha256("\n".join([version.stdout, *PLUGIN_CFLAGS, *PLUGIN_LIBS,
                                        *defines]).encode())
    for src in [*sources, *headers]:
        digest.update(src.read_bytes())
    if lib.exists() and marker.exists() and marker.read_text().strip() == digest.hexdigest():
        return lib
    if not quiet:
        print(f"building {lib} with gcc (once)", flush=True)
    target.mkdir(parents=True, exist_ok=True)
    # each builder writes its own file and renames it into place: a process that loaded
    # the old library keeps it, a concurrent builder's rename is as good as ours
    tmp = target / f".libkaudit.{os.getpid()}.so"
    cmd = ["gcc", *PLUGIN_CFLAGS, *(f"-D{d}" for d in defines), "-o", str(tmp),
           *(str(s) for s in sources if s.suffix == ".c"), *PLUGIN_LIBS]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise JarsMissing(f"gcc failed to build the kaudit plugin:\n{proc.stderr}")
    os.replace(tmp, lib)
    for path, text in ((built_from, from_digest), (marker, digest.hexdigest())):
        path_tmp = target / f"{path.name}.{os.getpid()}"
        path_tmp.write_text(text)
        os.replace(path_tmp, path)
    return lib
