"""``kafka-audit run``: the watcher, the consume stream, the audit loop and the REST API as
one supervised service (and, for the queues of ``rabbitmq``, the RabbitMQ reader and
watcher).

Each component runs in a thread of its own and rides out outages itself
(``kafka_audit/status.py``); the REST API's thread runs the server as a child process
(``kafka_audit/app/api_process.py``), and the suspicion marker's runs the marker as
another (``kafka_audit/app/marker_process.py``), so that neither waits on an audit pass
for the interpreter lock. A component whose thread dies anyway (an error it
does not handle) is restarted after a capped doubling wait, which starts again from
the first wait once the component had run ``outage.healthy_seconds`` before it died (a
rare crash after a healthy spell is not punished for an old crash loop); the restart is
logged and counted in its status file, where ``/readyz`` shows it. SIGTERM or
SIGINT stops everything within ``service.stop_timeout_seconds`` (30): the
consume query stops (between micro-batches, or interrupting the one running, which
is read again at the next start: its checkpoint and the ``consumed`` table stay
consistent, a batch is replayed at most once and skipped if already written; the
interruption's expected errors are one log line, not a stack), the audit loop
finishes or abandons its pass (a pass that died before its commit point is redone
by the next run), the watcher and the API stop; then the Spark session stops and
the service waits for its driver JVM to exit (none outlives the service), and says
in one line how long the stop took. SIGUSR1 stops the consume query as if it had
failed (a fault to test the supervisor with; it restarts it).

While it runs, ``<home>/status/service.json`` records the service's process
(``kafka_audit/status.py``): health counts only the status files this process
writes, never those an earlier run left.

Steady state: the consume job wakes the audit loop when it commits a micro-batch (an
in-process event, ``steady.wake_on_commit``), so a loss is judged soon after its
settle period rather than up to an interval later; while it reads a backlog (after an
outage: more than ``spark.max_offsets_per_trigger`` waited when it planned its last
micro-batch) passes wait for the reading, which has the machine
(``steady.backlog_pass_seconds``); the Spark session is shared and kept with bounded
bookkeeping (:data:`LONG_RUNNING_SPARK`).
"""

from __future__ import annotations

import logging
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kafka_audit.app.memstats import watch_memory
from kafka_audit.settings import Settings
from kafka_audit.status import StatusWriter, remove_service_record, write_service_record

__all__ = ["Service", "Component", "LONG_RUNNING_SPARK", "stop_spark"]

log = logging.getLogger("kafka_audit.app.service")

#: Spark properties for a session that runs for days (the operator's spark.properties win):
#: the driver keeps what it tracks of jobs, stages, tasks and SQL executions in memory up
#: to these counts (defaults 1000, 1000, 100,000 and 1000: hundreds of MB at a pass
#: every few seconds), and shuffle files and checkpointed blocks nobody references are
#: cleaned at a JVM garbage collection forced this often (default 30 min)
LONG_RUNNING_SPARK = {
    "spark.ui.retainedJobs": "50",
    "spark.ui.retainedStages": "50",
    "spark.ui.retainedTasks": "5000",
    "spark.sql.ui.retainedExecutions": "50",
    "spark.cleaner.periodicGC.interval": "2min",
}


def long_running(settings: Settings) -> Settings:
    """``settings`` with :data:`LONG_RUNNING_SPARK` under the operator's Spark properties."""
    spark = settings.spark.model_copy(
        update={"properties": {**LONG_RUNNING_SPARK, **settings.spark.properties}})
    return settings.model_copy(update={"spark": spark})


@dataclass
class Component:
    """One supervised part: ``target(stop)`` runs until ``stop`` is set."""

    name: str
    target: Callable[[threading.Event], None]
    restarts: int = 0
    thread: threading.Thread | None = None
    last_error: str | None = None
    next_start: float = 0.0
    backoff: float = 0.0
    started_at: float = 0.0
    extra: dict = field(default_factory=dict)


def restart_wait(previous: float, ran_for: float, retry: float, cap: float,
                 healthy: float) -> float:
    """The wait before a dead component starts again: double the last (from ``retry``, at
    most ``cap``), or ``retry`` again if it ran ``healthy`` seconds before dying."""
    if ran_for >= healthy:
        previous = 0.0
    return min(max(previous * 2, retry), cap)


class Service:
    """Starts the components, restarts the ones that die, stops them all on a signal."""

    def __init__(self, settings: Settings, components: list[Component],
                 on_stop: Callable[[float], str] | None = None) -> None:
        self.settings = settings
        self.components = components
        self.stop = threading.Event()
        #: after the components stopped, with the seconds left: releases what they shared
        #: (the Spark session and its JVM); returns what it did, for the last log line
        self.on_stop = on_stop

    def _start(self, c: Component) -> None:
        def body() -> None:
            try:
                c.target(self.stop)
            except BaseException as exc:  # noqa: BLE001 - the supervisor restarts it
                c.last_error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}" \
                    if str(exc) else type(exc).__name__
                log.error("%s stopped with an error: %s", c.name, c.last_error)
                raise

        c.thread = threading.Thread(target=body, name=f"kafka-audit-{c.name}", daemon=True)
        c.started_at = time.monotonic()
        c.thread.start()

    def run(self, install_signals: bool = True) -> int:
        """Run until SIGTERM/SIGINT (or :attr:`stop`); return the process's exit code."""
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.stop.set())
        write_service_record(self.settings.home_dir)
        for c in self.components:
            self._start(c)
        watch_memory(self.settings.steady.trim_every_seconds,
                     self.settings.service.memory_log_seconds, self.stop)
        log.info("running: %s", ", ".join(c.name for c in self.components))
        outage = self.settings.outage
        while not self.stop.wait(0.5):
            now = time.monotonic()
            for c in self.components:
                if c.thread is not None and c.thread.is_alive():
                    continue
                if c.thread is not None:  # it died: wait, then start it again
                    c.thread = None
                    c.backoff = restart_wait(c.backoff, now - c.started_at, outage.retry_seconds,
                                             outage.max_backoff_seconds, outage.healthy_seconds)
                    c.next_start = now + c.backoff
                    log.warning("%s will be restarted in %.1fs (restart %d)", c.name,
                                c.backoff, c.restarts + 1)
                    continue
                if now >= c.next_start:
                    c.restarts += 1
                    log.warning("%s restarted (restart %d)", c.name, c.restarts)
                    self._start(c)
        return self._shutdown()

    def _shutdown(self) -> int:
        start = time.monotonic()
        deadline = start + self.settings.service.stop_timeout_seconds
        log.info("stopping")
        for c in self.components:
            if c.thread is not None:
                c.thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [c.name for c in self.components if c.thread is not None and c.thread.is_alive()]
        released = ""
        if self.on_stop is not None:
            try:
                released = self.on_stop(max(1.0, deadline - time.monotonic()))
            except Exception as exc:  # noqa: BLE001 - stopping anyway: said in one line
                released = f"releasing failed: {type(exc).__name__}: " \
                           f"{str(exc).splitlines()[0][:200] if str(exc) else ''}"
        try:
            remove_service_record(self.settings.home_dir)
        except OSError as exc:
            log.debug("service record: %s", exc)
        if stuck:
            log.error("did not stop in %.0fs: %s%s", self.settings.service.stop_timeout_seconds,
                      ", ".join(stuck), f" ({released})" if released else "")
            return 1
        log.info("stopped in %.1fs%s", time.monotonic() - start,
                 f" ({released})" if released else "")
        return 0


def build(settings: Settings, spark_factory=None) -> Service:
    """The components of ``kafka-audit run`` (the watcher, the committer of staged acks,
    consume, audit, the suspicion marker, the API, and with ``rabbitmq.queues`` the
    RabbitMQ reader and watcher) over one Spark session (made lazily, in
    the consume component, so the API and the watcher start at once); the API serves
    from a child process."""
    from kafka_audit.app.api_process import supervise_api_process, supervise_child
    from kafka_audit.app.marker_process import MODULE as MARKER
    from kafka_audit.jobs.audit import quality
    from kafka_audit.jobs.audit.audit_job import run_audit_loop
    from kafka_audit.jobs.consume.consume_job import Backlog, run_consume
    from kafka_audit.jobs.spark import forget_dead_session, jvm_alive
    from kafka_audit.jobs.upkeep.staged_acks import run_staged_commits
    from kafka_audit.jobs.watcher.watcher import ClusterWatcher

    spark_lock = threading.Lock()
    session: list = []

    def spark():
        with spark_lock:
            if session and not jvm_alive(session[0]):  # killed, or out of memory
                log.warning("the Spark driver JVM is gone: starting a new one")
                session.pop()
                forget_dead_session()
            if not session:
                from kafka_audit.jobs.spark import get_spark

                try:
                    session.append((spark_factory or get_spark)(long_running(settings),
                                                                "kafka-audit-run"))
                except Exception:
                    # a JVM killed while the session was being made: the next try (the
                    # supervisor's restart) starts another instead of the dead one
                    if forget_dead_session():
                        log.warning("the Spark driver JVM died while starting")
                    raise
            return session[0]

    def watcher(stop: threading.Event) -> None:
        ClusterWatcher(settings).run(stop)

    # set by each consume commit, it starts the next audit pass early
    wake = threading.Event() if settings.steady.wake_on_commit else None
    backlog = Backlog()  # what the consume job still has to read: the passes wait for it

    def consume(stop: threading.Event) -> None:
        run_consume(spark(), settings, stop=stop, on_commit=wake.set if wake else None,
                    backlog=backlog)

    def audit(stop: threading.Event) -> None:
        # great-expectations' set-up while the Spark JVM starts, not at the first check
        threading.Thread(target=quality.prepare, name="kafka-audit-quality-prepare",
                         daemon=True).start()
        run_audit_loop(spark(), settings, stop=stop, wake=wake, behind=backlog,
                       report=lambda s: log.info(
            "%s [%s]", s.line(), " ".join(f"{k.replace(' ', '_')} {v:.1f}"
                                          for k, v in s.seconds.items())))

    def api(stop: threading.Event) -> None:
        supervise_api_process(settings, stop)

    def ledger(stop: threading.Event) -> None:
        run_staged_commits(settings, stop)

    def suspicions(stop: threading.Event) -> None:  # its own process: no wait on a pass
        supervise_child(settings, stop, MARKER, "the suspicion marker process")

    def release(budget: float) -> str:
        with spark_lock:
            if not session:
                return "no Spark session was started"
            return stop_spark(session.pop(), budget)

    service = Service(settings, [Component("watcher", watcher), Component("ledger", ledger),
                                 Component("consume", consume), Component("audit", audit),
                                 Component("suspicions", suspicions), Component("api", api),
                                 *rabbit_components(settings)],
                      on_stop=release)
    service.spark = spark  # type: ignore[attr-defined] - for the SIGUSR1 fault hook
    return service


def rabbit_components(settings: Settings) -> list[Component]:
    """With ``rabbitmq.queues`` set, the RabbitMQ reader and watcher (docs/rabbitmq.md);
    none otherwise. Needs pika (the ``[rabbitmq]`` extra): its absence is said at once,
    not by a component restarted for ever."""
    rc = settings.rabbitmq
    if not rc.queues:
        return []
    import pika  # noqa: F401 - ModuleNotFoundError here names the extra (cli.missing_extra)

    def reader(stop: threading.Event) -> None:
        from kafka_audit.jobs.consume.rabbit_reader import RabbitReader

        RabbitReader(settings, rc.parameters(), rc.queues, name=rc.reader_name,
                     barrier_seconds=rc.barrier_seconds, flush_seconds=rc.flush_seconds,
                     barrier_holdoff_seconds=rc.barrier_holdoff_seconds,
                     status=StatusWriter(settings.home_dir, "rabbit-reader")).run(stop)

    def watcher(stop: threading.Event) -> None:
        from kafka_audit.jobs.watcher.rabbit_watcher import RabbitWatcher

        RabbitWatcher(settings.table_path("cluster_events"),
                      {i: n.management for i, n in enumerate(rc.nodes, 1)}, rc.queues,
                      rc.username, rc.secret(),
                      interval=rc.watch_interval_seconds).run(
            stop, StatusWriter(settings.home_dir, "rabbit-watcher"))

    return [Component("rabbit-reader", reader), Component("rabbit-watcher", watcher)]


def stop_spark(spark, budget: float) -> str:
    """Stop ``spark``'s queries (quietly:
    :func:`~kafka_audit.jobs.consume.consume_job.stop_quietly`), then the session, then its
    driver JVM, waited for up to ``budget`` seconds (killed after): the JVM exits when its
    standard input closes, which happened only when this process exited, leaving the JVM
    running a second or two with no parent. Returns what happened, for the service's last
    log line."""
    from kafka_audit.jobs.consume.consume_job import stop_quietly

    for q in list(spark.streams.active):  # the consume job stopped its own: none, usually
        stop_quietly(spark, q)
    gateway = spark.sparkContext._gateway
    proc = getattr(gateway, "proc", None)  # None under spark-submit: not ours to stop
    spark.stop()
    if proc is None:
        return "Spark session stopped"
    try:
        gateway.shutdown()
    except Exception as exc:  # noqa: BLE001 - its sockets close with the JVM anyway
        log.debug("py4j gateway shutdown: %s", exc)
    t0 = time.monotonic()
    try:
        if proc.stdin is not None:
            proc.stdin.close()  # the JVM's PythonGatewayServer exits on end of input
        proc.wait(budget)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return f"the Spark driver JVM did not exit in {budget:.0f}s: killed"
    return f"the Spark driver JVM exited in {time.monotonic() - t0:.1f}s"


def stop_consume_query(service: Service) -> None:
    """SIGUSR1: stop the consume query as a failure would (the component restarts it)."""
    from kafka_audit.jobs.consume.consume_job import QUERY_NAME

    for q in service.spark().streams.active:  # type: ignore[attr-defined]
        if q.name == QUERY_NAME:
            log.warning("SIGUSR1: stopping the consume query")
            q.stop()
