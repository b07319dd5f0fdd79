"""Where a long-running process's memory is: a log line now and then
(``service.memory_log_seconds``).

RSS alone cannot tell a leak of Python objects from native buffers or from a fragmented C heap,
and each wants a different fix. The line gives: RSS; glibc's heap (``mallinfo2``: bytes in use
and bytes free but held, the fragmentation); Arrow's memory pool; the number of Python objects
the collector tracks, and, when ``tracemalloc`` runs (``PYTHONTRACEMALLOC=1``), the bytes
Python allocated and the source lines whose allocations grew most since the first line.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import logging
import os
import sys
import threading
import time
import tracemalloc
from collections import Counter

__all__ = ["cap_malloc_arenas", "configure_allocators", "configure_arrow_pool",
           "configure_deltalake_malloc", "configure_python_allocator", "fix_mmap_threshold",
           "glibc_heap", "memory_line", "release_free_memory", "restart_with_python_allocator",
           "rss_parts", "watch_memory"]

log = logging.getLogger("kafka_audit.memory")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


@functools.cache
def _glibc(name: str):
    """glibc's function ``name`` (loaded once), or None off glibc or where it lacks it."""
    try:
        return getattr(ctypes.CDLL("libc.so.6"), name)
    except (OSError, AttributeError):
        return None


def glibc_heap() -> tuple[int, int, int] | None:
    """(in use, free but held, mmapped) bytes of glibc's malloc, or None off glibc."""
    fn = _glibc("mallinfo2")
    if fn is None:
        return None
    fn.restype = _MallInfo2
    m = fn()
    return m.uordblks, m.fordblks, m.hblkhd


#: glibc's mallopt parameter for the most arenas malloc creates (malloc.h)
M_ARENA_MAX = -8


def cap_malloc_arenas(n: int) -> bool:
    """At most ``n`` glibc malloc arenas in this process (``mallopt(M_ARENA_MAX, n)``);
    call it before any thread starts (a thread that already has its arena keeps it).
    True if set; False for ``n`` 0 (glibc's default: 8 per core) or off glibc.

    Uncapped, glibc gives a thread an arena of its own when it first allocates, up to 8
    per core, and a long run's free memory sits in a dozen heaps: in the hour soak of
    2026-11-25 the service's free-but-held heap grew 89 -> 256 MB, with a ``malloc_trim``
    every minute, while its bytes in use did not grow (``bench/soak.py``'s memory lines)."""
    mallopt = _glibc("mallopt")
    return n > 0 and mallopt is not None and bool(mallopt(M_ARENA_MAX, n))


#: glibc's mallopt parameter for the size from which malloc maps a block of its own (malloc.h)
M_MMAP_THRESHOLD = -3


def fix_mmap_threshold(kb: int) -> bool:
    """Blocks of ``kb`` KB or more get a mapping of their own, given back to the system
    when freed (``mallopt(M_MMAP_THRESHOLD)``); True if set, False for ``kb`` 0 (glibc's
    default) or off glibc.

    glibc starts at 128 KB but raises the threshold, up to 32 MB, each time a mapped block
    is freed, so after the first pass the Arrow buffers and pandas columns of every pass
    come from the heap, and their freed pages stay resident until the next trim: in the
    hour soak of 2026-11-27 06:08 (bench/HISTORY.md) the service's anonymous memory right after each
    minute's trim grew +50 MB/h while its RSS sampled at any moment grew +140 MB/h, and
    what each trim gave back grew +97 MB/h (``bench/soak_log.py``). A fixed threshold also
    turns the raising off."""
    mallopt = _glibc("mallopt")
    return kb > 0 and mallopt is not None and bool(mallopt(M_MMAP_THRESHOLD, kb * 1024))


#: the environment variable the jemalloc inside deltalake's extension reads its options from
#: (a prefixed build: plain MALLOC_CONF is not read)
DELTALAKE_MALLOC_CONF = "_RJEM_MALLOC_CONF"


def configure_deltalake_malloc(conf: str, env=None) -> bool:
    """Give ``conf`` to the jemalloc that ``deltalake``'s Rust extension carries, unless
    ``env`` (default: this process's environment) names options already; True if set.

    That allocator is neither glibc's (``mallinfo``) nor Arrow's pool: what delta-rs frees
    stays in its arenas until jemalloc decays it, which with default options happens only
    when the same arena allocates again. jemalloc reads the options when it first
    allocates, which importing ``deltalake`` does: call this before that import (or pass a
    child's ``env``); called after it, it logs a warning and sets nothing.
    ``bench/delta_memory.py``: a loop of the service's delta-rs reads and appends grew by
    33 and 35 MB with the defaults, by 20 and 17 with this module's options."""
    if env is None:
        if conf and "deltalake" in sys.modules:
            log.warning("deltalake is loaded already: its allocator keeps its own options "
                        "(%s not set)", DELTALAKE_MALLOC_CONF)
            return False
        env = os.environ
    if not conf or env.get(DELTALAKE_MALLOC_CONF):
        return False
    env[DELTALAKE_MALLOC_CONF] = conf
    return True


#: the environment variable pyarrow reads its default memory pool's backend from
ARROW_POOL = "ARROW_DEFAULT_MEMORY_POOL"


def configure_arrow_pool(name: str, env=None) -> bool:
    """Make ``name`` (``system``, ``jemalloc`` or ``mimalloc``) the pool pyarrow allocates
    from by default, in this process or, given ``env``, in a child started with it, unless
    the environment names one already; True if set.

    pyarrow's own default, mimalloc, keeps the pages a thread freed until that thread
    allocates again, and ``release_unused`` collects only the calling thread's heap, not
    those of Arrow's reader threads: in the hour soak of 2026-11-26 16:17 its arena held
    96-158 MB resident while the pool had 2-52 MB allocated. ``system`` is glibc's malloc,
    whose arenas :func:`cap_malloc_arenas` caps and whose free memory
    :func:`release_free_memory` gives back. In this process the pool is switched at once
    when pyarrow is loaded already (buffers allocated before stay where they are)."""
    if not name:
        return False
    target = os.environ if env is None else env
    if target.get(ARROW_POOL):
        return False
    target[ARROW_POOL] = name
    if env is None and "pyarrow" in sys.modules:
        import pyarrow as pa

        pa.set_memory_pool(getattr(pa, f"{name}_memory_pool")())
    return True


#: the environment variable CPython reads its object allocator from when it starts
PYTHON_MALLOC = "PYTHONMALLOC"


def configure_python_allocator(name: str, env) -> bool:
    """Make ``name`` (``malloc``, ``pymalloc``, ...) the allocator of Python's objects in a
    process started with ``env``, unless ``env`` names one already; True if set.

    CPython reads it only when it starts: for this process see
    :func:`restart_with_python_allocator`. Python's own allocator (pymalloc) takes memory
    from the system in arenas of 1 MB and gives an arena back only when every object in it
    is gone: a service that makes and drops millions of small objects an hour keeps arenas
    pinned by a few long-lived ones, and its RSS creeps up while its objects do not.
    ``malloc`` puts Python's objects in glibc's heap, whose free pages
    :func:`release_free_memory` hands back each minute whatever still lives beside them."""
    if not name or env.get(PYTHON_MALLOC):
        return False
    env[PYTHON_MALLOC] = name
    return True


def restart_with_python_allocator(name: str) -> None:
    """Start this program again in this process (``exec``: the pid, the arguments and the
    rest of the environment kept) with Python's allocator ``name`` when the environment
    names none; return if it names one (an operator's ``PYTHONMALLOC`` wins) or ``name`` is
    empty. Call it first thing, before any thread starts."""
    env = dict(os.environ)
    if configure_python_allocator(name, env):
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, sys.orig_argv, env)


def configure_allocators(steady, env=None) -> None:
    """The allocator settings of ``steady`` (:class:`~kafka_audit.settings.SteadySettings`:
    ``malloc_arenas``, ``malloc_mmap_threshold_kb``, ``deltalake_malloc_conf``,
    ``arrow_memory_pool``, ``python_allocator``) for this process, called before any
    thread starts and before deltalake or pyarrow is imported, or, given ``env``, for a
    child process started with it (glibc then reads ``MALLOC_ARENA_MAX`` and
    ``MALLOC_MMAP_THRESHOLD_``, Python ``PYTHONMALLOC``); this process's own Python
    allocator is :func:`restart_with_python_allocator`'s."""
    if env is None:
        cap_malloc_arenas(steady.malloc_arenas)
        fix_mmap_threshold(steady.malloc_mmap_threshold_kb)
    else:
        if steady.malloc_arenas > 0:
            env["MALLOC_ARENA_MAX"] = str(steady.malloc_arenas)
        if steady.malloc_mmap_threshold_kb > 0:
            env["MALLOC_MMAP_THRESHOLD_"] = str(steady.malloc_mmap_threshold_kb * 1024)
        configure_python_allocator(steady.python_allocator, env)
    configure_deltalake_malloc(steady.deltalake_malloc_conf, env)
    configure_arrow_pool(steady.arrow_memory_pool, env)


def release_free_memory() -> float | None:
    """Give the C heap's free memory back to the system (glibc's ``malloc_trim(0)``, every
    arena); the MB of RSS that released, or None off glibc.

    glibc keeps memory freed in its arenas for reuse, and with a dozen threads allocating
    (py4j, librdkafka, pandas) the free part only grows: in a long run it was most of the
    service's RSS growth (``bench/soak.py``'s memory lines). Arrow's own pool (mimalloc in
    pyarrow's wheels) keeps freed pages for reuse too: it is asked to let them go first."""
    trim = _glibc("malloc_trim")
    if trim is None:
        return None
    before = _rss_mb()
    try:
        import pyarrow as pa

        pa.default_memory_pool().release_unused()
    except (ImportError, AttributeError):  # no pyarrow, or one older than release_unused
        pass
    trim(0)
    return before - _rss_mb()


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except OSError:
        return float("nan")
    import resource

    return pages * resource.getpagesize() / 2**20


def rss_parts() -> dict[str, float]:
    """MB of this process's RSS as the kernel counts it: ``anon`` (heaps, pools, stacks),
    ``file`` (pages of mapped files: libraries, memory-mapped files; the kernel may drop
    them) and ``shmem``; empty where ``/proc/self/status`` lacks the fields."""
    want = {"RssAnon:": "anon", "RssFile:": "file", "RssShmem:": "shmem"}
    got: dict[str, float] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                fields = line.split()
                if fields and fields[0] in want:
                    got[want[fields[0]]] = int(fields[1]) / 1024
    except (OSError, ValueError, IndexError):
        return {}
    return got


def _os_threads() -> int | str:
    """This process's threads as the kernel counts them (native ones too: the tokio
    workers deltalake starts, librdkafka's); ``?`` where ``/proc`` lacks them."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return "?"


def _top_types(n: int = 6) -> list[tuple[str, int]]:
    return Counter(type(o).__name__ for o in gc.get_objects()).most_common(n)


def memory_line(first: tracemalloc.Snapshot | None = None) -> str:
    """One line: RSS (anonymous, file, shared), the C heap, Arrow's pool, Python objects
    (and tracemalloc's growth)."""
    split = ", ".join(f"{k} {mb:.0f}" for k, mb in rss_parts().items())
    parts = [f"rss {_rss_mb():.0f} MB" + (f" ({split})" if split else "")]
    heap = glibc_heap()
    if heap is not None:
        used, free, mapped = heap
        parts.append(f"malloc in use {used / 2**20:.0f} MB, free held {free / 2**20:.0f} MB, "
                     f"mmapped {mapped / 2**20:.0f} MB")
    try:
        import pyarrow as pa

        parts.append(f"arrow pool {pa.total_allocated_bytes() / 2**20:.0f} MB "
                     f"({pa.default_memory_pool().backend_name})")
    except ImportError:
        pass
    parts.append(f"threads {threading.active_count()} (all {_os_threads()})")
    # blocks Python's small-object allocator holds now: flat while its arenas (anonymous
    # mappings of 1 MB, merged by the kernel) grow means fragmentation, not more objects;
    # under PYTHONMALLOC=malloc the objects are in glibc's heap ("malloc in use")
    allocator = os.environ.get(PYTHON_MALLOC) or "pymalloc"  # empty: Python's default
    parts.append(f"python allocator {allocator}")
    if allocator.startswith("pymalloc"):  # pymalloc_debug too
        parts.append(f"pymalloc blocks {sys.getallocatedblocks()}")
    parts.append("objects " + ", ".join(f"{k} {v}" for k, v in _top_types()))
    if tracemalloc.is_tracing():
        current, _peak = tracemalloc.get_traced_memory()
        parts.append(f"python allocated {current / 2**20:.0f} MB")
        if first is not None:
            grown = tracemalloc.take_snapshot().compare_to(first, "lineno")[:5]
            parts.append("grown " + "; ".join(
                f"{s.traceback[0].filename.rsplit('/', 2)[-1]}:{s.traceback[0].lineno} "
                f"{s.size_diff / 2**20:+.1f} MB" for s in grown))
    return "; ".join(parts)


def watch_memory(trim_every: float, log_every: float, stop: threading.Event,
                 who: str = "service") -> threading.Thread | None:
    """A daemon thread that calls :func:`release_free_memory` every ``trim_every`` seconds and
    logs :func:`memory_line` every ``log_every`` (0: never), until ``stop``."""
    if not trim_every and not log_every:
        return None

    def body() -> None:
        first = tracemalloc.take_snapshot() if tracemalloc.is_tracing() else None
        now = time.monotonic()
        due_trim, due_log = now + trim_every, now + log_every
        released: float | None = None
        while not stop.wait(1.0):
            now = time.monotonic()
            try:
                if trim_every and now >= due_trim:
                    due_trim = now + trim_every
                    released = release_free_memory()
                if log_every and now >= due_log:
                    due_log = now + log_every
                    trimmed = "" if released is None else f"; the last trim gave back " \
                        f"{released:.0f} MB"
                    log.info("memory (%s): %s%s", who, memory_line(first), trimmed)
            except Exception as exc:  # noqa: BLE001 - a diagnostic must never stop the process
                log.warning("memory upkeep failed: %s", exc)

    t = threading.Thread(target=body, name=f"kafka-audit-memory-{who}", daemon=True)
    t.start()
    return t
