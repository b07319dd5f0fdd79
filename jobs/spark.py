"""One way to build a SparkSession: pinned jars through ``spark.jars``, Delta enabled.

The Kafka source and Delta jars come from the Maven cache (``deploy/jvm.py``);
nothing is downloaded through Ivy at run time. ``spark.master`` comes from the
settings: ``local[2]`` by default, ``spark://host:port`` for a standalone cluster.
"""

from __future__ import annotations

import os
import sys

from kafka_audit.deploy.jvm import spark_jars
from kafka_audit.settings import Settings

__all__ = ["get_spark"]


def get_spark(settings: Settings, app_name: str = "kafka-audit"):
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers use this venv
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # local mode talks over loopback only
    builder = (
        SparkSession.builder.appName(app_name)
        .master(settings.spark.master)
        .config("spark.jars", spark_jars())
        .config("spark.driver.memory", settings.spark.driver_memory)
        # keep the driver on loopback: by default it binds to the host's first interface
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
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
        # an audit pass reads the files added since the last one by path: list them on the
        # driver, not with a Spark job per pass once there are more than 32
        .config("spark.sql.sources.parallelPartitionDiscovery.threshold", "100000")
        # arrow for applyInPandas; small batches keep the Python workers lean
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.extraJavaOptions", "-Dderby.system.home=" +
                str(settings.home_dir / "spark"))
        .config("spark.sql.warehouse.dir", str(settings.home_dir / "spark" / "warehouse"))
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
