"""The API holds the findings in files mapped into memory (``snapshots._Spool``), not on the
heap, and keeps no copy of them that grows with the writes judged.

* Held rows equal the table's through appends, a compaction and a read whole; their buffers
  lie in mappings of spool files (none on the heap), and no spool file is left on disk.
* Files a dead process left in the spool are removed at the next start, a live one's stay.
* Derived values of one family (a listing per pass it is as of) are kept a few at a time.
"""

import os
from datetime import UTC, datetime, timedelta

import pyarrow as pa
from deltalake import DeltaTable

from kafka_audit.auditor_api.deps import new_snapshots
from kafka_audit.auditor_api.snapshots import Snapshots, _Spool
from kafka_audit.settings import Settings
from kafka_audit.store import append_rows, compact, read_table

from .test_api_resources import finding

T = datetime(2026, 1, 1, 12, tzinfo=UTC)


def ids(t: pa.Table) -> list[str]:
    return sorted(t.column("finding_id").to_pylist())


def test_the_findings_are_held_in_the_spool_not_on_the_heap(tmp_path):
    s = Settings(home=tmp_path)
    path = s.table_path("findings")
    append_rows(path, "findings", [finding("confirmed", i * 100, 100, T) for i in range(50)])
    snaps = new_snapshots(s)
    assert ids(snaps.get("findings").data) == ids(read_table(path, "findings"))
    for n in range(1, 21):  # twenty commits of 2,000 rows (about 400 kB each on the heap)
        append_rows(path, "findings", [
            finding("confirmed", (n * 10_000 + i) * 100, 100, T + timedelta(seconds=n),
                    pass_id=n + 1) for i in range(2000)])
        if n == 10:
            compact(path)  # rewrites the files, no row changes: nothing read
    held = snaps.get("findings")
    assert held.data.num_rows == 40_050
    assert ids(held.data) == ids(read_table(path, "findings"))
    assert snaps.loads == 1 and snaps.appends >= 1
    # every buffer of the held rows lies in a mapping of a spool file (unlinked: "(deleted)"),
    # none on the heap (the Arrow pool's counter is process-wide: other tests' threads move it)
    spool = mapped_spool_files(tmp_path / "api-spool")
    assert spool and outside(held.data, spool) == []
    assert [n for n in os.listdir(tmp_path / "api-spool")] == []  # unlinked once mapped
    DeltaTable(path).delete("pass_id >= 11")  # not an append: read whole, into the spool
    held = snaps.get("findings")
    assert snaps.loads == 2 and ids(held.data) == ids(read_table(path, "findings"))
    assert held.data.num_rows == 50 + 9 * 2000


def mapped_spool_files(directory) -> list[tuple[int, int]]:
    """Address ranges of this process's mappings of files under ``directory``."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith(str(directory)):
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                out.append((lo, hi))
    return out


def outside(t: pa.Table, ranges: list[tuple[int, int]]) -> list[str]:
    """The columns of ``t`` with a buffer in none of ``ranges``."""
    bad = []
    for name in t.column_names:
        for chunk in t.column(name).chunks:
            for b in chunk.buffers():
                if b is not None and b.size and not any(
                        lo <= b.address and b.address + b.size <= hi for lo, hi in ranges):
                    bad.append(name)
    return sorted(set(bad))


def test_without_a_spool_the_rows_are_held_on_the_heap_the_same(tmp_path):
    s = Settings(home=tmp_path)
    path = s.table_path("findings")
    for n in range(3):
        append_rows(path, "findings", [finding("lost", n * 10 + i, 1, T, pass_id=n)
                                       for i in range(10)])
    heap = Snapshots(s.table_path)
    spooled = Snapshots(s.table_path, spooled={"findings"}, spool_dir=tmp_path / "spool")
    assert ids(heap.get("findings").data) == ids(spooled.get("findings").data)
    assert len(ids(heap.get("findings").data)) == 30
    spool = mapped_spool_files(tmp_path / "spool")
    assert outside(spooled.get("findings").data, spool) == []
    assert "finding_id" in outside(heap.get("findings").data, spool)  # on the heap


def test_a_dead_processs_spool_files_are_removed_at_start(tmp_path):
    d = tmp_path / "spool"
    d.mkdir()
    (d / "999999999-abc-1.arrow").write_bytes(b"left by a crash")  # no such pid
    (d / f"{os.getpid()}-abc-1.arrow").write_bytes(b"a live process's")
    (d / "notes.txt").write_text("not ours")
    _Spool(d)
    assert sorted(os.listdir(d)) == sorted([f"{os.getpid()}-abc-1.arrow", "notes.txt"])


def test_a_family_of_derived_values_is_kept_a_few_at_a_time(tmp_path):
    s = Settings(home=tmp_path)
    append_rows(s.table_path("findings"), "findings", [finding("lost", 1, 1, T)])
    snaps = Snapshots(s.table_path)
    computed = []

    def value(as_of):
        return snaps.memo(("listing", as_of), ("findings",),
                          lambda f: computed.append(as_of) or as_of, family="listing", keep=3)

    for as_of in range(6):
        assert value(as_of) == as_of
    assert value(5) == 5 and value(3) == 3 and computed == list(range(6))  # kept
    assert value(0) == 0 and computed == [*range(6), 0]  # let go: computed again
