"""Checks shared by the plugin's real-cluster tests: what a topic holds, stamp by stamp, the
ledger's rows per delivery report, the demo's fault around a running producer, and the
shipper run as an operator runs it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from dataclasses import dataclass

from kafka_audit.scenarios.groundtruth import end_offsets
from kafka_audit.schemas.stamp import Stamp, StampError, checksum_ok, stamp_of_headers
from kafka_audit.store import read_table

__all__ = ["Record", "read_log", "ledger_rows", "ledger_reports", "ledger_sources",
           "leader_kill", "acked_twice", "kill_until_a_loss", "ship", "losses_as_found"]


@dataclass(frozen=True)
class Record:
    stamp: Stamp | None  # None: no stamp
    malformed: bool
    checksum_ok: bool | None
    value: bytes | None
    headers: tuple


def read_log(bootstrap: str, topic: str, timeout: float = 180, checksums: bool = True,
             mac=None) -> dict[tuple[int, int], Record]:
    """Every record of ``topic`` (read_uncommitted): (partition, offset) -> :class:`Record`
    (``checksums=False``: not checked, ``checksum_ok`` None: the pure-Python XXH64 is slow;
    ``mac``: the stamp key's, a forged stamp counting as malformed)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from kafka_audit.clients import consumer_config

    c = Consumer(consumer_config(bootstrap, "native-check", **{"auto.offset.reset": "earliest"}))
    try:
        parts = sorted(c.list_topics(topic, timeout=10).topics[topic].partitions)
        ends = end_offsets(c, topic, parts)
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        out: dict[tuple[int, int], Record] = {}
        remaining = {p for p in parts if ends[p] > 0}
        deadline = time.monotonic() + timeout
        while remaining:
            if time.monotonic() > deadline:
                raise TimeoutError(f"read of {topic} did not reach {ends}")
            for m in c.consume(10000, timeout=1):
                if m.error():
                    continue
                try:
                    s, bad = stamp_of_headers(m.headers(), mac), False
                except StampError:
                    s, bad = None, True
                out[(m.partition(), m.offset())] = Record(
                    s, bad, None if s is None or not checksums else checksum_ok(s, m.value()),
                    m.value(), tuple(m.headers() or ()))
            at = c.position([TopicPartition(topic, p) for p in remaining])
            remaining = {tp.partition for tp in at if tp.offset < ends[tp.partition]}
        return out
    finally:
        c.close()


def ledger_rows(settings, run_id: str) -> list[dict]:
    """The ``acks`` table's rows of one producer run, as they are."""
    return [r for r in read_table(settings.table_path("acks"), "acks").to_pylist()
            if r["run_id"] == run_id]


def ledger_reports(settings, producer_id: str, run_id: str | None = None) -> list[tuple]:
    """The ``acks`` table's rows of a producer as one (seq, topic, partition, offset or None,
    error name) per delivery report, sorted."""
    rows = [r for r in read_table(settings.table_path("acks"), "acks").to_pylist()
            if r["producer_id"] == producer_id and run_id in (None, r["run_id"])]
    return sorted((r["seq"] + k, r["topic"], r["partition"],
                   None if r["offset"] is None else r["offset"] + k, r["error_name"])
                  for r in rows for k in range(r["count"]))


def ledger_sources(settings, producer_id: str) -> dict[tuple[int, int], tuple]:
    """(partition, offset) -> (broker, leader_epoch) the ``acks`` table holds for each
    acknowledged report of a producer (None where the client did not tell)."""
    rows = [r for r in read_table(settings.table_path("acks"), "acks").to_pylist()
            if r["producer_id"] == producer_id and r["offset"] is not None]
    return {(r["partition"], r["offset"] + k): (r["broker"], r["leader_epoch"])
            for r in rows for k in range(r["count"])}


def leader_kill(cluster, topic: str, lag_seconds: float = 0.5, progress=print) -> int:
    """The demo's fault (``scenarios/harness.py``, ``produce_with_leader_kill``) around a
    producer that runs meanwhile: freeze partition 0's followers, SIGKILL its leader, let a
    follower without the acked tail be elected, restart the killed node, wait until it is
    back in every ISR, hand leadership back. Returns the killed node."""
    import signal

    from kafka_audit.scenarios.cluster import wait_until

    leader = cluster.leader_of(topic, 0)
    followers = [n for n in cluster.running() if n != leader]
    progress(f"SIGSTOP followers {followers}, SIGKILL leader {leader} of {topic}-0")
    for n in followers:
        cluster.signal(n, signal.SIGSTOP)
    try:
        time.sleep(lag_seconds)  # the lag window itself: part of the fault
        cluster.kill(leader)
    finally:
        for n in followers:
            cluster.signal(n, signal.SIGCONT)
    wait_until(lambda: cluster.leader_of(topic, 0) not in (-1, leader), 60, "a new leader")
    cluster.start(leader)
    wait_until(lambda: leader in cluster.registered_brokers(), 60, f"node {leader} to rejoin")
    wait_until(lambda: all(leader in p.isr for p in cluster.partitions(topic)), 60,
               f"node {leader} back in every ISR")
    for info in cluster.partitions(topic):
        cluster.elect_preferred(topic, info.partition)
    return leader


def acked_twice(told: list[tuple[int, int]]) -> int:
    """Offsets a client was told twice (a truncated write's, then its successor's) in its
    own account of its acks, ``told``: (partition, offset) of each success."""
    return len(told) - len(set(told))


def kill_until_a_loss(cluster, topic: str, told) -> tuple[int, int]:
    """The demo's fault under a producer that runs meanwhile, each attempt with the
    followers frozen longer (all well inside replica.lag.time.max.ms: they stay in the
    ISR), until the client's own account (``told()``) shows an offset acknowledged twice:
    whether a fault lost writes is the cluster's to decide (in CI a 0.5 s lag window has
    acknowledged nothing, three times in one run). (the node killed last, attempts)."""
    attempts = 0
    for lag in (0.5, 1.5, 3.0, 5.0):
        attempts += 1
        killed = leader_kill(cluster, topic, lag_seconds=lag)
        time.sleep(3)  # and after the heal: the frontier must pass the loss
        if acked_twice(told()):
            break
    return killed, attempts


def ship(settings):
    """``kafka-audit ship``, as an operator runs it beside a producer in another language."""
    from kafka_audit.scenarios.harness import settings_file

    conf = settings_file(settings, settings.home_dir / "ship.yaml")
    exe = shutil.which("kafka-audit") or sys.executable.replace("python", "kafka-audit")
    proc = subprocess.run([exe, "ship"], env={"KAFKA_AUDIT_CONFIG": str(conf), "PATH": "/usr/bin"},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def losses_as_found(spark, settings, cluster, topic: str, producer_id: str, run_id: str,
                    told: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """After a leader kill under a producer in another language: its spool shipped, the
    ledger equals the client's own account of its acks (``told``: (partition, offset) of
    each success, sorted; an offset acked twice was lost once), the
    ground truth from a full read (each lost write's offset reused), and the auditor's
    loss findings equal to it, each caused by the fail-over or saying the watcher was
    blind through it (a loaded machine: its metadata requests time out while the
    followers are frozen). The truth: (partition, offset, seq) of each lost write."""
    from kafka_audit.scenarios.harness import audit_until_settled, expand_rows, findings_of
    from kafka_audit.schemas.verdicts import cause_name

    ship(settings)
    reports = ledger_reports(settings, producer_id, run_id)
    assert sorted((part, off) for _s, _t, part, off, e in reports if e is None) == told
    log = read_log(cluster.bootstrap, topic, checksums=False)
    found = {r.stamp.seq for r in log.values() if r.stamp is not None}
    truth = sorted((part, off, seq) for seq, _t, part, off, e in reports
                   if e is None and seq not in found)
    assert truth, (f"acks=1 with leader SIGKILLs mid-stream is expected to lose writes; the "
                   f"client reported {len(told)} deliveries")
    assert len(truth) == acked_twice(told)  # each lost one's offset reused
    audit_until_settled(spark, settings, topic, progress=print)
    lost = [r for r in findings_of(settings, topic) if r["kind"] in ("lost", "lost_after_seen")]
    assert expand_rows(lost, "partition", "offset", "seq") == truth
    assert all(cause_name(r["cause"]) == "acks=1 fail-over" or r["cause"].startswith(
        "unknown: watcher blind") for r in lost), {r["cause"] for r in lost}
    assert {r["run_id"] for r in lost} == {run_id}
    return truth
