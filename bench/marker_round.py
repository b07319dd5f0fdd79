"""What one round of the suspicion marker costs (``jobs/audit/suspicions.py``) over a run's
warehouse (a latency run's, say): the change with the most suspicions, the marker's round
just after it replayed by a fresh marker, CPU seconds per round (median and range of
rounds). The suspicions are in the table already, so the round suspects nothing new, but it
holds every piece of the change's runs against them, as the live round held each against
those it had made before. ``--against REV``: the rule (``jobs/core/suspicion.py``) as it
was at git revision ``REV`` too, the rounds interleaved.

Run::

    .venv/bin/python bench/marker_round.py var/latency-s10-local-<id> [--rounds 5] \
        [--against REV]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import yaml
from suspicion_states import module_at

import kafka_audit.jobs.audit.suspicions as marker_module
from kafka_audit.jobs.audit.suspicions import Marker
from kafka_audit.settings import Settings
from kafka_audit.store import read_table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("home", type=Path, help="a run's home (its run.yaml and warehouse/)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--against", help="a git revision: its rule timed too, interleaved")
    args = ap.parse_args()
    settings = Settings.model_validate(yaml.safe_load((args.home / "run.yaml").read_text()))
    rows = read_table(settings.table_path("suspicions"), "suspicions",
                      ["changed_at"]).column("changed_at").to_pylist()
    change, runs = Counter(rows).most_common(1)[0]
    ways = {"now": marker_module.suspect}
    if args.against:
        ways[args.against] = module_at(args.against, "jobs/core/suspicion.py").suspect
    times: dict[str, list[float]] = {k: [] for k in ways}
    for _ in range(args.rounds):
        for name, rule in ways.items():
            marker_module.suspect = rule
            marker = Marker(settings)
            marker.round(change - timedelta(seconds=1))  # before the change's answer
            t0 = time.process_time()
            marker.round(change + timedelta(seconds=2))
            times[name].append(time.process_time() - t0)
    for name, ts in times.items():
        print(f"{name}: the round after the change at {change.isoformat()} ({runs} "
              f"suspicions): CPU {statistics.median(ts):.3f} s (median of {args.rounds}; "
              f"{min(ts):.3f}-{max(ts):.3f})")


if __name__ == "__main__":
    main()
