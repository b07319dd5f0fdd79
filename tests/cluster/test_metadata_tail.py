"""The metadata log's Java tail (``jobs/watcher/MetadataTail.java``) on a copy of a real
node's ``__cluster_metadata`` folder: every record once, in offset order, decoded by
Kafka's serde, the folder's files untouched (it opens them read-only and never trims)."""

import hashlib
import json
import shutil
import subprocess

from kafka_audit.jobs.watcher.metadata_log import MetadataFold, tail_command


def digests(folder) -> dict:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in folder.iterdir()}


def test_the_tail_reads_every_record_once_and_writes_nothing(cluster, tmp_path):
    source = cluster.node_dir(1) / "meta" / "__cluster_metadata-0"
    copy = tmp_path / "__cluster_metadata-0"
    shutil.copytree(source, copy)
    before = digests(copy)
    proc = subprocess.Popen(tail_command([copy, copy]), stdout=subprocess.PIPE, text=True)
    lines = []
    try:
        for line in proc.stdout:  # read until the first look says where it stands
            rec = json.loads(line)
            if rec["type"] == "_AT":
                break
            lines.append(rec)
    finally:
        proc.terminate()
        proc.wait(10)
    assert digests(copy) == before
    offsets = [r["offset"] for r in lines]
    # two copies of one folder: each offset still once, in order, none left out
    assert offsets == list(range(offsets[0], offsets[0] + len(offsets))) and offsets[0] == 0
    assert rec["next"] == offsets[-1] + 1
    types = {r["type"] for r in lines}
    assert {"TOPIC_RECORD", "PARTITION_RECORD", "REGISTER_BROKER_RECORD",
            "LEADER_CHANGE"} <= types
    fold = MetadataFold()
    rows = [row for r in lines for row in fold.apply(r)]
    # every topic the cluster has was created in this log; each is named in the rows
    named = {r["topic"] for r in rows if r["kind"] == "first_seen"}
    assert {p.topic for p in cluster.partitions() if not p.topic.startswith("_")} <= named
