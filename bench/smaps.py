"""Where a running process's anonymous memory is, read from outside: its mappings
(``/proc/<pid>/smaps``, the anonymous kB of each) sampled every ``--every`` seconds while
the process runs, one JSON line per sample; ``--show`` prints them back.

    .venv/bin/python bench/smaps.py --match "bin/kafka-audit run" --out var/smaps.jsonl &
    .venv/bin/python bench/smaps.py --show var/smaps.jsonl
    .venv/bin/python bench/smaps.py --growth var/smaps.jsonl --first 10 --last -1

Per sample ``--show`` gives the anonymous total and the largest mappings (start address,
size, anonymous MB, the file or ``[heap]``): a 1 GiB mapping at a low address is
mimalloc's arena, one of 64 MB aligned to it a glibc arena, ``[heap]`` glibc's main heap.
The memory line (``kafka_audit/app/memstats.py``) says how much each allocator has in use;
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


ARENA = 64 * 1024  # kB: glibc's non-main arenas are 64 MB heaps aligned to their size


def kind(start: str, size_kb: int, name: str) -> str:
    """What a mapping most likely is: glibc's main heap, one of its arenas (a mapping that
    starts on a 64 MB boundary and fits in one), a thread stack (8 MB: Python's and glibc's
    default; 2 MB: Rust's), a library's or file's private pages, or other anonymous memory
    by size (mmap'd blocks, other allocators' regions)."""
    if name == "[heap]":
        return "glibc main heap"
    if name.startswith("[stack"):
        return "main stack"
    if name:
        return "file-backed (private pages)"
    if int(start, 16) % (ARENA * 1024) == 0 and size_kb <= ARENA:
        return "glibc arena (64 MB aligned)"
    if size_kb in (8192, 8188, 2048, 2044):
        return f"{size_kb // 1024} MB (thread stacks?)"
    for limit in (1024, 8 * 1024, 64 * 1024):
        if size_kb <= limit:
            return f"other anonymous <= {limit // 1024} MB"
    return "other anonymous > 64 MB"


def growth(path: Path, first: int, last: int, top: int) -> None:
    """The anonymous MB of each kind of mapping (:func:`kind`) in sample ``first`` and sample
    ``last`` (indices, negative from the end), and the mappings that grew the most."""
    samples = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    a, b = samples[first], samples[last]

    def by_kind(s: dict) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for start, (size, name, anon) in s["maps"].items():
            k = out.setdefault(kind(start, size, name), [0.0, 0])
            k[0] += anon / 1024
            k[1] += 1
        return out

    ka, kb = by_kind(a), by_kind(b)
    print(f"{a['t']} -> {b['t']}: anonymous MB (mappings) per kind")
    for k in sorted(set(ka) | set(kb), key=lambda k: -(kb.get(k, [0])[0] - ka.get(k, [0])[0])):
        (ma, na), (mb, nb) = ka.get(k, [0.0, 0]), kb.get(k, [0.0, 0])
        print(f"  {k:32s} {ma:8.1f} ({na:4d}) -> {mb:8.1f} ({nb:4d})  {mb - ma:+8.1f}")
    total_a = sum(v[0] for v in ka.values())
    total_b = sum(v[0] for v in kb.values())
    print(f"  {'total':32s} {total_a:8.1f}        -> {total_b:8.1f}        "
          f"{total_b - total_a:+9.1f}")
    grew = sorted(((b["maps"][s][2] - a["maps"].get(s, [0, "", 0])[2]) / 1024, s)
                  for s in b["maps"])[::-1][:top]
    print("  grew most: " + "; ".join(
        f"{s} {b['maps'][s][0] // 1024} MB {kind(s, b['maps'][s][0], b['maps'][s][1])} "
        f"{d:+.1f}" for d, s in grew))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--match", help="a pattern of the process's command line (pgrep -f)")
    ap.add_argument("--every", type=float, default=60, help="seconds between samples")
    ap.add_argument("--out", type=Path, help="the JSON lines to append to")
    ap.add_argument("--show", type=Path, help="print a file of samples")
    ap.add_argument("--top", type=int, default=4, help="largest mappings shown per sample")
    ap.add_argument("--growth", type=Path, help="per kind of mapping, a file's growth between "
                                                "two samples (--first, --last)")
    ap.add_argument("--first", type=int, default=10, help="--growth's first sample (index)")
    ap.add_argument("--last", type=int, default=-1, help="--growth's last sample (index)")
    args = ap.parse_args()
    if args.growth:
        growth(args.growth, args.first, args.last, args.top)
    elif args.show:
        show(args.show, args.top)
    elif args.match and args.out:
        watch(args.match, args.every, args.out)
    else:
        ap.error("--show FILE, or --match PATTERN --out FILE")


if __name__ == "__main__":
    main()
