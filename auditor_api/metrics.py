"""``GET /metrics``: Prometheus text exposition (``prometheus-client``).

* the API's own request latency, ``kafka_audit_api_request_seconds`` (a histogram by
  route template, method and status; a path no route matches is ``route="unmatched"``);
* the audit's figures per topic, labelled ``topic`` and ``system`` (``kafka``, or
  ``rabbitmq`` for a RabbitMQ queue's key: ``schemas/systems.py``), computed at scrape
  time from the table snapshots (a lookup while nothing committed): acked, confirmed, lost
  and judged writes per verdict, duplicates, reordered (counters: they only grow); pending
  and unseen writes, the audit lag (gauges); foreign, malformed and forged records seen
  (``kafka_audit_unjudged_records_total`` by reason); and globally the committed pass, the
  age of its commit, each component's last good step and the consume job's lag from the
  status files.

* writes suspected lost at a leader change (``/v1/suspicions``): every one suspected, and
  those withdrawn (counters of the suspicions the warehouse holds: retention drops them
  after ``retention.days``, which Prometheus takes as a counter reset), those not judged
  yet (a gauge, which the alert rule watches), per topic (and its system).

``deploy/prometheus-alerts.yml`` alerts on ``kafka_audit_lost_writes_total`` and
``kafka_audit_open_suspected_writes``.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kafka_audit.schemas.systems import system_of
from kafka_audit.status import components_of, consume_lag, current_statuses
from kafka_audit.store import commit_time

__all__ = ["RequestMetrics", "audit_metrics", "CONTENT_TYPE"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: request latency buckets: a lookup is sub-millisecond, a timeline tens of ms
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class RequestMetrics:
    """ASGI middleware timing every HTTP request into the app's histogram."""

    def __init__(self, app: ASGIApp, registry: CollectorRegistry) -> None:
        self.app = app
        self.seconds = Histogram("kafka_audit_api_request_seconds",
                                 "REST API request latency, by route template",
                                 ["route", "method", "status"], registry=registry,
                                 buckets=BUCKETS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [500]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self.seconds.labels(template, scope.get("method", ""), str(status[0])).observe(
                time.perf_counter() - start)


def _counter(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, labels=labels)


def _gauge(name: str, doc: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels or [])


class _Families:
    def __init__(self, families: list) -> None:
        self.families = families

    def collect(self):
        return iter(self.families)


def audit_metrics(reader, settings) -> bytes:
    """The audit's figures, now, as Prometheus text."""
    from kafka_audit.auditor_api.routes.topics import all_topics

    now = time.time()
    topics = all_topics(reader)
    progress = reader.progress()
    t = ["topic", "system"]  # system: one selector keeps RabbitMQ's queues or Kafka's topics
    acked = _counter("kafka_audit_acked_writes", "writes in the ack ledger (failed included)", t)
    confirmed = _counter("kafka_audit_confirmed_writes", "writes confirmed in the log", t)
    lost = _counter("kafka_audit_lost_writes", "acknowledged writes lost (lost and "
                                               "lost_after_seen), committed passes", t)
    judged = _counter("kafka_audit_judged_writes", "writes judged, per verdict kind",
                      [*t, "kind"])
    dups = _counter("kafka_audit_duplicate_writes", "writes found at two or more offsets", t)
    reord = _counter("kafka_audit_reordered_writes", "writes found above a later write of "
                                                     "their producer run", t)
    unjudged = _counter("kafka_audit_unjudged_records", "records read that cannot be judged: "
                        "foreign (no_stamp, unknown_producer), malformed (malformed_stamp, "
                        "bad_checksum) or forged (forged_stamp)", [*t, "reason"])
    dropped = _counter("kafka_audit_ledger_dropped", "acknowledged writes whose delivery "
                       "reports the producers' ack ledgers could not record (their spool's "
                       "disk full while the warehouse was out of reach): never judged, "
                       "described by the unrecorded findings", t)
    pending = _gauge("kafka_audit_pending_writes", "acked writes not judged yet", t)
    unseen = _gauge("kafka_audit_unseen_writes", "pending writes unread longer than "
                                                 "audit.unseen_after_seconds", t)
    lag = _gauge("kafka_audit_audit_lag_seconds", "newest ack in the ledger minus the newest "
                 "ack the last committed pass had taken in (0: caught up)", t)
    ratio = _gauge("kafka_audit_loss_ratio", "lost / acked", t)
    judged_acks = reader.memo(("judged_acks", progress.acks_version), ("audit_hot",),
                              lambda _h: reader.newest_acks(progress.acks_version))
    for name, tt in topics.items():
        key = [name, system_of(name)]
        acked.add_metric(key, tt.acked)
        confirmed.add_metric(key, tt.verdicts.get("confirmed", 0))
        lost.add_metric(key, tt.lost)
        for kind, n in tt.verdicts.items():
            judged.add_metric([*key, kind], n)
        dups.add_metric(key, tt.annotations.get("duplicate", 0))
        reord.add_metric(key, tt.annotations.get("reordered", 0))
        dropped.add_metric(key, tt.unrecorded)
        for reason, n in (tt.unjudged or {}).items():
            unjudged.add_metric([*key, reason], n)
        pending.add_metric(key, tt.pending)
        unseen.add_metric(key, tt.unseen)
        ratio.add_metric(key, tt.loss_ratio or 0.0)
        if tt.newest_ack is not None:
            seen = judged_acks.get(name)
            behind = (tt.newest_ack - seen).total_seconds() if seen else (
                datetime.now(UTC) - tt.newest_ack).total_seconds()
            lag.add_metric(key, max(behind, 0.0))

    suspected = _counter("kafka_audit_suspected_writes", "writes suspected lost at a leader "
                         "change (where the old leader's epoch ends in the new leader's log), "
                         "before any read judged them", t)
    withdrawn = _counter("kafka_audit_withdrawn_suspected_writes", "suspected writes the read "
                         "after settle judged otherwise than lost", t)
    open_ = _gauge("kafka_audit_open_suspected_writes", "suspected writes not judged yet", t)
    from kafka_audit.auditor_api.routes.suspicions import settled_suspicions, suspected_totals

    rows = settled_suspicions(reader)
    for name in sorted({r["topic"] for r in rows}):
        key = [name, system_of(name)]
        sums = suspected_totals([r for r in rows if r["topic"] == name])
        suspected.add_metric(key, sums.suspected)
        withdrawn.add_metric(key, sums.withdrawn)
        open_.add_metric(key, sums.open)
    committed = _gauge("kafka_audit_committed_pass", "the last committed audit pass (0: none)")
    committed.add_metric([], progress.pass_id)
    families = [acked, confirmed, lost, judged, dups, reord, unjudged, dropped, pending,
                unseen, lag, ratio, suspected, withdrawn, open_, committed]
    hot = reader.snapshot("audit_hot")
    if hot.version >= 0 and progress.pass_id > 0:
        at = reader.memo(("hot_commit_time", hot.version), (),
                         lambda: commit_time(settings.table_path("audit_hot"), hot.version))
        if at is not None:
            age = _gauge("kafka_audit_last_pass_age_seconds", "seconds since the last "
                         "committed audit pass committed")
            age.add_metric([], max(now - at, 0.0))
            families.append(age)
    since_ok = _gauge("kafka_audit_component_seconds_since_ok", "seconds since a component's "
                      "last good step (status files)", ["component"])
    failing = _gauge("kafka_audit_component_failing", "1 while a component cannot do its work",
                     ["component"])
    lag = _gauge("kafka_audit_consume_lag_offsets", "offsets the consume job has not "
                 "committed yet: each partition's log end (the watcher's last sample) less "
                 "the consume job's committed offset; absent while not measurable")
    # statuses of the running processes only: a stopped run's last figures are no figures
    statuses = current_statuses(settings.home_dir).current
    for name in components_of(settings):
        s = statuses.get(name)
        if s is None:
            continue
        if s.last_ok is not None:
            since_ok.add_metric([name], max(now - s.last_ok.timestamp(), 0.0))
        failing.add_metric([name], 1.0 if s.failing_since is not None else 0.0)
    measured = consume_lag(statuses.get("consume"), statuses.get("watcher"))["offsets"]
    if measured is not None:
        lag.add_metric([], measured)
    families += [since_ok, failing, lag]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return generate_latest(registry)



