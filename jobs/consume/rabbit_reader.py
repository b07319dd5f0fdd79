"""The RabbitMQ reader: what queues and streams really hold, into ``consumed``, exactly once.

The Kafka consume job reads topics without taking anything from their consumers; AMQP has
no such read of a queue. So the reader consumes the queues it is given: the audited queue
itself where nobody else consumes it (a test, a drill), or, beside a queue with consumers
of its own, an *audit queue* bound to the same exchange with the same routing key and the
same policy (it goes through the same replication and fail-overs; what it cannot see:
docs/rabbitmq.md). A stream is read by offset, from its first message (or from where the
reader's last committed read ended), and takes nothing from anyone.

Each delivery becomes part of a ``consumed`` row under the key of the queue or stream it
came from (``schemas/systems.py``; ``system`` ``rabbitmq``, ``source`` ``stream``),
``offset`` the reader's position: a queue's count of deliveries read (across the reader's
restarts: it goes on from the table's highest), a stream's own offset. ``status``:

* ``record``: a message, stamped or not (the stamp rule of ``schemas/stamp.py`` over its
  AMQP headers, the checksum over its body), delivered for the first time;
* ``redelivered``: delivered again (the broker's ``redelivered`` flag: a consumer before
  this one took it and did not acknowledge it): presence, never a copy;
* ``barrier``: a barrier (``kaudit-barrier`` header) the reader published into the queue
  (or stream) every ``barrier_seconds``, ``seq`` when its publish began (µs since the
  epoch). The audit's barrier rule (``jobs/core/rabbit_rules.py``) judges a write once a
  barrier published after its confirm has been read. After the reader lost a connection
  uncleanly, the deliveries sent on it stay checked out to the dead consumer until the
  broker notices, and a barrier read meanwhile could pass them: for
  ``barrier_holdoff_seconds`` (90: above two heartbeats and RabbitMQ's default
  net_ticktime, 60) barriers are recorded without a time (``seq`` null: they settle
  nothing). A barrier time more than a day from the reader's clock is no reader's: a
  malformed record.

Every ``flush_seconds`` the rows read are committed as one idempotent Delta append
(``app_id`` ``kaudit-rabbit-reader/<name>``, one version per batch), and only then are the
deliveries acknowledged: a reader that dies before the commit has its deliveries given to
the next one as redelivered; one that dies after it, before the acknowledgements, the same
(they are presence both times: nothing is lost, nothing counted twice as a copy).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pyarrow as pa

from kafka_audit.jobs.core.rabbit_rules import BARRIER, RECORD, REDELIVERED
from kafka_audit.schemas.stamp import (
    FORGED,
    MALFORMED,
    NO_STAMP,
    ForgedStamp,
    StampError,
    amqp_barrier,
    barrier_of_amqp,
    checksum_ok,
    stamp_of_amqp,
)
from kafka_audit.schemas.systems import RABBITMQ, parse_rabbit_key
from kafka_audit.schemas.tables import arrow_schema
from kafka_audit.store import (
    append_arrow_once,
    check_table,
    read_table,
    transaction_version,
)

if TYPE_CHECKING:
    import pika

    from kafka_audit.settings import Settings
    from kafka_audit.status import StatusWriter

__all__ = ["RabbitReader", "reader_app_id"]

log = logging.getLogger(__name__)
_SCHEMA = arrow_schema("consumed")


def _plausible(sent_us: int, now: datetime) -> bool:
    """A barrier's time a reader takes: within a day of its own clock (a value far off is
    no barrier of a reader's: it would settle every write, or none, for ever)."""
    return abs(sent_us / 1e6 - now.timestamp()) < 86_400


def reader_app_id(name: str) -> str:
    """The idempotent writer name of the reader ``name``'s commits to ``consumed``."""
    return f"kaudit-rabbit-reader/{name}"


@dataclass
class _Run:
    """A run of deliveries that make one ``consumed`` row."""

    key: str
    offset: int
    status: str
    stamped: bool
    stamp_error: str | None
    producer_id: str | None
    run_id: str | None
    seq: int | None
    checksum_ok: bool | None
    read_time: datetime
    count: int = 1

    def extends(self, o: _Run) -> bool:
        return (o.key == self.key and o.offset == self.offset + self.count
                and o.status == self.status != BARRIER and o.stamped == self.stamped
                and o.stamp_error == self.stamp_error and o.producer_id == self.producer_id
                and o.run_id == self.run_id and o.checksum_ok == self.checksum_ok
                and (o.seq is None) == (self.seq is None)
                and (o.seq is None or o.seq == self.seq + self.count))


@dataclass
class _Source:
    """One queue or stream being read: its key, the reader's next position in it, and the
    channel consuming it (one each: a queue that cannot be consumed stops no other)."""

    key: str
    stream: bool
    position: int
    tags: list = field(default_factory=list)  # (channel, delivery tag) read, not yet acked
    channel: object | None = None  # None: not consumed now
    error: str | None = None  # why not
    cancelled: bool = False  # the broker cancelled its consumer


class RabbitReader:
    """Reads ``keys`` (queues and streams, as ledger keys) from the cluster's ``nodes`` into
    ``consumed`` (module docstring). :meth:`run` until its stop event is set; one reader
    per ``name`` at a time."""

    def __init__(self, settings: Settings, nodes: Mapping[int, pika.ConnectionParameters],
                 keys: list[str], name: str = "reader", barrier_seconds: float = 2.0,
                 flush_seconds: float = 1.0, prefetch: int = 1000,
                 barrier_holdoff_seconds: float = 90.0, reopen_seconds: float = 5.0,
                 status: StatusWriter | None = None) -> None:
        from kafka_audit.stamp_key import stamp_mac

        if not keys:
            raise ValueError("a RabbitMQ reader needs at least one queue or stream to read")
        self.nodes = dict(nodes)
        self.path = settings.table_path("consumed")
        check_table(self.path, "consumed")
        self.app_id = reader_app_id(name)
        self.barrier_seconds, self.flush_seconds = barrier_seconds, flush_seconds
        self.prefetch = prefetch
        self._mac = stamp_mac(settings)
        self.barrier_holdoff_seconds = barrier_holdoff_seconds
        #: its status file (``kafka-audit run``'s health), None: none
        self.status = status
        targets = {k: parse_rabbit_key(k) for k in keys}
        vhosts = {p.virtual_host for p in self.nodes.values()}
        if wrong := sorted(k for k, t in targets.items() if {t.vhost} != vhosts and vhosts):
            raise ValueError(f"the nodes' connections are to vhost(s) {sorted(vhosts)}; "
                             f"{wrong[0]} names another: one reader per vhost")
        ends = self._ends(list(targets))
        self.sources = {k: _Source(k, t.kind == "stream", ends.get(k, 0))
                        for k, t in targets.items()}
        self.targets = targets
        self.version = transaction_version(self.path, self.app_id) or 0
        self.runs: list[_Run] = []
        #: a batch whose commit failed: (its version, its rows, its deliveries)
        self._failed: tuple[int, pa.Table, list] | None = None
        #: barriers read before this monotonic time are not recorded (after an unclean
        #: reconnect: see :attr:`barrier_holdoff_seconds`)
        self._barriers_from = 0.0
        self.barriers_withheld = 0
        self.rows_written = self.deliveries = 0
        self.node: int | None = None
        self._conn = None
        #: a queue or stream not consumed now is tried again this often
        self.reopen_seconds = reopen_seconds
        self._order = sorted(self.nodes)
        self._next = 0

    def _ends(self, keys: list[str]) -> dict[str, int]:
        """Per key, one past the highest position the table holds (where reading goes on):
        of the reader's own rows (an audit pass's lookups are no positions)."""
        import pyarrow.compute as pc

        t = read_table(self.path, "consumed", columns=["topic", "offset", "count"],
                       where=pc.field("topic").isin(keys) & (pc.field("source") == "stream"))
        out: dict[str, int] = {}
        for k, o, c in zip(*(t.column(n).to_pylist() for n in ("topic", "offset", "count")),
                           strict=True):
            out[k] = max(out.get(k, 0), o + c)
        return out

    # ---- the connection -----------------------------------------------------------------
    def _connect(self) -> None:
        """A connection to the first node through which at least one queue or stream can
        be consumed, from the one after the node last lost; the others are tried again
        every ``reopen_seconds`` (:meth:`_reopen`)."""
        import pika

        errors = []
        start = self._next  # (giving a node up moves _next: the round starts here)
        for i in range(len(self._order)):
            node = self._order[(start + i) % len(self._order)]
            try:
                conn = pika.BlockingConnection(self.nodes[node])
            except pika.exceptions.AMQPError as exc:
                errors.append(f"node {node}: {exc!r}")
                continue
            self._conn, self.node = conn, node
            for src in self.sources.values():
                self._open(src)
            if any(src.channel is not None for src in self.sources.values()):
                log.info("rabbit reader %s reading %s through node %d", self.app_id,
                         ", ".join(k for k, src in self.sources.items() if src.channel),
                         node)
                self._say_unread()
                return
            errors.append(f"node {node}: " + "; ".join(
                f"{k}: {src.error}" for k, src in self.sources.items()))
            self._lost(clean=True)
        raise pika.exceptions.AMQPConnectionError("no node answered: " + "; ".join(errors))

    def _open(self, src: _Source) -> None:
        """A channel of its own consuming ``src``; a refusal (the queue's node down, the
        queue gone) is kept in ``src.error``, a lost connection raised."""
        import pika

        channel = None
        try:
            channel = self._conn.channel()
            # a queue deleted, or its node gone: the broker cancels the consumer; its
            # channel is given up and the queue consumed again once it can be
            channel.add_on_cancel_callback(lambda _frame: setattr(src, "cancelled", True))
            channel.basic_qos(prefetch_count=self.prefetch)
            self._consume(channel, src)
        except pika.exceptions.AMQPChannelError as exc:
            src.channel, src.error = None, repr(exc)
            if channel is not None and channel.is_open:
                channel.close()
            return
        src.channel, src.error, src.cancelled = channel, None, False

    def _drop(self, src: _Source, why: str) -> None:
        """Give ``src``'s channel up (cancelled, closed by the broker): its deliveries go
        back to the queue (read again as redelivered) and, as after any unclean loss,
        barriers are withheld a while (:meth:`_lost`)."""
        channel, src.channel, src.cancelled = src.channel, None, False
        src.tags.clear()
        src.error = why
        self._barriers_from = time.monotonic() + self.barrier_holdoff_seconds
        log.warning("rabbit reader %s: %s not consumed: %s; trying again every %.0f s",
                    self.app_id, src.key, why, self.reopen_seconds)
        if channel is not None and channel.is_open:
            try:
                channel.close()
            except Exception:  # noqa: BLE001 - given up anyway
                pass

    def _reopen(self) -> None:
        """Each queue or stream not consumed now, tried again."""
        for src in self.sources.values():
            if src.channel is None:
                self._open(src)
                if src.channel is not None:
                    log.info("rabbit reader %s: %s consumed again", self.app_id, src.key)
        self._say_unread()

    def _say_unread(self) -> None:
        if unread := [k for k, src in self.sources.items() if src.channel is None]:
            self._failing("cannot consume " + "; ".join(
                f"{k}: {self.sources[k].error}" for k in unread))

    def _consume(self, channel, src: _Source) -> None:
        target = self.targets[src.key]
        args = {"x-stream-offset": src.position} if src.stream else None

        def on_message(ch, method, props, body) -> None:
            self._delivered(src, ch, method, props, body)

        channel.basic_consume(target.name, on_message, arguments=args)

    def _lost(self, clean: bool = False) -> None:
        """Forget the connection. After an unclean loss (``clean`` False) the deliveries
        the broker had sent on it stay checked out to the dead consumer until the broker
        notices (two heartbeats, or the nodes' net_ticktime for a node cut off): barriers
        read meanwhile could pass them, so none is recorded for
        ``barrier_holdoff_seconds``."""
        if not clean and self._conn is not None:
            self._barriers_from = time.monotonic() + self.barrier_holdoff_seconds
        conn, self._conn = self._conn, None
        if self.node is not None:
            self._next = (self._order.index(self.node) + 1) % len(self._order)
        self.node = None
        for src in self.sources.values():
            src.tags.clear()  # a closed channel's deliveries go back to the queue
            src.channel, src.cancelled = None, False
        if conn is not None and conn.is_open:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - given up anyway
                pass

    # ---- reading ------------------------------------------------------------------------
    def _delivered(self, src: _Source, channel, method, props, body: bytes) -> None:
        headers = props.headers or {}
        now = datetime.now(UTC)
        if src.stream:
            position = int(headers.get("x-stream-offset", src.position))
        else:
            position = src.position
        src.position = position + 1
        run = self._row(src.key, position, headers, body, now,
                        REDELIVERED if method.redelivered and not src.stream else RECORD)
        if self.runs and self.runs[-1].extends(run):
            self.runs[-1].count += 1
        else:
            self.runs.append(run)
        src.tags.append((channel, method.delivery_tag))
        self.deliveries += 1

    def _row(self, key: str, position: int, headers: dict, body: bytes, now: datetime,
             status: str) -> _Run:
        def foreign(error: str) -> _Run:
            return _Run(key, position, status, False, error, None, None, None, None, now)

        try:  # a barrier first (it carries no stamp), then the stamp rule
            sent = barrier_of_amqp(headers, self._mac)
            stamp = None if sent is not None else stamp_of_amqp(headers, self._mac)
        except ForgedStamp:
            return foreign(FORGED)
        except StampError:
            return foreign(MALFORMED)
        if sent is not None:
            if not _plausible(sent, now):
                return foreign(MALFORMED)
            if time.monotonic() < self._barriers_from:  # withheld: it settles nothing
                self.barriers_withheld += 1
                sent = None
            return _Run(key, position, BARRIER, False, None, None, None, sent, None, now)
        if stamp is None:
            return foreign(NO_STAMP)
        return _Run(key, position, status, True, None, stamp.producer_id, stamp.run_id,
                    stamp.seq, checksum_ok(stamp, body), now)

    def publish_barriers(self) -> None:
        """A barrier into every queue and stream being read, through its own channel, each
        stamped with when its publish began (unconfirmed: one lost only delays a
        judgement); none into one not consumed now (its writes wait)."""
        import pika

        for key, target in self.targets.items():
            src = self.sources[key]
            if src.channel is None:
                continue
            sent = time.time_ns() // 1000
            try:
                src.channel.basic_publish("", target.name, b"", pika.BasicProperties(
                    headers=amqp_barrier(sent, self._mac), delivery_mode=2))
            except pika.exceptions.AMQPChannelError as exc:
                self._drop(src, repr(exc))
                continue
            log.debug("barrier into %s at %d", key, sent)

    def flush(self) -> int:
        """Commit the rows read since the last flush (one idempotent append), then
        acknowledge their deliveries; the rows written. A batch whose commit failed is kept
        whole, with its version and deliveries, and tried again alone first (its commit may
        have landed before the error: the idempotent append then writes nothing)."""
        if self._failed is None:
            if not self.runs:
                return 0
            tags = [t for src in self.sources.values() for t in src.tags]
            for src in self.sources.values():
                src.tags.clear()
            runs, self.runs = self.runs, []
            self._failed = (self.version + 1, self._table(runs, self.version + 1), tags)
        version, table, tags = self._failed
        append_arrow_once(self.path, "consumed", table, self.app_id, version)
        self._failed = None
        self.version = version
        self.rows_written += table.num_rows
        last: dict = {}
        for channel, tag in tags:
            last[id(channel)] = (channel, max(tag, last.get(id(channel), (None, 0))[1]))
        for channel, tag in last.values():
            if channel.is_open:
                channel.basic_ack(tag, multiple=True)
        return table.num_rows + (self.flush() if self.runs else 0)

    def _flush_or_wait(self) -> None:
        """:meth:`flush`; a warehouse that cannot be written is said and tried again at the
        next flush: the deliveries stay unacknowledged meanwhile, and the broker sends no
        more than ``prefetch`` of them (the reader waits, the queue keeps the rest). The
        status file says which (a good step: connected, and what was read committed)."""
        try:
            self.flush()
        except Exception as exc:  # noqa: BLE001 - tried again at the next flush
            log.warning("rabbit reader %s: %d rows wait to be written to %s: %s",
                        self.app_id, sum(1 for _ in self.runs), self.path, exc)
            self._failing(f"the warehouse: {type(exc).__name__}: {exc}")
            return
        if any(src.channel is None for src in self.sources.values()):
            self._say_unread()
        elif self.status is not None:
            self.status.ok(node=self.node, deliveries=self.deliveries,
                           rows_written=self.rows_written,
                           barriers_withheld=self.barriers_withheld)

    def _failing(self, error: str) -> None:
        if self.status is not None:
            self.status.failing(error)

    def _table(self, runs: list[_Run], batch: int) -> pa.Table:
        rows = [{"topic": r.key, "partition": 0, "offset": r.offset, "count": r.count,
                 "kafka_timestamp": None, "stamped": r.stamped, "stamp_error": r.stamp_error,
                 "producer_id": r.producer_id, "run_id": r.run_id, "seq": r.seq,
                 "checksum_ok": r.checksum_ok, "read_time": r.read_time, "batch_id": batch,
                 "source": "stream", "status": r.status, "leader_epoch": None,
                 "system": RABBITMQ} for r in runs]
        return pa.Table.from_pylist(rows, schema=_SCHEMA)

    def run(self, stop: threading.Event) -> None:
        """Read until ``stop`` is set: barriers every ``barrier_seconds``, commits every
        ``flush_seconds``; a lost connection is taken up again through the next node."""
        import pika

        next_flush = next_barrier = next_reopen = time.monotonic()
        backoff = 0.5
        while not stop.is_set():
            try:
                if self._conn is None:
                    self._connect()
                    backoff = 0.5
                    next_reopen = time.monotonic() + self.reopen_seconds
                self._conn.process_data_events(time_limit=0.1)
                for src in self.sources.values():
                    if src.channel is not None and (src.cancelled
                                                    or not src.channel.is_open):
                        self._drop(src, "the broker cancelled its consumer"
                                   if src.cancelled else "its channel was closed")
                now = time.monotonic()
                if now >= next_reopen:
                    next_reopen = now + self.reopen_seconds
                    self._reopen()
                if now >= next_barrier:
                    self.publish_barriers()
                    next_barrier = now + self.barrier_seconds
                if now >= next_flush:
                    next_flush = now + self.flush_seconds
                    self._flush_or_wait()
            except (pika.exceptions.AMQPError, OSError) as exc:
                log.warning("rabbit reader %s: %r; reading again through the next node",
                            self.app_id, exc)
                self._failing(f"RabbitMQ: {type(exc).__name__}: {exc}")
                self._lost()
                stop.wait(backoff)
                backoff = min(backoff * 2, 10)
        try:
            self.flush()
        finally:
            self._lost(clean=True)
