"""``kafka-audit run``: the watcher, the consume stream, the audit loop and the REST API as
one supervised service.

Each component runs in a thread of its own and rides out outages itself
(``kafka_audit/status.py``); the REST API's thread runs the server as a child process
(``kafka_audit/api_process.py``), so that its requests never wait on an audit pass for
the interpreter lock. A component whose thread dies anyway (an error it
does not handle) is restarted after a capped doubling wait; the restart is
logged and counted in its status file, where ``/readyz`` shows it. SIGTERM or
SIGINT stops everything within ``service.stop_timeout_seconds`` (30): the
consume query stops between micro-batches (its checkpoint and the ``consumed``
table stay consistent: a batch is replayed at most once and skipped if already
written), the audit loop finishes or abandons its pass (a pass that died before
its commit point is redone by the next run), the watcher and the API stop.
SIGUSR1 stops the consume query as if it had failed (a fault to test the
supervisor with; it restarts it).

Steady state: the consume job wakes the audit loop when it commits a micro-batch (an
in-process event, ``steady.wake_on_commit``), so a loss is judged soon after its
settle period rather than up to an interval later; the Spark session is shared and
kept with bounded bookkeeping (:data:`LONG_RUNNING_SPARK`).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kafka_audit.memstats import watch_memory
from kafka_audit.settings import Settings

__all__ = ["Service", "Component", "LONG_RUNNING_SPARK"]

log = logging.getLogger("kafka_audit.service")

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
    extra: dict = field(default_factory=dict)


class Service:
    """Starts the components, restarts the ones that die, stops them all on a signal."""

    def __init__(self, settings: Settings, components: list[Component]) -> None:
        self.settings = settings
        self.components = components
        self.stop = threading.Event()

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
        c.thread.start()

    def run(self, install_signals: bool = True) -> int:
        """Run until SIGTERM/SIGINT (or :attr:`stop`); return the process's exit code."""
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.stop.set())
        for c in self.components:
            self._start(c)
        watch_memory(self.settings.steady.trim_every_seconds,
                     self.settings.service.memory_log_seconds, self.stop)
        log.info("running: %s", ", ".join(c.name for c in self.components))
        cap = self.settings.outage.max_backoff_seconds
        while not self.stop.wait(0.5):
            now = time.monotonic()
            for c in self.components:
                if c.thread is not None and c.thread.is_alive():
                    continue
                if c.thread is not None:  # it died: wait, then start it again
                    c.thread = None
                    c.backoff = min(max(c.backoff * 2, self.settings.outage.retry_seconds), cap)
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
        deadline = time.monotonic() + self.settings.service.stop_timeout_seconds
        log.info("stopping")
        for c in self.components:
            if c.thread is not None:
                c.thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [c.name for c in self.components if c.thread is not None and c.thread.is_alive()]
        if stuck:
            log.error("did not stop in %.0fs: %s", self.settings.service.stop_timeout_seconds,
                      ", ".join(stuck))
            return 1
        log.info("stopped")
        return 0


def build(settings: Settings, spark_factory=None) -> Service:
    """The four components of ``kafka-audit run`` over one Spark session (made lazily, in
    the consume component, so the API and the watcher start at once); the API serves
    from a child process."""
    from kafka_audit.api_process import supervise_api_process
    from kafka_audit.jobs.audit_job import run_audit_loop
    from kafka_audit.jobs.consume_job import run_consume
    from kafka_audit.jobs.watcher import ClusterWatcher

    spark_lock = threading.Lock()
    session: list = []

    def spark():
        with spark_lock:
            if not session:
                from kafka_audit.jobs.spark import get_spark

                session.append((spark_factory or get_spark)(long_running(settings),
                                                            "kafka-audit-run"))
            return session[0]

    def watcher(stop: threading.Event) -> None:
        ClusterWatcher(settings).run(stop)

    # set by each consume commit, it starts the next audit pass early
    wake = threading.Event() if settings.steady.wake_on_commit else None

    def consume(stop: threading.Event) -> None:
        run_consume(spark(), settings, stop=stop, on_commit=wake.set if wake else None)

    def audit(stop: threading.Event) -> None:
        run_audit_loop(spark(), settings, stop=stop, wake=wake, report=lambda s: log.info(
            "%s [%s]", s.line(), " ".join(f"{k.replace(' ', '_')} {v:.1f}"
                                          for k, v in s.seconds.items())))

    def api(stop: threading.Event) -> None:
        supervise_api_process(settings, stop)

    service = Service(settings, [Component("watcher", watcher), Component("consume", consume),
                                 Component("audit", audit), Component("api", api)])
    service.spark = spark  # type: ignore[attr-defined] - for the SIGUSR1 fault hook
    return service


def stop_consume_query(service: Service) -> None:
    """SIGUSR1: stop the consume query as a failure would (the component restarts it)."""
    from kafka_audit.jobs.consume_job import QUERY_NAME

    for q in service.spark().streams.active:  # type: ignore[attr-defined]
        if q.name == QUERY_NAME:
            log.warning("SIGUSR1: stopping the consume query")
            q.stop()
