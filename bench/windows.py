"""CPU time of the windows job's computation over a warehouse a run left.

Computes the windows ``--rounds`` times in a row over the same warehouse, keeping what
one computation keeps for the next (:class:`~kafka_audit.jobs.upkeep.windows_job.WindowInputs`,
as the service's upkeep does), and prints the process CPU seconds of each and a digest
of the windows (kind, bounds, losses, causes: not the acked counts of open windows,
which follow the clock). The first round reads everything; the others are the steady
cost the service pays every ``steady.windows_every_seconds`` when nothing was added.

Run (any home a run left, e.g. one of bench/latency.py's or bench/soak.py's)::

    .venv/bin/python bench/windows.py var/latency-s30-<id> [--rounds 5]

To time older code on the same warehouse, put a copy of its package first on
``PYTHONPATH``; a version without ``WindowInputs`` is timed with what it kept
(``AckCounts``) or nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import time

from kafka_audit.jobs.upkeep import windows_job
from kafka_audit.settings import Settings


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("home", help="the run's home (holding warehouse/)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    s = Settings(home=args.home)
    if hasattr(windows_job, "WindowInputs"):
        kept = windows_job.WindowInputs(s)
    else:  # older code
        kept = windows_job.AckCounts() if hasattr(windows_job, "AckCounts") else None
    cpu = []
    for _ in range(args.rounds):
        t = time.process_time()
        found = (windows_job.compute_windows(s, None, kept) if kept is not None
                 else windows_job.compute_windows(s))
        cpu.append(time.process_time() - t)
    digest = hashlib.sha1(repr(sorted(
        (w.window_id, w.kind, w.start, w.end, w.losses, w.opened_by, w.closed_by)
        for w in found)).encode()).hexdigest()[:12]
    print(f"{windows_job.__file__}: {len(found)} windows, digest {digest}; CPU s per "
          f"computation: " + ", ".join(f"{c:.3f}" for c in cpu))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
