"""RabbitMQ's rows beside Kafka's in the same tables (``schemas/systems.py``): the Kafka
path never takes a RabbitMQ queue's key for a topic. It is not subscribed, not asked of
the Kafka cluster, and its writes are never judged by Kafka's rules (a confirm carries no
offset: those rules would call every one indeterminate)."""

from datetime import UTC, datetime, timedelta

from kafka_audit.jobs.audit.lookups import ClusterLookups
from kafka_audit.jobs.consume.consume_job import LedgerTopics, audited_pattern
from kafka_audit.jobs.core.engine import AuditConfig, PartitionHot, step_partition
from kafka_audit.jobs.core.model import AckRun, ReadRun
from kafka_audit.schemas.systems import rabbit_key
from kafka_audit.settings import Settings
from kafka_audit.store import append_rows

from ..support.rows import ledger_row

QUEUE = rabbit_key("queue", "/", "orders")
T = datetime(2026, 11, 30, tzinfo=UTC)


def test_a_queue_in_the_ledger_is_never_subscribed(tmp_path):
    s = Settings(home=tmp_path)
    path = s.table_path("acks")
    append_rows(path, "acks", [ledger_row(0, "orders"),
                               {**ledger_row(0, QUEUE), "offset": None, "system": "rabbitmq"}])
    seen = LedgerTopics(path)
    assert seen.read() == {"orders"}
    assert "rabbitmq" not in audited_pattern(s, seen) and "orders" in audited_pattern(s, seen)


def test_a_queue_is_never_asked_of_the_kafka_cluster(tmp_path):
    # a cluster nobody listens at: any ask would wait, then fail
    lookups = ClusterLookups(Settings(home=tmp_path, cluster={"broker_base_port": 1}))
    assert lookups.log_ends([(QUEUE, 0)]) == {}
    assert lookups.policies({QUEUE}) == (frozenset(), frozenset())
    assert lookups._client is None


def test_a_queues_writes_wait_for_a_barrier_not_for_kafkas_frontier():
    """Kafka's rules would judge an offset-less confirm against the log's end; a queue's
    wait for the barrier rule (tests/unit/test_rabbit_rules.py): with none read, pending."""
    acks = [AckRun(QUEUE, 0, "p", "r", 0, 5, None, T, T),
            AckRun(QUEUE, 0, "p", "r", 5, 1, None, T, T, error="NACK")]
    reads = [ReadRun(QUEUE, 0, 0, 3, "p", "r", 0, T)]
    hot = PartitionHot(acks=list(acks), reads=list(reads))
    later = T + timedelta(days=1)
    res = step_partition(QUEUE, hot, [], later, AuditConfig(), log_end=None)
    assert res.findings == [] and res.rereads == []
    assert res.hot.acks == acks and res.hot.reads == reads and res.pending == 6
    assert res.unseen == 6 and res.oldest_unseen == T
    # the same rows under a Kafka topic are judged
    kafka = [AckRun("orders", 0, "p", "r", 0, 5, None, T, T)]
    assert step_partition("orders", PartitionHot(acks=kafka), [], later, AuditConfig(),
                          log_end=0).findings


def test_a_queues_re_read_is_a_lookup_of_its_runs_reads_in_consumed(tmp_path):
    """RabbitMQ's re-read on a real Delta table: the reader's own rows of the asked seqs of
    the asked run (not another run's, not an earlier lookup's copies, not barriers, not a
    record whose body failed its checksum), and a lookup read per request, found or not;
    the Kafka cluster is never asked; a request without a run asks nothing."""
    from kafka_audit.jobs.audit.hot_state import consumed_row
    from kafka_audit.jobs.audit.lookups import lookup_consumed
    from kafka_audit.jobs.core.model import Reread
    from kafka_audit.jobs.core.rabbit_rules import LOOKUP, RABBIT_LOOKUP

    settings = Settings(home=tmp_path)
    key = rabbit_key("queue", "/", "orders")
    t = datetime(2026, 11, 30, tzinfo=UTC)

    def row(position, seq, count, run="r", source="stream", status="record"):
        return consumed_row(ReadRun(key, 0, position, count, "p", run, seq, t, source=source,
                                    status=status), 1)

    corrupt = {**row(8, 4, 1), "checksum_ok": False}  # its body failed the checksum
    append_rows(settings.table_path("consumed"), "consumed", [
        row(0, 0, 3), row(3, 5, 2, status="redelivered"), row(5, 3, 1, run="other"),
        row(6, 2, 1, source="reread"), row(7, 1_700_000_000_000_000, 1, status="barrier"),
        corrupt])
    asked = [Reread(key, 0, 2, 6, RABBIT_LOOKUP, "p", "r"),
             Reread(key, 0, 10, 12, RABBIT_LOOKUP, "p", "r")]
    def seen(reads):
        return sorted((r.offset, r.seq, r.count, r.status, r.source) for r in reads)

    assert seen(lookup_consumed(settings.table_path("consumed"), asked)) == [
        (-1, 2, 4, LOOKUP, "reread"), (-1, 10, 2, LOOKUP, "reread"),
        (0, 0, 3, "record", "reread"), (3, 5, 2, "redelivered", "reread")]
    assert lookup_consumed(settings.table_path("consumed"),
                           [Reread(key, 0, 0, 1, RABBIT_LOOKUP)]) == []
    # through the pass's lookups, with a Kafka cluster nobody listens at
    lookups = ClusterLookups(Settings(home=tmp_path, cluster={"broker_base_port": 1}))
    assert seen(lookups.reread(asked)) == seen(lookup_consumed(
        settings.table_path("consumed"), asked)) and lookups._consumer is None
