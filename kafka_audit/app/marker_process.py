"""The suspicion marker of ``kafka-audit run`` in a process of its own.

The marker turns a leader change's ``epoch_end`` row into ``suspicions`` rows within
seconds (``jobs/audit/suspicions.py``). In the service's process it waited for the
interpreter lock whenever an audit pass re-read and judged a fail-over's ranges, which
is exactly when it has work: the latency benchmark saw its rows committed up to 10 s after
the round that made them began, on kills of the active controller (the round itself takes
about 0.1 s of CPU). The service starts it as it starts the API process
(``kafka_audit/app/api_process.py``: settings through a pipe, without the Kafka secrets,
which it has no use for; restarted if it dies; SIGTERM stops it; it dies with the thread
that started it).
"""

from __future__ import annotations

import logging
import pickle
import signal
import sys
import threading

__all__ = ["MODULE", "main"]

MODULE = "kafka_audit.app.marker_process"


def main() -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _sig, _frame: stop.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the service stops it (Ctrl-C reaches both)

    from kafka_audit.app.api_process import child_logging
    from kafka_audit.app.memstats import watch_memory
    from kafka_audit.jobs.audit.suspicions import run_marker

    settings, formatter = pickle.load(sys.stdin.buffer)
    child_logging(formatter)
    for name in ("kafka_audit.jobs.audit.suspicions", "kafka_audit.memory"):
        logging.getLogger(name).setLevel(logging.INFO)
    watch_memory(settings.steady.trim_every_seconds, settings.service.memory_log_seconds,
                 stop, "marker")
    run_marker(settings, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
