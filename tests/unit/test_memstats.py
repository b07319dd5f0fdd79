"""The memory line and the C heap's trim (real glibc, this process)."""

from __future__ import annotations

import logging
import threading

from kafka_audit.memstats import memory_line, release_free_memory, watch_memory


def test_the_trim_gives_freed_memory_back():
    blocks = [bytearray(64 * 1024) for _ in range(4000)]  # 250 MB of malloc'd blocks ...
    del blocks[::2]  # ... half freed, in holes no arena top can shrink past
    released = release_free_memory()
    assert released is not None and released > 50, released
    del blocks


def test_the_memory_line_names_each_part():
    line = memory_line()
    for part in ("rss ", "malloc in use ", "free held ", "arrow pool ", "threads ", "objects "):
        assert part in line, line


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
