"""Shares of a Java Flight Recorder recording's CPU samples: where a JVM's time goes.

Reads the ``jdk.ExecutionSample`` events of a recording (``jfr print --json``, the JDK's
own tool) and prints, for the threads whose name starts with ``--threads`` (default:
Spark's task threads), the share of their samples whose top ``--depth`` frames hold a
method of a class matching ``--match`` (code of one's own and what it calls directly:
``ReadRuns`` for the consume job's fold), the leaf methods of those samples, and the
leaf methods of all samples. A recording of the Spark driver comes from
``KAFKA_AUDIT_SPARK__PROPERTIES='{"spark.driver.extraJavaOptions":
"-XX:StartFlightRecording=filename=F.jfr,settings=profile"}'`` (written when the JVM
exits). Run::

    .venv/bin/python bench/jfr_share.py F.jfr [--match ReadRuns] [--depth 4]
"""

from __future__ import annotations

import argparse
import json
import subprocess
from collections import Counter


def method(frame: dict) -> str:
    m = frame["method"]
    return f"{m['type']['name'].split('/')[-1]}.{m['name']}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recording")
    ap.add_argument("--match", default="ReadRuns", help="part of a class name")
    ap.add_argument("--depth", type=int, default=4, help="top frames looked at")
    ap.add_argument("--threads", default="Executor task launch worker")
    ap.add_argument("--top", type=int, default=10)
    args = ap.parse_args()
    out = subprocess.run(["jfr", "print", "--json", "--events", "jdk.ExecutionSample",
                          args.recording], capture_output=True, text=True, check=True).stdout
    events = json.loads(out)["recording"]["events"]
    leaves, ours, in_threads = Counter(), Counter(), 0
    for e in events:
        frames = (e["values"].get("stackTrace") or {}).get("frames") or []
        if not frames:
            continue
        leaves[method(frames[0])] += 1
        if not (e["values"]["sampledThread"]["javaName"] or "").startswith(args.threads):
            continue
        in_threads += 1
        if any(args.match in f["method"]["type"]["name"] for f in frames[:args.depth]):
            ours[method(frames[0])] += 1
    n = len(events)
    print(f"{n} samples, {in_threads} in threads '{args.threads}*'; with {args.match} in "
          f"their top {args.depth} frames: {sum(ours.values())} "
          f"({sum(ours.values()) / max(1, in_threads):.1%} of those threads')")
    for name, k in ours.most_common(args.top):
        print(f"  {k / max(1, in_threads):6.1%}  {name}")
    print(f"leaf methods of all {n} samples:")
    for name, k in leaves.most_common(args.top):
        print(f"  {k / max(1, n):6.1%}  {name}")


if __name__ == "__main__":
    main()
