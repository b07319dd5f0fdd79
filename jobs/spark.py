"""One way to build a SparkSession: pinned jars through ``spark.jars``, Delta enabled.

The Kafka source and Delta jars come from the Maven cache (``kafka_audit/jars.py``);
nothing is downloaded through Ivy at run time. ``spark.master`` comes from the
settings: ``local[2]`` by default, ``spark://host:port`` for a standalone cluster.
"""

from __future__ import annotations

import os
import re
import sys
from importlib import resources

from kafka_audit.jars import spark_jars
from kafka_audit.redact import SPARK_REDACTION_REGEX
from kafka_audit.settings import Settings
from kafka_audit.storage import StorageSettings, spark_properties

__all__ = ["get_spark", "local_master", "object_store_properties", "jvm_alive",
           "raise_if_jvm_died", "forget_dead_session", "JvmDied"]

_LOG4J = resources.files("kafka_audit.conf").joinpath("spark-log4j2.xml")


_LOCAL = re.compile(r"local(?:\[(\d+|\*)\])?")


class JvmDied(RuntimeError):
    """The Spark driver JVM of a session is gone (killed, out of memory): a job that sees
    it ends, and the service starts it again on a new JVM (``app/service.py``)."""


def jvm_alive(spark) -> bool:
    """Whether the driver JVM that ``spark`` talks to still runs (True when pyspark did not
    start it: under spark-submit the JVM is not ours to watch)."""
    context = getattr(spark, "sparkContext", None)  # None: a stand-in (tests of the loops)
    proc = getattr(getattr(context, "_gateway", None), "proc", None)
    return proc is None or proc.poll() is None


def raise_if_jvm_died(spark, exc: BaseException) -> None:
    """Raise :class:`JvmDied` (from ``exc``) when ``spark``'s JVM is gone: retrying the
    failed work on that session would fail forever."""
    if not jvm_alive(spark):
        raise JvmDied(f"the Spark driver JVM exited ({type(exc).__name__}); this job "
                      f"starts again on a new one") from exc


def forget_dead_session() -> bool:
    """Drop pyspark's process-wide handles to a driver JVM that has exited (killed, out of
    memory, or dead while the session was being made), so that the next :func:`get_spark`
    starts a new JVM instead of handing the dead one back; False (nothing done) while
    the JVM runs, or when pyspark did not start it."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if gateway is None or proc is None or proc.poll() is None:
        return False
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
    SparkContext._active_spark_context = None
    SparkContext._gateway = None
    SparkContext._jvm = None
    return True


def local_master(master: str, attempts: int) -> str:
    """``local`` or ``local[N]`` as ``local[N,attempts]``: Spark's local mode gives a task
    one try unless its master names more (``spark.task.maxFailures`` does not apply there).
    Any other master (``local[N,F]``, ``spark://...``) is returned as it is."""
    m = _LOCAL.fullmatch(master.strip())
    if m is None or attempts <= 1:
        return master
    return f"local[{m.group(1) or 1},{attempts}]"


def object_store_properties(storage: StorageSettings) -> dict[str, str]:
    """A session's properties for an object-store warehouse: S3A with the ``storage``
    section's endpoint and credentials (``spark.hadoop.fs.s3a.*``; the tables are named
    ``s3a://`` on Spark's side, ``storage.spark_uri``), and Delta's commits through
    ``ConditionalPutLogStore`` (``jobs/ConditionalPutLogStore.java``: ``If-None-Match``,
    as delta-rs commits, so producer hosts and the service may commit to one table at
    once)."""
    return {**spark_properties(storage),
            "spark.delta.logStore.s3a.impl": "kafka_audit.spark.ConditionalPutLogStore"}


def get_spark(settings: Settings, app_name: str = "kafka-audit"):
    from pyspark.sql import SparkSession

    from kafka_audit.store import tombstone_retention

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers use this venv
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # local mode talks over loopback only
    builder = SparkSession.builder.appName(app_name)
    master = local_master(settings.spark.master, settings.spark.local_task_attempts)
    if not os.environ.get("PYSPARK_GATEWAY_PORT"):
        # started by us: the master and the pinned jars from the settings; under
        # spark-submit (which starts the JVM first) its --master and --jars apply instead
        builder = builder.master(master).config("spark.jars", spark_jars())
    if master.startswith("local") or "127.0.0.1" in master or "localhost" in master:
        # keep the driver on loopback: by default it binds to the host's first interface
        # (a cluster elsewhere must reach it: then Spark picks, or spark.properties say)
        builder = (builder.config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1"))
    builder = (
        builder
        .config("spark.driver.memory", settings.spark.driver_memory)
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog",
                "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.shuffle.partitions", str(settings.spark.shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        # Delta's log replay uses 50 tasks by default: far too many for small local tables
        .config("spark.databricks.delta.snapshotPartitions", "2")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        # a Delta checkpoint costs seconds here; every 10 commits (the default) that is a
        # tax of ~10% on each consume micro-batch and audit pass: new tables take 100
        .config("spark.databricks.delta.properties.defaults.checkpointInterval", "100")
        # removed files named in checkpoints for hours, not a week (store.py says why)
        .config("spark.databricks.delta.properties.defaults.deletedFileRetentionDuration",
                tombstone_retention(settings.steady.tombstone_retention_hours))
        # an audit pass reads the files added since the last one by path: list them on the
        # driver, not with a Spark job per pass once there are more than 32
        .config("spark.sql.sources.parallelPartitionDiscovery.threshold", "100000")
        # arrow for applyInPandas; small batches keep the Python workers lean
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.extraJavaOptions", " ".join([
            f"-Dderby.system.home={settings.home_dir / 'spark'}",
            f"-Dlog4j2.configurationFile={_LOG4J}",
            f"-Dkafka_audit.spark.level={settings.spark.log_level}"]))
        # the Kafka source's options carry the SASL JAAS config (a password): Spark shows
        # options in plans and errors, redacted by this pattern: the one secret rule
        # (kafka_audit/redact.py) and Spark's default, "(?i)url"
        .config("spark.sql.redaction.options.regex", SPARK_REDACTION_REGEX)
        .config("spark.sql.warehouse.dir", str(settings.home_dir / "spark" / "warehouse"))
    )
    if settings.remote_warehouse:
        for key, value in object_store_properties(settings.storage).items():
            builder = builder.config(key, value)
    for key, value in settings.spark.properties.items():  # the operator's, last: they win
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings.spark.log_level)
    return spark
