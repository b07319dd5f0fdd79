"""The instrumented RabbitMQ publisher: pika with publisher confirms, every message stamped,
every outcome in the ack ledger.

Each message carries the stamp Kafka's records carry (``schemas/stamp.py``: producer id,
run id, sequence, the body's CRC32), in its AMQP ``headers`` table as a byte array
(:func:`~kafka_audit.schemas.stamp.amqp_headers`), with its MAC when a stamp key is
configured. Each publish waits for the broker's answer on a channel in confirm mode and
records it in the ``acks`` table (:class:`RabbitLedger`, the ack ledger's spool and exactly
once commits), under the ledger key of the queue or stream it is meant for
(``schemas/systems.py``), with ``system`` = ``rabbitmq``:

==================  ==========================================================  ==========
outcome             when                                                        error_code
==================  ==========================================================  ==========
confirmed           ``basic.ack``: the broker took responsibility for it        (null)
``NACK``            ``basic.nack``: it did not (an internal error, or a queue's  0
                    ``overflow=reject-publish``)
``RETURNED``        ``basic.return`` of a ``mandatory`` message: no queue took   the reply
                    it (``NO_ROUTE``)                                           code (312)
``UNCONFIRMED``     the channel or connection closed before an answer: it may   the close's
                    or may not be in the queue                                  reply code
                                                                                (0: none)
==================  ==========================================================  ==========

A confirm carries no position in the queue: ``offset`` is null, ``partition`` 0. ``acks``
holds the delivery mode the message was published with (``persistent`` or ``transient``:
a transient message does not survive a restart of its queue's node), ``retries`` 0 (the
publisher never publishes a message twice), ``max_in_flight`` 1 (each publish waits for its
confirm), ``broker`` the node the publisher's connection was to (its number among the
nodes the publisher was given). After a connection is lost the publisher connects to the
next node that answers. A confirm not come within ``confirm_timeout`` seconds (a node cut
off from its peers holds a mirrored queue's confirms until it sees them gone, or forever)
gives the connection up: the publish is recorded ``UNCONFIRMED`` and the next one goes to
the next node.

Usage::

    with AuditedPublisher(nodes, rabbit_key("queue", "/", "orders"), "billing-1",
                          settings) as p:
        p.publish(b"...")            # True when confirmed
"""

from __future__ import annotations

import copy
import logging
import struct
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from kafka_audit.producers.ledger import AckLedger
from kafka_audit.schemas.policy import Durability
from kafka_audit.schemas.stamp import amqp_headers, build_stamp, crc32
from kafka_audit.schemas.systems import PERSISTENT, RABBITMQ, TRANSIENT, parse_rabbit_key
from kafka_audit.schemas.tables import arrow_schema

if TYPE_CHECKING:
    import pika

    from kafka_audit.settings import Settings

__all__ = ["RabbitOutcome", "RabbitLedger", "AuditedPublisher", "NACK", "RETURNED",
           "UNCONFIRMED", "MAX_CONFIRM_TIMEOUT"]

log = logging.getLogger(__name__)

NACK, RETURNED, UNCONFIRMED = "NACK", "RETURNED", "UNCONFIRMED"
#: the longest a publish may wait for its confirm: a message may be read that long before
#: its confirm, and the audit looks a late ack's reads up only within a minute of it
#: (``jobs/core/rabbit_rules.py``, ``LOOKUP_SLACK``), clocks' differences beside
MAX_CONFIRM_TIMEOUT = 45.0
_SCHEMA = arrow_schema("acks")


@dataclass(frozen=True)
class RabbitOutcome:
    """A publish the broker did not confirm: what the ledger records as its error (the
    ``code()`` and ``name()`` of a ``KafkaError``; ``code``: the AMQP reply code, 0 when the
    broker gave none)."""

    error: str  # NACK | RETURNED | UNCONFIRMED
    reply_code: int = 0

    def code(self) -> int:
        return self.reply_code

    def name(self) -> str:
        return self.error


class RabbitLedger(AckLedger):
    """The ack ledger of one publisher run: reports ``(seq, key, node, outcome or None,
    send time, ack time)`` (epoch seconds), one ``acks`` row per run of consecutive seqs
    to one key through one node with one outcome."""

    def _to_table(self, items: list[tuple]) -> pa.Table:
        items = sorted(items, key=lambda i: (i[1], i[2], _err_key(i[3]), i[0]))
        rows: list[dict] = []
        for seq, key, node, err, sent, acked in items:
            last = rows[-1] if rows else None
            if (last is not None and last["topic"] == key and last["broker"] == node
                    and last["_err"] == _err_key(err) and last["seq"] + last["count"] == seq):
                last["count"] += 1
                last["send_time"] = min(last["send_time"], sent)
                last["ack_time"] = min(last["ack_time"], acked)
                last["last_ack_time"] = max(last["last_ack_time"], acked)
                continue
            rows.append({"seq": seq, "count": 1, "topic": key, "broker": node,
                         "_err": _err_key(err), "send_time": sent, "ack_time": acked,
                         "last_ack_time": acked,
                         "error_code": None if err is None else err.code(),
                         "error_name": None if err is None else err.name()})
        acks, idem, retries, inflight = self.durability
        m = len(rows)
        ts = pa.timestamp("us", tz="UTC")

        def times(name: str) -> pa.Array:
            return pa.array([round(r[name] * 1e6) for r in rows], pa.int64()).cast(ts)

        cols = {
            "run_id": pa.repeat(pa.scalar(self.run_id, pa.string()), m),
            "producer_id": pa.repeat(pa.scalar(self.producer_id, pa.string()), m),
            "seq": pa.array([r["seq"] for r in rows], pa.int64()),
            "count": pa.array([r["count"] for r in rows], pa.int64()),
            "topic": pa.array([r["topic"] for r in rows], pa.string()),
            "partition": pa.repeat(pa.scalar(0, pa.int32()), m),
            "offset": pa.nulls(m, pa.int64()),
            "send_time": times("send_time"), "ack_time": times("ack_time"),
            "last_ack_time": times("last_ack_time"),
            "error_code": pa.array([r["error_code"] for r in rows], pa.int32()),
            "error_name": pa.array([r["error_name"] for r in rows], pa.string()),
            "acks": pa.repeat(pa.scalar(acks, pa.string()), m),
            "idempotence": pa.repeat(pa.scalar(idem, pa.bool_()), m),
            "retries": pa.repeat(pa.scalar(retries, pa.int32()), m),
            "max_in_flight": pa.repeat(pa.scalar(inflight, pa.int32()), m),
            "leader_epoch": pa.nulls(m, pa.int32()),
            "broker": pa.array([r["broker"] for r in rows], pa.int32()),
            "system": pa.repeat(pa.scalar(RABBITMQ, pa.string()), m),
        }
        return pa.Table.from_pydict(cols, schema=_SCHEMA)


def _err_key(err: RabbitOutcome | None) -> tuple:
    return ("", 0) if err is None else (err.error, err.reply_code)


class AuditedPublisher:
    """Publishes stamped messages to one queue or stream, each confirmed or not, every
    outcome recorded (module docstring). Not thread-safe: one thread publishes.

    ``nodes``: the cluster's nodes as pika connection parameters, by node number (a list:
    numbered from 1), tried from ``first`` (default the lowest), then each next number;
    ``key``: the ledger key of the queue or stream the messages are for
    (:func:`~kafka_audit.schemas.systems.rabbit_key`); ``exchange`` and ``routing_key``:
    where to publish (default: the default exchange, straight to the key's queue);
    ``persistent``: delivery mode 2 (else 1, transient); ``confirm_timeout``: seconds a
    publish waits for the broker's answer before the connection is given up (at most
    :data:`MAX_CONFIRM_TIMEOUT`);
    ``keep_record``: keep each publish's ``(seq, outcome name or None)`` in :attr:`record`
    (tests: ground truth)."""

    def __init__(self, nodes: Mapping[int, pika.ConnectionParameters]
                 | Sequence[pika.ConnectionParameters], key: str, producer_id: str,
                 settings: Settings, exchange: str = "", routing_key: str | None = None,
                 persistent: bool = True, mandatory: bool = True, first: int | None = None,
                 confirm_timeout: float = 30.0, keep_record: bool = False) -> None:
        import pika

        from kafka_audit.stamp_key import stamp_mac

        if not nodes:
            raise ValueError("a publisher needs at least one node to connect to")
        self.target = parse_rabbit_key(key)
        self.key = key
        self.nodes = dict(nodes) if isinstance(nodes, Mapping) else dict(enumerate(nodes, 1))
        if other := {p.virtual_host for p in self.nodes.values()} - {self.target.vhost}:
            raise ValueError(f"the key {key} names vhost {self.target.vhost!r}; the nodes' "
                             f"connections are to {sorted(other)}")
        self._order = sorted(self.nodes)
        if not 0 < confirm_timeout <= MAX_CONFIRM_TIMEOUT:
            raise ValueError(f"confirm_timeout must be above 0 and at most "
                             f"{MAX_CONFIRM_TIMEOUT} s, not {confirm_timeout!r}")
        self.confirm_timeout = confirm_timeout
        if first is not None and first not in self.nodes:
            raise ValueError(f"node {first} is not one of the nodes given ({self._order})")
        self.producer_id = producer_id
        self.run_id = uuid.uuid4().hex
        self.exchange = exchange
        self.routing_key = self.target.name if routing_key is None else routing_key
        self.mandatory = mandatory
        self.delivery_mode = (pika.DeliveryMode.Persistent if persistent
                              else pika.DeliveryMode.Transient).value
        self.durability = Durability(PERSISTENT if persistent else TRANSIENT, False, 0, 1)
        self._mac = stamp_mac(settings)
        build_stamp(producer_id, self.run_id, 0, 0)  # ids the stamp cannot carry: now
        self.ledger = RabbitLedger(
            settings.table_path("acks"), settings.home_dir / "spool" / "acks",
            app_id=f"{producer_id}/{self.run_id}", producer_id=producer_id,
            run_id=self.run_id, durability=self.durability,
            flush_seconds=settings.producer.ledger_flush_seconds,
            flush_rows=settings.producer.ledger_flush_rows,
            staged=settings.producer.staged).start()
        self.record: list[tuple[int, str | None]] | None = [] if keep_record else None
        self.seq = 0
        self.node: int | None = None  # the node connected to (1-based), None: none now
        self._conn = self._channel = None
        #: the place in ``_order`` of the node to try first at the next connect
        self._next = 0 if first is None else self._order.index(first)

    # ---- connection ---------------------------------------------------------------------
    def _connect(self) -> None:
        """A confirm-mode channel to the first node that answers, from the one after the
        node last lost; :class:`pika.exceptions.AMQPConnectionError` if none does."""
        import pika

        errors = []
        for i in range(len(self._order)):
            node = self._order[(self._next + i) % len(self._order)]
            conn = None
            try:
                conn = pika.BlockingConnection(self.nodes[node])
                channel = conn.channel()
                channel.confirm_delivery()
            except pika.exceptions.AMQPError as exc:
                errors.append(f"node {node}: {exc!r}")
                _close(conn)
                continue
            self._conn, self._channel, self.node = conn, channel, node
            return
        raise pika.exceptions.AMQPConnectionError("no node answered: " + "; ".join(errors))

    def _lost(self) -> None:
        """Forget the connection (closed or broken); the next publish connects anew, to the
        next node first."""
        conn, self._conn, self._channel = self._conn, None, None
        if self.node is not None:
            self._next = (self._order.index(self.node) + 1) % len(self._order)
        self.node = None
        _close(conn)

    def _give_up_after(self, seconds: float):
        """A timer ending the connection (as a missed heartbeat does) unless cancelled
        within ``seconds``: the publish waiting for its confirm then raises.

        pika's ``BlockingConnection.call_later`` runs its callbacks only inside
        ``process_data_events``, never while ``basic_publish`` waits for a confirm; the
        timer of the connection's own I/O loop runs in that wait."""
        import pika

        impl = self._conn._impl  # noqa: SLF001 - the blocking adapter's I/O loop

        def give_up() -> None:
            log.warning("no answer from node %s within %.1f s: giving its connection up",
                        self.node, seconds)
            impl._terminate_stream(pika.exceptions.StreamLostError(  # noqa: SLF001
                f"no confirm within {seconds} s"))

        return impl._adapter_call_later(seconds, give_up)  # noqa: SLF001

    # ---- publishing ---------------------------------------------------------------------
    def publish(self, body: bytes, headers: dict | None = None,
                properties: pika.BasicProperties | None = None) -> bool:
        """Publish ``body`` stamped with the next sequence and wait for the broker's answer;
        True when confirmed. Every outcome is recorded; a lost connection is one
        ``UNCONFIRMED`` outcome (and a new connection at the next publish). Raises only
        when no node can be connected to before the publish, or when the message's
        properties cannot be encoded (``ValueError``): then nothing was sent, and the
        sequence is not used."""
        import pika

        if self._channel is not None:
            try:  # heartbeats, and a connection closed while idle noticed before the publish
                self._conn.process_data_events(0)
            except (pika.exceptions.AMQPError, OSError):
                self._lost()
        if self._channel is None or not self._channel.is_open:
            self._lost()
            self._connect()
        seq = self.seq
        self.seq += 1
        stamp = build_stamp(self.producer_id, self.run_id, seq, crc32(body))
        # the caller's properties are its own: the stamp goes into a copy
        props = copy.copy(properties) if properties is not None else pika.BasicProperties()
        props.headers = {**(props.headers or {}), **(headers or {}),
                         **amqp_headers(stamp, self._mac)}
        props.delivery_mode = self.delivery_mode
        node, sent = self.node, time.time()
        outcome: RabbitOutcome | None = None
        timer = self._give_up_after(self.confirm_timeout)
        try:
            try:
                self._channel.basic_publish(self.exchange, self.routing_key, body, props,
                                            mandatory=self.mandatory)
            finally:
                timer.cancel()  # before anything else runs the connection's I/O loop
        except (pika.exceptions.UnsupportedAMQPFieldException, struct.error, TypeError,
                AssertionError) as exc:
            # the properties did not encode (a header pika cannot write, a property of the
            # wrong type): the frame was never sent, the sequence is used again
            self.seq = seq
            raise ValueError(f"the message's properties cannot be encoded: {exc!r}") from None
        except pika.exceptions.UnroutableError as exc:
            returned = exc.messages[0].method if exc.messages else None
            outcome = RabbitOutcome(RETURNED, getattr(returned, "reply_code", 312))
        except pika.exceptions.NackError:
            outcome = RabbitOutcome(NACK)
        except (pika.exceptions.AMQPError, OSError) as exc:
            outcome = RabbitOutcome(UNCONFIRMED, _reply_code(exc))
            self._lost()
        self.ledger.add((seq, self.key, node, outcome, sent, time.time()))
        if self.record is not None:
            self.record.append((seq, None if outcome is None else outcome.error))
        return outcome is None

    def close(self, timeout: float = 30) -> None:
        """Close the connection, then the ledger (every outcome committed, or
        :class:`~kafka_audit.errors.LedgerWriteError` saying what stays spooled)."""
        self._lost()
        self.ledger.close(timeout)

    def __enter__(self) -> AuditedPublisher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _close(conn) -> None:
    """Close ``conn`` if it is open; it is being given up, whatever the close says."""
    if conn is not None and conn.is_open:
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - given up anyway
            pass


def _reply_code(exc: BaseException) -> int:
    """The AMQP reply code of a close (``ChannelClosedByBroker``, ``ConnectionClosedByBroker``
    and their kin carry it), 0 when the connection simply dropped."""
    code = getattr(exc, "reply_code", None)
    return code if isinstance(code, int) else 0
