"""What the watcher's KRaft metadata-log tail (``jobs/watcher/MetadataTail.java``) costs
beside a running cluster: its CPU time and RSS, read from /proc, after a warm-up.

    KAFKA_AUDIT_HOME=var .venv/bin/python bench/metadata_tail.py [--warm 20] [--seconds 60]

Tails the local cluster's three nodes' metadata logs (``<home>/kafka/node*/meta``), as the
watcher does; the cluster must be up (``kafka-audit demo --keep-running`` or a scenario).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from kafka_audit.jobs.watcher.metadata_log import local_metadata_dirs, tail_command
from kafka_audit.settings import get_settings


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--warm", type=float, default=20, help="seconds before measuring")
    ap.add_argument("--seconds", type=float, default=60, help="seconds measured")
    args = ap.parse_args()
    s = get_settings()
    dirs = local_metadata_dirs(s)
    if not dirs:
        print(f"no metadata log under {s.home_dir / 'kafka'}: is the local cluster there?",
              file=sys.stderr)
        return 2
    proc = subprocess.Popen(tail_command(dirs), stdout=subprocess.DEVNULL)

    def cpu() -> float:  # utime + stime, clock ticks of 1/100 s
        fields = open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / 100

    try:
        time.sleep(args.warm)
        a, t0 = cpu(), time.monotonic()
        time.sleep(args.seconds)
        used, took = cpu() - a, time.monotonic() - t0
        rss = next(line.split()[1] for line in open(f"/proc/{proc.pid}/status")
                   if line.startswith("VmRSS"))
    finally:
        proc.terminate()
        proc.wait(10)
    print(f"metadata log tail over {len(dirs)} nodes: {used:.2f} CPU s in {took:.0f} s "
          f"({100 * used / took:.1f}% of a core), RSS {int(rss) / 1024:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
