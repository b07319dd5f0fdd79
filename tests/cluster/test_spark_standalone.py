"""The scale path: the same jobs, unchanged, on a standalone Spark cluster with no shared
disk, its warehouse and checkpoints in an object store.

A standalone master and two workers, each with a work folder of its own, are started from
the pyspark package's own ``spark-class``; ``kafka-audit consume --once`` and
``kafka-audit audit --once`` run against them (``spark.master: spark://...``) as
processes of their own, over a copy of the ack ledger of a topic in a bucket of the S3
server, while local mode audits the topic in this process on local disk. Both give the
same findings, write for write (confirmed ones and the writes retention removed first).
"""

import collections
import socket
import subprocess
import sys
from pathlib import Path

from confluent_kafka import TopicPartition
from pyarrow import fs

from kafka_audit import storage
from kafka_audit.producers.load import LoadSpec, run_load
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.scenarios.harness import audit_until_settled, findings_of, settings_file


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def per_write(findings) -> list[tuple]:
    return sorted((r["kind"], r["subkind"], r["partition"], r["producer_id"], r["seq"] + k,
                   None if r["offset"] is None else r["offset"] + k)
                  for r in findings for k in range(r["count"]))


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_the_jobs_on_a_standalone_spark_cluster_give_local_mode_findings(
        cluster, spark, settings, s3_settings, topic, tmp_path):
    p = run_load(settings, LoadSpec(topic=topic, rate=0, count=3000, acks="all"),
                 keep_record=True)
    # retention removes part of a partition before anyone reads it: the busiest one's first
    # third (the sticky partitioner spreads 3,000 writes unevenly)
    per_partition = collections.Counter(part for _seq, _t, part, _off in p.record)
    busiest, n = per_partition.most_common(1)[0]
    admin = cluster.admin()
    for fut in admin.delete_records([TopicPartition(topic, busiest, n // 3)]).values():
        fut.result(30)
    standalone = s3_settings.model_copy(update={"home": tmp_path / "standalone"})
    to = storage.locate(standalone.table_path("acks"))
    fs.copy_files(settings.table_path("acks"), to.path, destination_filesystem=to.fs)
    audit_until_settled(spark, settings, topic, progress=print)  # local mode, in this process

    spark_class = Path(sys.executable).with_name("spark-class")
    port, ui = free_port(), free_port()
    env = {"SPARK_LOCAL_IP": "127.0.0.1",
           "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"}
    logs = [open(tmp_path / "master.log", "wb")]
    master = subprocess.Popen([str(spark_class), "org.apache.spark.deploy.master.Master",
                               "--host", "127.0.0.1", "--port", str(port),
                               "--webui-port", str(ui)], env=env, stdout=logs[0],
                              stderr=subprocess.STDOUT)
    workers, work = [], [tmp_path / "work1", tmp_path / "work2"]
    try:
        wait_until(lambda: listening(port), 60, "the Spark master")
        for n, folder in enumerate(work, 1):
            logs.append(open(tmp_path / f"worker{n}.log", "wb"))
            workers.append(subprocess.Popen(
                [str(spark_class), "org.apache.spark.deploy.worker.Worker",
                 f"spark://127.0.0.1:{port}", "--cores", "1", "--memory", "1g",
                 "--webui-port", str(free_port()), "--work-dir", str(folder)],
                env=env, stdout=logs[-1], stderr=subprocess.STDOUT))
        for n in (1, 2):
            wait_until(lambda n=n: "Successfully registered with master"
                       in (tmp_path / f"worker{n}.log").read_text(errors="replace"), 60,
                       f"worker {n} to register")
        on_cluster = standalone.model_copy(update={"spark": standalone.spark.model_copy(
            update={"master": f"spark://127.0.0.1:{port}",
                    "properties": {"spark.executor.memory": "768m"}})})
        env_run = {k: v for k, v in __import__("os").environ.items()
                   if not k.startswith("KAFKA_AUDIT_")}
        env_run["KAFKA_AUDIT_CONFIG"] = str(settings_file(on_cluster, tmp_path / "c.yaml"))
        exe = str(Path(sys.executable).with_name("kafka-audit"))
        # one read to the end, then passes in one driver until none is pending (settle
        # 1 s; what retention removed is re-read and judged with the rest)
        for cmd in (["consume", "--once", "--topics", topic],
                    ["audit", "--until-settled", "300"]):
            done = subprocess.run([exe, *cmd], env=env_run, capture_output=True, text=True,
                                  timeout=600)
            assert done.returncode == 0, done.stderr[-3000:]
        passes = [line for line in done.stdout.splitlines() if line.startswith("audit pass")]
        assert passes and " 0 pending " in passes[-1], passes
        assert all(" 0 pending " not in line for line in passes[:-1]), passes
        for folder in work:  # each worker ran executors, in its own folder
            assert folder.is_dir() and any(folder.iterdir()), f"no executor ran in {folder}"
    finally:
        for proc in (*workers, master):
            if proc is not None:
                proc.terminate()
                proc.wait(30)
        for f in logs:
            f.close()
    local = per_write(findings_of(settings, topic))
    remote = per_write(findings_of(standalone, topic))
    kinds = {k for k, *_ in local}
    assert kinds == {"confirmed", "unverified"}, kinds
    assert len(local) == p.acked == 3000
    assert remote == local
    # nothing of the audit on the driver's disk: the tables and checkpoints are in the bucket
    assert not (standalone.home_dir / "warehouse").exists()
    assert not (standalone.home_dir / "checkpoints").exists()
    commit0 = storage.locate(f"{standalone.warehouse_uri}/_checkpoints/consume/commits/0")
    assert commit0.fs.get_file_info(commit0.path).is_file  # the query's first batch, there
