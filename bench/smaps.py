"""Where a running process's anonymous memory is, read from outside: its mappings
(``/proc/<pid>/smaps``, the anonymous kB of each) sampled every ``--every`` seconds while
the process runs, one JSON line per sample; ``--show`` prints them back.

    .venv/bin/python bench/smaps.py --match "bin/kafka-audit run" --out var/smaps.jsonl &
    .venv/bin/python bench/smaps.py --show var/smaps.jsonl

Per sample ``--show`` gives the anonymous total and the largest mappings (start address,
size, anonymous MB, the file or ``[heap]``): a 1 GiB mapping at a low address is
mimalloc's arena, one of 64 MB aligned to it a glibc arena, ``[heap]`` glibc's main heap.
The memory line (``kafka_audit/memstats.py``) says how much each allocator has in use;
this says how much of each is resident.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import time
from pathlib import Path

MAPPING = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$")


def mappings(pid: int) -> dict[str, list]:
    """Per mapping with anonymous pages: start -> [size kB, name, anonymous kB]."""
    out: dict[str, list] = {}
    cur: list | None = None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            m = MAPPING.match(line)
            if m:
                cur = [(int(m[2], 16) - int(m[1], 16)) // 1024, m[3].strip(), 0]
                out[m[1]] = cur
            elif line.startswith("Anonymous:") and cur is not None:
                cur[2] = int(line.split()[1])
    return {k: v for k, v in out.items() if v[2]}


def _pid(match: str) -> int | None:
    """The process of lowest pid whose command line holds ``match``, never this sampler or the
    shells and wrappers that started it (their command lines hold it too: started before
    the process, the sampler sampled itself)."""
    found = subprocess.run(["pgrep", "-f", match], capture_output=True, text=True).stdout.split()
    mine = _ancestors()
    found = [int(p) for p in found if int(p) not in mine]
    return found[0] if found else None


def _ancestors() -> set[int]:
    """This process and its parents up to init."""
    out, pid = set(), os.getpid()
    while pid > 1 and pid not in out:
        out.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return out


def watch(match: str, every: float, out: Path) -> None:
    """Sample the first process whose command line holds ``match`` until it is gone (waiting
    for it to start first)."""
    seen = False
    while True:
        pid = _pid(match)
        if pid is None and seen:
            return
        if pid is not None:
            try:
                maps = mappings(pid)
            except OSError:  # gone between pgrep and the read
                maps = None
            if maps is not None:
                seen = True
                with out.open("a") as f:
                    f.write(json.dumps({"t": time.strftime("%H:%M:%S"), "pid": pid,
                                        "maps": maps}) + "\n")
        time.sleep(every)


def show(path: Path, top: int) -> None:
    for line in path.read_text().splitlines():
        s = json.loads(line)
        maps = s["maps"]
        biggest = sorted(maps.items(), key=lambda kv: -kv[1][2])[:top]
        print(f"{s['t']} anon {sum(v[2] for v in maps.values()) / 1024:.0f} MB in "
              f"{len(maps)} mappings; largest: " + "; ".join(
                  f"{k} {size // 1024} MB map {anon // 1024} MB{' ' + name if name else ''}"
                  for k, (size, name, anon) in biggest))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--match", help="a pattern of the process's command line (pgrep -f)")
    ap.add_argument("--every", type=float, default=60, help="seconds between samples")
    ap.add_argument("--out", type=Path, help="the JSON lines to append to")
    ap.add_argument("--show", type=Path, help="print a file of samples")
    ap.add_argument("--top", type=int, default=4, help="largest mappings shown per sample")
    args = ap.parse_args()
    if args.show:
        show(args.show, args.top)
    elif args.match and args.out:
        watch(args.match, args.every, args.out)
    else:
        ap.error("--show FILE, or --match PATTERN --out FILE")


if __name__ == "__main__":
    main()
