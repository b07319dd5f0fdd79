"""The instrumented producer: a confluent-kafka ``Producer`` that stamps and records.

Every record gets one ``kaudit`` header (``schemas/stamp.py``: producer id, run id,
sequence, payload checksum). Every delivery report, success or failure, reaches the
``acks`` table together with the settings that decide durability. Two paths:

* **native** (the default): the ``kaudit`` librdkafka plugin (``producers/plugin/``)
  stamps in C (stamp version 2, XXH64) and records every report in a crash-safe spool; a
  shipper thread (``producers/shipper.py``) commits the spool to ``acks``. No Python runs
  per message: :meth:`produce` *is* confluent-kafka's ``produce`` (it returns None; the
  plugin assigns the sequence);
* **Python** (the fallback): the stamp (version 1, CRC32) is built here and the delivery
  callback appends each report to the :class:`~kafka_audit.producers.ledger.AckLedger`
  (about three times the CPU a message of the native path: docs/benchmarks.md).

``native=None`` (default) takes the plugin when it loads and otherwise falls back with a
:class:`~kafka_audit.producers.native.NativeFallbackWarning`; ``True`` requires it
(:class:`~kafka_audit.producers.native.PluginUnavailable` if it cannot load); ``False``
takes the Python path. A delivery callback of the caller's (``on_delivery`` in the config
or per message) is called as confluent-kafka would call it, on either path.

With ``stamp.key_file`` set, both paths add a ``kaudit-mac`` header beside every stamp
(``schemas/stamp.py``, The stamp MAC); the ids are checked by the stamp rule here, before
either path starts (:class:`~kafka_audit.schemas.stamp.StampError`).

``keep_record=True`` (tests and the demo: the producer's own account of its writes,
ground truth to judge the audit by) binds each record's sequence to a callback; on the
native path the sequence is counted here in step with the plugin's, and :meth:`close`
checks that the two agree.

Usage::

    with AuditedProducer({"bootstrap.servers": "...", "acks": "all"}, "billing-1",
                         settings) as p:
        p.produce("orders", b"...")
"""

from __future__ import annotations

import logging
import time
import uuid
import warnings
from functools import partial
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from kafka_audit.clients import client_logger
from kafka_audit.errors import LedgerWriteError
from kafka_audit.producers.ledger import AckLedger
from kafka_audit.producers.native import (
    NativeFallbackWarning,
    PluginUnavailable,
    SpoolState,
    load_plugin,
    native_spool_root,
    plugin_properties,
    spool_folder_name,
)
from kafka_audit.schemas.policy import Durability
from kafka_audit.schemas.stamp import HEADER, MAC_HEADER, SEQ_CRC, crc32, stamp_prefix
from kafka_audit.settings import Settings
from kafka_audit.stamp_key import stamp_mac

__all__ = ["AuditedProducer"]

log = logging.getLogger(__name__)


def _durability(conf: dict[str, Any]) -> Durability:
    idem = str(conf.get("enable.idempotence", False)).lower() == "true" or bool(
        conf.get("transactional.id"))
    acks = "all" if idem else str(conf.get("acks", conf.get("request.required.acks", "all")))
    retries = int(conf.get("retries", conf.get("message.send.max.retries", 2147483647)))
    inflight = int(conf.get("max.in.flight.requests.per.connection",
                            conf.get("max.in.flight", 1000000)))
    if idem:
        inflight = min(inflight, 5)
    return Durability("all" if acks == "-1" else acks, idem, retries, inflight)


class AuditedProducer:
    """Stamps records and ledgers every delivery report. Not thread-safe (like Producer)."""

    def __init__(self, config: dict[str, Any], producer_id: str, settings: Settings,
                 run_id: str | None = None, keep_record: bool = False,
                 native: bool | None = None) -> None:
        self.producer_id = producer_id
        self.run_id = run_id or f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
        stamp_prefix(self.producer_id, self.run_id)  # StampError: ids no reader would take
        # the stamp key, read (and checked) once: a MAC beside every stamp (ConfigError: a
        # key file that cannot be one)
        self._mac = stamp_mac(settings)
        self._key_file = settings.stamp.key_file
        conf = {"logger": client_logger(), **config}
        self.durability = _durability(conf)
        self._seq = 0
        self._acked = 0
        self._failed = 0
        self._unstamped = 0
        # the producer's own record (ground truth for tests): (seq, topic, partition, offset)
        # per acked write, and (seq, topic, partition, error name) per failed one
        self.record: list[tuple[int, str, int, int]] | None = [] if keep_record else None
        self.failures: list[tuple[int, str, int, str]] | None = [] if keep_record else None
        self._state: SpoolState | None = None
        self._user_default = None
        self._errors_only = False
        self.native = False
        if native is not False:
            try:
                self._start_native(conf, settings)
            except PluginUnavailable as exc:
                if native:
                    raise
                warnings.warn(f"kafka-audit: the native ack plugin is unavailable ({exc}); "
                              "this producer is audited by the pure-Python path (about three "
                              "times its CPU a message)", NativeFallbackWarning, stacklevel=2)
        if not self.native:
            self._start_python(conf, settings)

    # ---- the native path ----------------------------------------------------------------
    def _start_native(self, conf: dict[str, Any], settings: Settings) -> None:
        from kafka_audit.producers.shipper import NativeShipper

        plugin = load_plugin()
        if self.record is not None:
            # keep_record binds a callback to every record: the caller's default one is
            # called from it, as confluent-kafka would
            conf = dict(conf)
            self._user_default = conf.pop("on_delivery", None)
            self._errors_only = str(conf.pop("delivery.report.only.error", False)).lower() \
                == "true"
        root = native_spool_root(settings)
        folder = root / spool_folder_name(self.producer_id, self.run_id)
        props = plugin_properties(plugin, root, self.producer_id, self.run_id,
                                  key_file=self._key_file)
        try:
            # the plugin's properties first: the plugin then reads the caller's client.id as
            # librdkafka's only (without kaudit.producer.id it would be the producer id)
            producer = Producer({**props, **{k: v for k, v in conf.items() if k not in props}})
        except KafkaException as exc:
            if "kaudit" not in str(exc):
                raise  # the caller's own configuration error
            raise PluginUnavailable(exc.args[0].str()) from None
        if not (folder / "meta").is_file():  # on_new failed: librdkafka logged why
            producer.close()  # type: ignore[attr-defined]
            raise PluginUnavailable(f"the plugin did not start its spool {folder} (see the "
                                    f"{client_logger().name} log)")
        self._producer = producer
        self._state = SpoolState(folder)
        self.native = True
        self.ledger = NativeShipper(settings.table_path("acks"), folder,
                                    flush_seconds=settings.producer.ledger_flush_seconds,
                                    staged=settings.producer.staged
                                    ).start()
        if self.record is None:
            # nothing to do per message here: confluent-kafka's own produce, no wrapper
            self.produce = producer.produce  # type: ignore[method-assign]
        self.poll = producer.poll  # type: ignore[method-assign]

    # ---- the Python path ----------------------------------------------------------------
    def _start_python(self, conf: dict[str, Any], settings: Settings) -> None:
        # the caller's default delivery callback is called from ours (a per-message
        # callback replaces the default one in confluent-kafka)
        self._user_default = conf.pop("on_delivery", None)
        self._errors_only = str(conf.pop("delivery.report.only.error", False)).lower() == "true"
        self._producer = Producer(conf)
        self._head, self._tail = stamp_prefix(self.producer_id, self.run_id)
        self.ledger = AckLedger(
            settings.table_path("acks"), settings.home_dir / "spool" / "acks",
            app_id=f"{self.producer_id}/{self.run_id}", producer_id=self.producer_id,
            run_id=self.run_id, durability=self.durability,
            flush_seconds=settings.producer.ledger_flush_seconds,
            flush_rows=settings.producer.ledger_flush_rows,
            staged=settings.producer.staged,
        ).start()
        self._on_delivery = self._make_callback()

    def _make_callback(self):
        add = self.ledger.add
        now = time.time
        me = self

        # librdkafka hands delivery reports back without their headers, so each record's
        # seq is bound to its callback with functools.partial (cheaper than a closure)
        def on_delivery(seq, user, err, msg):
            add((seq, msg.topic(), msg.partition(), msg.offset(), err, msg.latency(), now()))
            me._note(seq, err, msg)
            if user is not None and (err is not None or not me._errors_only):
                user(err, msg)

        return on_delivery

    def _note(self, seq: int, err, msg) -> None:
        if err is None:
            self._acked += 1
            if self.record is not None:
                self.record.append((seq, msg.topic(), msg.partition(), msg.offset()))
        else:
            self._failed += 1
            if self.failures is not None:
                self.failures.append((seq, msg.topic(), msg.partition(), err.name()))

    def _native_record_callback(self, seq, user, err, msg):
        self._note(seq, err, msg)
        if user is not None and (err is not None or not self._errors_only):
            user(err, msg)

    # ---- producing ----------------------------------------------------------------------
    @property
    def sent(self) -> int:
        """Records handed to librdkafka (each got its sequence)."""
        return self._state.sent if self._state is not None else self._seq

    @property
    def unstamped(self) -> int:
        """Native path: records the plugin left unstamped (within the stamp's size of
        ``message.max.bytes``, or stamped by the caller already): sent, not audited."""
        return self._state.unstamped if self._state is not None else self._unstamped

    @property
    def acked(self) -> int:
        """Audited writes acknowledged (native path: the plugin's count of stamped ones)."""
        return self._state.acked if self._state is not None else self._acked

    @property
    def failed(self) -> int:
        return self._state.failed if self._state is not None else self._failed

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                partition: int | None = None, headers: list[tuple[str, bytes]] | None = None,
                *, on_delivery=None, callback=None, timestamp: int = 0) -> int:
        """Send one stamped record; return its sequence number."""
        seq = self._seq
        user = on_delivery or callback
        kw: dict[str, Any] = {} if partition is None else {"partition": partition}
        if timestamp:
            kw["timestamp"] = timestamp
        if self.native:  # keep_record: the seq the plugin gives this record, counted here
            try:
                self._producer.produce(topic, value, key, headers=headers,
                                       on_delivery=partial(self._native_record_callback, seq,
                                                           user or self._user_default), **kw)
            except KafkaException as exc:
                if exc.args[0].code() in (KafkaError._UNKNOWN_PARTITION,
                                          KafkaError._UNKNOWN_TOPIC):
                    self._seq = seq + 1  # refused after on_send: the seq was taken
                raise
            self._seq = seq + 1
            return seq
        stamp = self._head + SEQ_CRC.pack(seq, crc32(value or b"")) + self._tail
        hdrs = [(HEADER, stamp)] if self._mac is None else [(HEADER, stamp),
                                                             (MAC_HEADER, self._mac(stamp))]
        if headers:
            hdrs += headers
        cb = partial(self._on_delivery, seq, user or self._user_default)
        self._producer.produce(topic, value, key, headers=hdrs, on_delivery=cb, **kw)
        self._seq = seq + 1
        return seq

    # transactions: passed through; every record's delivery report is ledgered as usual
    def init_transactions(self, timeout: float = 30) -> None:
        self._producer.init_transactions(timeout)

    def begin_transaction(self) -> None:
        self._producer.begin_transaction()

    def commit_transaction(self, timeout: float = 30) -> None:
        self._producer.commit_transaction(timeout)

    def abort_transaction(self, timeout: float = 30) -> None:
        self._producer.abort_transaction(timeout)

    def poll(self, timeout: float = 0) -> int:
        return self._producer.poll(timeout)

    def flush(self, timeout: float = 60) -> int:
        """Wait for outstanding delivery reports; return how many are still outstanding."""
        left = self._producer.flush(timeout)
        self.ledger.flush()
        return left

    def __len__(self) -> int:
        return len(self._producer)

    def close(self, timeout: float = 60) -> None:
        if not self.native:
            self._producer.flush(timeout)
            self.ledger.close()
            return
        if self._producer.flush(timeout):
            # still undelivered: fail them (reported, and ledgered, as purged) rather than
            # wait forever in close()
            self._producer.purge()
            self._producer.flush(min(timeout, 10))
        if self.record is not None and self._state.sent != self._seq:
            raise LedgerWriteError(f"the plugin gave {self._state.sent} sequences, this "
                                   f"producer counted {self._seq}: its own record is wrong")
        sent, acked, failed = self._state.sent, self._state.acked, self._state.failed
        self._producer.close()  # the plugin seals its spool; the folder is the shipper's
        self._seq, self._acked, self._failed = sent, acked, failed
        self._unstamped = self._state.unstamped
        self._state.close()
        self._state = None
        self.ledger.close()

    def __enter__(self) -> AuditedProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
