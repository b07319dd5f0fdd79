"""The single declaration of every Delta table and of the message stamp.

Each table is declared once as ``Column`` values; :func:`arrow_schema` and
:func:`spark_schema` derive the pyarrow and Spark types from that one list,
and ``tests/cluster`` proves they agree with the tables on disk.

Who writes what (one writing engine per table, see FIELD-NOTES):

==================  =====================  ===================================
table               writer                 one row per
==================  =====================  ===================================
``acks``            producers (delta-rs)   run of delivery reports (consecutive seqs at
                                           consecutive offsets, or one shared error)
``consumed``        consume job, audit     run of records read (stream) or re-read
                    (Spark)
``cluster_events``  watcher (delta-rs)     observed change of leader/ISR
``findings``        audit job (Spark)      verdict on a range of writes
``partition_state`` audit job (Spark)      partition per audit pass: frontier, pending
``audit_hot``       audit job (Spark)      the audit's state: unjudged runs, progress
``dq_results``      audit job (delta-rs)   expectation result per validated batch
``fault_events``    scenario harness       fault injected (never read by the verdict rules)
``windows``         windows job (delta-rs) interval a partition's writes were at risk
                                           (rewritten whole: derived from the others)
``rollups``         retention (delta-rs)   group of rows a retention round dropped, summed
``suspicions``      suspicion marker       writes a leader change truncated, suspected at
                    (delta-rs)             the fail-over (a state, not a verdict)
==================  =====================  ===================================
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from kafka_audit.schemas.events import EVENTS, WINDOWS, kinds_doc

__all__ = ["Column", "TABLES", "LEDGER_NOTES", "arrow_schema", "spark_schema", "column_names"]

#: the ``commitInfo`` key of an ``acks`` commit by which producers' ack ledgers tell what
#: they could record nowhere (``producers/ledger.py``, the plugin's shipper): a list of
#: notes {"app_id", "dropped_reports" (all of its run so far), "unrecorded" (spans since
#: its last such note)}, several when a commit carries several ledgers' or batches'; the
#: audit turns the spans into ``unrecorded`` findings (``jobs/core/unrecorded.py``)
LEDGER_NOTES = "kafka_audit.ledger"


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # string | long | int | bool | timestamp | double | int_list | date
    nullable: bool = True
    doc: str = ""


_ARROW = {
    "string": pa.string(),
    "long": pa.int64(),
    "int": pa.int32(),
    "bool": pa.bool_(),
    "double": pa.float64(),
    # timezone-aware UTC microseconds: readable and writable by both Delta engines
    "timestamp": pa.timestamp("us", tz="UTC"),
    "int_list": pa.list_(pa.int32()),
    "date": pa.date32(),
}

C = Column

TABLES: dict[str, list[Column]] = {
    "acks": [
        C("run_id", "string", False, "producer run (one process lifetime)"),
        C("producer_id", "string", False, "stable producer name"),
        C("seq", "long", False, "first sequence of the run (stamped in the record)"),
        C("count", "long", False, "reports in the run: seqs seq..seq+count-1"),
        C("topic", "string", False),
        C("partition", "int", False, "-1 when the write failed before a partition was chosen"),
        C("offset", "long", True, "first offset of the run (seq+i at offset+i); null on failure"),
        C("send_time", "timestamp", False, "when the run's first record was produced"),
        C("ack_time", "timestamp", False, "first delivery report of the run"),
        C("last_ack_time", "timestamp", False, "last delivery report of the run"),
        C("error_code", "int", True, "librdkafka error code, shared by the run; null on success"),
        C("error_name", "string", True),
        C("acks", "string", False, "producer acks setting"),
        C("idempotence", "bool", False),
        C("retries", "int", False),
        C("max_in_flight", "int", False),
        C("leader_epoch", "int", True, "leader epoch if the client exposes it (librdkafka "
                                       "does not for produced messages)"),
        C("broker", "int", True, "the broker that acknowledged the run, where the client "
                                 "exposes it (librdkafka through the kaudit plugin; null "
                                 "from confluent-kafka's Python reports)"),
        C("system", "string", True, "kafka | rabbitmq (schemas/systems.py; null: written "
                                    "before the column existed, Kafka's)"),
    ],
    "consumed": [
        C("topic", "string", False),
        C("partition", "int", False),
        C("offset", "long", False, "first offset of the run"),
        C("count", "long", False, "offsets offset..offset+count-1 (seq+i at offset+i)"),
        C("kafka_timestamp", "timestamp", True, "Kafka timestamp of the run's first record"),
        C("stamped", "bool", False, "false for foreign or malformed records (counted, not failed)"),
        C("stamp_error", "string", True, "why a stamp could not be parsed"),
        C("producer_id", "string", True),
        C("run_id", "string", True),
        C("seq", "long", True, "first sequence of the run"),
        C("checksum_ok", "bool", True, "every payload's CRC32 equals its stamped one"),
        C("read_time", "timestamp", False),
        C("batch_id", "long", False, "consume micro-batch, or audit pass for re-reads"),
        C("source", "string", False, "stream (consume job) | reread (direct re-read by the audit)"),
        C("status", "string", False, "record | absent (re-read found no record) | "
                                     "truncated (past the log end) | expired (below the log "
                                     "start); RabbitMQ: record | redelivered (delivered "
                                     "again: presence, never a copy) | barrier (seq: when "
                                     "its publish began, µs since the epoch) | lookup "
                                     "(reread: seqs seq.. of the run, count of them, "
                                     "looked up in consumed; offset -1)"),
        C("leader_epoch", "int", True, "leader epoch of the records (re-reads only)"),
        C("system", "string", True, "kafka | rabbitmq (schemas/systems.py; null: written "
                                    "before the column existed, Kafka's)"),
    ],
    "cluster_events": [
        C("event_time", "timestamp", False),
        C("topic", "string", False),
        C("partition", "int", False),
        C("kind", "string", False, kinds_doc(EVENTS)),
        C("leader", "int", True),
        C("previous_leader", "int", True),
        C("isr", "int_list", True),
        C("previous_isr", "int_list", True),
        C("replicas", "int_list", True),
        C("leader_epoch", "int", True, "from list_offsets(latest), the brokers' metadata, or "
                                      "counted from the KRaft metadata log"),
        C("source", "string", False, "who observed it, e.g. watcher:metadata, "
                                     "kraft:metadata_log (exact order and time)"),
        C("until", "timestamp", True, "watcher_blind: the end of the gap (null: still "
                                      "blind when written)"),
        C("log_end", "long", True, "the partition's log end (high watermark) when observed; "
                                   "log_end_drop: the one it went back to"),
        C("detail", "string", True, "JSON: topic_config: replication factor, "
                                    "min.insync.replicas, unclean.leader.election.enable, "
                                    "flush settings; topic_config_change: name, value, "
                                    "previous; broker_*: broker (registered: true when "
                                    "it registered again, a restart); controller_change: "
                                    "controller, previous; log_end_drop: the log "
                                    "end before; split_brain_*: each claimant's leader "
                                    "epoch"),
        C("eligible_leader_replicas", "int_list", True,
          "KIP-966's eligible leader replicas after the change, from the metadata log "
          "([] on a cluster without them); null: not known (a poll)"),
        C("previous_eligible_leader_replicas", "int_list", True, "the same before it"),
    ],
    "findings": [
        C("finding_id", "string", False, "deterministic id of the finding"),
        C("kind", "string", False, "confirmed | lost | lost_after_seen | duplicate | reordered | "
                                   "indeterminate | rejected | unverified"),
        C("subkind", "string", True, "overwritten | vanished (lost); present | absent "
                                     "(indeterminate); retention | compacted (unverified)"),
        C("topic", "string", False),
        C("partition", "int", False),
        C("offset", "long", True, "first acked offset (null for failed writes)"),
        C("producer_id", "string", True),
        C("run_id", "string", True),
        C("seq", "long", True, "first seq; the finding covers seq..seq+count-1"),
        C("count", "long", False, "writes this row stands for"),
        C("ack_time", "timestamp", True),
        C("evidence", "string", False, "JSON: the rows that prove the verdict"),
        C("cause", "string", True, "likely cause of a loss, from cluster events"),
        C("detected_at", "timestamp", False),
        C("pass_id", "long", False, "audit pass that wrote it (exactly-once key)"),
    ],
    "partition_state": [
        C("topic", "string", False),
        C("partition", "int", False),
        C("frontier", "long", False, "highest offset the consume job read + 1"),
        C("settled_frontier", "long", False, "frontier as it stood a settle period ago"),
        C("observed_at", "timestamp", False),
        C("pending", "long", False, "acked writes not yet judged"),
        C("unseen", "long", False, "pending writes unread for longer than audit.unseen_after"),
        C("oldest_unseen", "timestamp", True, "ack time of the oldest unseen write"),
        C("pass_id", "long", False),
    ],
    "audit_hot": [
        C("kind", "string", False, "ack | read | judged | observation | progress"),
        C("topic", "string", False),
        C("partition", "int", False),
        C("producer_id", "string", True),
        C("run_id", "string", True),
        C("seq", "long", True),
        C("count", "long", True),
        C("offset", "long", True, "observation: the consumed frontier observed"),
        C("first_ack", "timestamp", True, "ack: first delivery report of the run"),
        C("last_ack", "timestamp", True, "ack: last delivery report of the run"),
        C("read_time", "timestamp", True, "read: when it was read"),
        C("judged_at", "timestamp", True, "judged: when the run was judged"),
        C("observed_at", "timestamp", True, "observation: when the frontier was observed"),
        C("error_name", "string", True, "ack: librdkafka error name (null on success)"),
        C("acks", "string", True, "ack: the producer's acks setting"),
        C("source", "string", True, "read: stream | reread"),
        C("status", "string", True, "read: record | absent | truncated | expired; "
                                    "RabbitMQ: record | redelivered | barrier | lookup"),
        C("leader_epoch", "int", True, "read: leader epoch of the records"),
        C("horizon", "long", True, "ack without offset: the log end after its report"),
        C("progress", "string", True, "progress row: JSON of source versions and pass id"),
        C("pass_id", "long", True, "the pass whose state this row belongs to (its "
                                   "generation)"),
        C("broker", "int", True, "ack: the broker that acknowledged the run, where the "
                                 "ledger names it"),
    ],
    "windows": [
        C("window_id", "string", False, "kind:topic:partition:start"),
        C("kind", "string", False, kinds_doc(WINDOWS)),
        C("topic", "string", False),
        C("partition", "int", False),
        C("start", "timestamp", False),
        C("end", "timestamp", True, "null: open, it lasts"),
        C("opened_by", "string", False, "the event (or ack) that opened it"),
        C("closed_by", "string", True, "the event (or ack) that closed it"),
        C("acks", "long", False, "writes acknowledged inside it"),
        C("losses", "long", False, "writes acknowledged inside it and lost"),
        C("detail", "string", True, "JSON: what the kind adds (refused writes, ...)"),
        C("computed_at", "timestamp", False),
    ],
    "suspicions": [
        C("topic", "string", False),
        C("partition", "int", False),
        C("producer_id", "string", False),
        C("run_id", "string", False),
        C("seq", "long", False, "first seq of the suspected writes: seq..seq+count-1"),
        C("count", "long", False),
        C("offset", "long", False, "the offset the old leader acknowledged the first at"),
        C("ack_time", "timestamp", False, "first delivery report of their run"),
        C("last_ack_time", "timestamp", False, "last delivery report of their run"),
        C("broker", "int", True, "the broker that acknowledged them (null: the ledger does "
                                 "not name it)"),
        C("basis", "string", False, "broker: acknowledged by the old leader (the ledger names "
                                    "it); ack_time: acknowledged within the old epoch's time"),
        C("old_leader", "int", False, "the leader at the epoch that ends"),
        C("leader_epoch", "int", False, "the old leader's epoch"),
        C("end_offset", "long", False, "where that epoch ends in the new leader's log "
                                       "(OffsetForLeaderEpoch): writes at or above it are "
                                       "not in it"),
        C("new_leader", "int", True),
        C("new_epoch", "int", True),
        C("changed_at", "timestamp", False, "when the leader changed"),
        C("suspected_at", "timestamp", False, "when the marker wrote the row"),
    ],
    "fault_events": [
        C("at", "timestamp", False, "when the harness did it"),
        C("scenario", "string", False),
        C("run_id", "string", False, "one scenario run"),
        C("topic", "string", False),
        C("kind", "string", False, "leader_killed | followers_paused | replication_cut | ..."),
        C("detail", "string", True, "JSON: nodes, ports"),
    ],
    "dq_results": [
        C("validated_at", "timestamp", False),
        C("table_name", "string", False),
        C("table_version", "long", False, "Delta version validated up to"),
        C("expectation", "string", False),
        C("success", "bool", False),
        C("element_count", "long", True),
        C("unexpected_count", "long", True),
        C("details", "string", True),
    ],
    "rollups": [
        C("table", "string", False, "the table the rows were dropped from: acks | consumed | "
                                    "findings"),
        C("round", "long", False, "the table's retention round that dropped them (the "
                                  "drop's commit records it as the transaction of "
                                  "kafka_audit_retention)"),
        C("day", "date", False, "UTC day of the rows' time: acks last_ack_time, consumed "
                                "read_time, findings detected_at"),
        C("topic", "string", False),
        C("partition", "int", False),
        C("kind", "string", False, "acks: acked | failed; consumed: the status (record, "
                                   "absent, truncated, expired); findings: the verdict kind"),
        C("subkind", "string", True, "findings: the sub-kind"),
        C("cause", "string", True, "findings: the likely cause"),
        C("producer_id", "string", True),
        C("run_id", "string", True),
        C("error_name", "string", True, "acks: the failed writes' error"),
        C("acks", "string", True, "acks: the producer's acks setting"),
        C("idempotence", "bool", True, "acks"),
        C("retries", "int", True, "acks"),
        C("max_in_flight", "int", True, "acks"),
        C("source", "string", True, "consumed: stream | reread"),
        C("stamped", "bool", True, "consumed"),
        C("stamp_error", "string", True, "consumed: no stamp, forged, or malformed (the "
                                         "detail of a malformed one is not kept)"),
        C("checksum_ok", "bool", True, "consumed"),
        C("rows", "long", False, "the table's rows summed here"),
        C("count", "long", False, "the writes (acks, findings) or records (consumed) they "
                                  "stood for"),
        C("first_time", "timestamp", True, "acks: earliest ack_time; consumed: earliest "
                                           "read_time; findings: earliest ack_time"),
        C("last_time", "timestamp", True, "acks: latest last_ack_time; consumed: latest "
                                          "read_time; findings: latest ack_time"),
        C("rolled_at", "timestamp", False, "when the round summed them"),
    ],
}


def column_names(table: str) -> list[str]:
    return [c.name for c in TABLES[table]]


def arrow_schema(table: str) -> pa.Schema:
    return pa.schema([pa.field(c.name, _ARROW[c.type], c.nullable) for c in TABLES[table]])


def spark_schema(table: str):
    """The Spark ``StructType`` of a table (imports pyspark lazily: producers need no JVM)."""
    from pyspark.sql import types as T

    spark_types = {
        "string": T.StringType(), "long": T.LongType(), "int": T.IntegerType(),
        "bool": T.BooleanType(), "double": T.DoubleType(), "timestamp": T.TimestampType(),
        "int_list": T.ArrayType(T.IntegerType()), "date": T.DateType(),
    }
    return T.StructType([T.StructField(c.name, spark_types[c.type], c.nullable)
                         for c in TABLES[table]])


_PYTHON = {"string": str, "long": int, "int": int, "bool": bool, "double": float,
           "timestamp": "datetime", "int_list": list[int], "date": "date"}


def row_model(table: str, name: str, overrides: dict | None = None,
              exclude: tuple[str, ...] = ()):
    """A pydantic model of one row of ``table`` (the API's response models): one field per
    declared column, its doc as the field's description; ``overrides`` maps a column to
    ``(type, description)`` where the API shows it otherwise (e.g. parsed JSON)."""
    from datetime import date, datetime

    from pydantic import Field, create_model

    fields = {}
    for c in TABLES[table]:
        if c.name in exclude:
            continue
        typ, doc = (overrides or {}).get(c.name, (None, c.doc))
        if typ is None:
            typ = _PYTHON[c.type]
            typ = {"datetime": datetime, "date": date}.get(typ, typ) if isinstance(typ, str) \
                else typ
            typ = typ | None if c.nullable else typ
        fields[c.name] = (typ, Field(description=doc or None))
    return create_model(name, **fields)
