"""What ``GET /v1/suspicions`` pays after each audit pass: the suspicions' states derived
again from the committed findings (``auditor_api/routes/suspicions.py``,
``settled_suspicions``), over a run's warehouse (a latency run's, say), the snapshots
loaded once as the API holds them: CPU seconds per derivation (median and range of
rounds) and a digest of the states, so a change is timed on the same rows and shown to
give them. ``--against REV``: the module as it was at git revision ``REV`` too, the rounds
interleaved.

Run::

    .venv/bin/python bench/suspicion_states.py var/latency-s10-local-<id> [--rounds 7] \
        [--against REV]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kafka_audit.auditor_api.deps import TableReader
from kafka_audit.auditor_api.routes.suspicions import settled_suspicions
from kafka_audit.settings import Settings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("home", type=Path, help="a run's home (its warehouse/ beneath)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--against", help="a git revision: its module timed too, interleaved")
    args = ap.parse_args()
    reader = TableReader(Settings(home=args.home.resolve()))
    for table in ("findings", "suspicions", "audit_hot"):
        reader.snapshot(table)  # loaded once, as the API holds them
    findings = reader.snapshot("findings").data.num_rows
    ways = {"now": settled_suspicions}
    if args.against:
        ways[args.against] = module_at(args.against,
                                       "auditor_api/routes/suspicions.py").settled_suspicions
    times: dict[str, list[float]] = {k: [] for k in ways}
    digests: dict[str, str] = {}
    for _ in range(args.rounds):
        for name, derive in ways.items():
            reader.snapshots._memo.clear()  # a new findings version: derived anew
            t0 = time.process_time()
            rows = derive(reader)
            times[name].append(time.process_time() - t0)
            digests[name] = _digest(rows)
    for name, ts in times.items():
        print(f"{name}: {len(rows)} suspicions over {findings} findings: CPU "
              f"{statistics.median(ts):.3f} s a derivation (median of {args.rounds}; "
              f"{min(ts):.3f}-{max(ts):.3f}), states digest {digests[name]}")


def _digest(rows: list[dict]) -> str:
    states = [(r["topic"], r["partition"], r["producer_id"], r["run_id"], r["seq"], r["state"],
               r["lost"], r["found"], r["other"], r["pending"]) for r in rows]
    return hashlib.sha256(json.dumps(states).encode()).hexdigest()[:12]


def module_at(rev: str, path: str):
    """The module at ``path`` (from the repository's root) as it was at git revision
    ``rev``, imported apart."""
    here = Path(__file__).resolve().parent.parent
    text = subprocess.run(["git", "show", f"{rev}:{path}"],
                          cwd=here, check=True, capture_output=True, text=True).stdout
    name = f"{Path(path).stem}_then"
    file = Path(tempfile.mkdtemp()) / f"{name}.py"
    file.write_text(text)
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module

if __name__ == "__main__":
    main()
