"""The memory line and the C heap's trim (real glibc, this process)."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import threading

from kafka_audit.app.memstats import (
    ARROW_POOL,
    configure_arrow_pool,
    configure_deltalake_malloc,
    configure_python_allocator,
    memory_line,
    release_free_memory,
    watch_memory,
)


def test_the_trim_gives_freed_memory_back():
    blocks = [bytearray(64 * 1024) for _ in range(4000)]  # 250 MB of malloc'd blocks ...
    del blocks[::2]  # ... half freed, in holes no arena top can shrink past
    released = release_free_memory()
    assert released is not None and released > 50, released
    del blocks


def test_the_memory_line_names_each_part():
    line = memory_line()
    for part in ("rss ", "malloc in use ", "free held ", "arrow pool ", "threads ", "(all ",
                 "python allocator pymalloc", "pymalloc blocks ", "objects "):
        assert part in line, line
    # the kernel's split of RSS adds up to it (each part rounded to a MB)
    m = re.match(r"rss (\d+) MB \(anon (\d+), file (\d+), shmem (\d+)\)", line)
    assert m, line
    rss, *split = map(int, m.groups())
    assert abs(rss - sum(split)) <= 3, line
    # the kernel's threads include every Python one; pymalloc holds some blocks
    py, native = map(int, re.search(r"threads (\d+) \(all (\d+)\)", line).groups())
    assert native >= py >= 1, line
    assert int(re.search(r"pymalloc blocks (\d+)", line).group(1)) > 0, line


def test_the_watcher_logs_and_stops(caplog):
    stop = threading.Event()
    with caplog.at_level(logging.INFO, logger="kafka_audit.memory"):
        t = watch_memory(1, 1, stop, "test")
        assert t is not None
        t.join(3.5)
        stop.set()
        t.join(3)
    assert not t.is_alive()
    lines = [r.getMessage() for r in caplog.records if r.name == "kafka_audit.memory"]
    assert lines and lines[0].startswith("memory (test): rss ") and "last trim gave back" in \
        lines[0]
    assert watch_memory(0, 0, stop) is None


#: a process whose threads each allocate while all are alive; it prints how many malloc
#: heaps (arenas) glibc made. argv[1]: the cap (0: none)
_ARENAS = r"""
import ctypes, re, sys, tempfile, threading
from kafka_audit.app.memstats import cap_malloc_arenas
print(cap_malloc_arenas(int(sys.argv[1])))
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
alive = threading.Barrier(8)
def work():
    p = libc.malloc(1000)
    alive.wait(10)  # every thread holds its block (and its arena) at once
    libc.free(p)
ts = [threading.Thread(target=work) for _ in range(8)]
for t in ts: t.start()
for t in ts: t.join()
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
with tempfile.TemporaryDirectory() as d:
    path = d + "/malloc_info.xml"
    fp = libc.fopen(path.encode(), b"w"); libc.malloc_info(0, fp); libc.fclose(fp)
    print(len(re.findall(r'<heap nr="\d+">', open(path).read())))
"""


def _child(script: str, *args, variable: str | None = None, value: str | None = None
           ) -> subprocess.CompletedProcess:
    """``script`` run by a Python process of its own with ``args``; the environment this
    one's without ``variable``, or with it set to ``value``."""
    env = {k: v for k, v in os.environ.items() if k != variable}
    if variable is not None and value is not None:
        env[variable] = value
    return subprocess.run([sys.executable, "-c", script, *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=120, check=True)


def _heaps(cap: int) -> tuple[str, int]:
    out = _child(_ARENAS, cap).stdout.split()
    return out[0], int(out[1])


def test_capped_arenas_hold_every_thread_s_allocations_in_that_many_heaps():
    assert _heaps(2) == ("True", 2)
    was_set, heaps = _heaps(0)  # glibc's default: a heap per thread, up to 8 per core
    assert was_set == "False" and heaps > 2, heaps


#: a process that writes a Delta table after configure_deltalake_malloc(argv[2]) (empty: not
#: called; argv[3]: the options already in its environment); jemalloc's stats_print option
#: prints its statistics at exit
_DELTA = """
import sys
import pyarrow as pa
from kafka_audit.app.memstats import configure_deltalake_malloc
if sys.argv[2]:
    assert configure_deltalake_malloc(sys.argv[2]) == (sys.argv[3] == "")
from deltalake import write_deltalake
assert not configure_deltalake_malloc("narenas:1")  # too late: deltalake is loaded
write_deltalake(sys.argv[1], pa.table({"i": [1, 2]}), mode="append")
"""


def _delta_process(tmp_path, conf: str, env_conf: str | None = None) -> str:
    out = _child(_DELTA, tmp_path / "t", conf, env_conf or "", variable="_RJEM_MALLOC_CONF",
                 value=env_conf)
    return out.stdout + out.stderr


def test_deltalake_s_jemalloc_takes_the_options_given_before_the_first_table(tmp_path):
    stats = "Begin jemalloc statistics"
    assert stats in _delta_process(tmp_path, "stats_print:true")
    assert stats not in _delta_process(tmp_path, "")
    # options already in the environment win over the setting
    assert stats not in _delta_process(tmp_path, "stats_print:true", env_conf="narenas:2")
    env = {"_RJEM_MALLOC_CONF": "narenas:1"}
    assert not configure_deltalake_malloc("narenas:2", env) and env["_RJEM_MALLOC_CONF"] == \
        "narenas:1"
    assert configure_deltalake_malloc("narenas:2", {}) and not configure_deltalake_malloc("", {})


#: a child that configures pyarrow's pool (argv[1]) before or after importing pyarrow
#: (argv[2]) and prints the backend its default pool then has
_ARROW = """
import sys
from kafka_audit.app.memstats import configure_arrow_pool
if sys.argv[2] == "after":
    import pyarrow
print(configure_arrow_pool(sys.argv[1]))
import pyarrow as pa
pa.array(range(1000))  # an allocation from the pool
print(pa.default_memory_pool().backend_name)
"""


def _arrow_process(name: str, when: str, env_pool: str | None = None) -> list[str]:
    return _child(_ARROW, name, when, variable=ARROW_POOL, value=env_pool).stdout.split()


def test_pyarrow_allocates_from_the_pool_given_before_or_after_its_import():
    assert _arrow_process("system", "before") == ["True", "system"]
    assert _arrow_process("system", "after") == ["True", "system"]
    assert _arrow_process("jemalloc", "before") == ["True", "jemalloc"]
    # a pool the environment names wins, and an empty setting leaves pyarrow's default
    assert _arrow_process("system", "before", env_pool="mimalloc") == ["False", "mimalloc"]
    assert _arrow_process("", "before") == ["False", "mimalloc"]
    env = {ARROW_POOL: "jemalloc"}
    assert not configure_arrow_pool("system", env) and env[ARROW_POOL] == "jemalloc"
    assert configure_arrow_pool("system", {}) and not configure_arrow_pool("", {})


#: a program that starts itself again with Python's allocator argv[1] (empty: none asked);
#: it prints its pid at each start, then the allocator in its environment and the blocks
#: pymalloc holds (none when Python's objects live in glibc's heap)
_RESTART = """
import os, sys
print("start", os.getpid(), flush=True)
from kafka_audit.app.memstats import restart_with_python_allocator
restart_with_python_allocator(sys.argv[1])
print(os.environ.get("PYTHONMALLOC"), sys.getallocatedblocks(), sys.argv[2])
"""


def _restart_process(name: str, env_malloc: str | None = None) -> list[str]:
    return _child(_RESTART, name, "kept", variable="PYTHONMALLOC",
                  value=env_malloc).stdout.splitlines()


def test_the_service_starts_itself_again_with_python_s_allocator_in_the_same_process():
    first, again, last = _restart_process("malloc")
    assert first == again and first.startswith("start "), (first, again)  # one pid, twice
    allocator, blocks, arg = last.split()
    assert (allocator, int(blocks), arg) == ("malloc", 0, "kept")
    # an allocator the environment names wins, and an empty setting changes nothing: no
    # second start, Python's own allocator holding the objects
    for name, env_malloc, want in (("malloc", "pymalloc", "pymalloc"), ("", None, "None")):
        _start, last = _restart_process(name, env_malloc)
        allocator, blocks, _ = last.split()
        assert allocator == want and int(blocks) > 0, (name, env_malloc, last)
    env = {"PYTHONMALLOC": "pymalloc"}
    assert not configure_python_allocator("malloc", env) and env["PYTHONMALLOC"] == "pymalloc"
    assert configure_python_allocator("malloc", {}) and not configure_python_allocator("", {})


#: a process that frees a mapped 4 MB block, then allocates 512 KB, after
#: fix_mmap_threshold(argv[1]) (0: glibc's default); it prints the bytes malloc mapped for it
_MMAP = r"""
import ctypes, sys
from kafka_audit.app.memstats import fix_mmap_threshold, glibc_heap
print(fix_mmap_threshold(int(sys.argv[1])))
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.free(libc.malloc(4 << 20))  # mapped (over 128 KB), and freed: glibc raises its threshold
before = glibc_heap()[2]
p = libc.malloc(512 << 10)
print(glibc_heap()[2] - before)
"""


def test_a_fixed_mmap_threshold_keeps_large_blocks_out_of_the_heap():
    def run(kb: int) -> tuple[str, int]:
        out = _child(_MMAP, kb).stdout.split()
        return out[0], int(out[1])

    was_set, mapped = run(256)
    assert was_set == "True" and mapped >= 512 << 10, mapped  # its own mapping
    was_set, mapped = run(0)  # glibc's default: the threshold climbed to 4 MB
    assert was_set == "False" and mapped == 0, mapped
