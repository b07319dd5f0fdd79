"""The API holds the findings in files mapped into memory (``snapshots._Spool``), not on the
heap, and keeps no copy of them that grows with the writes judged.

* Held rows equal the table's through appends, a compaction and a read whole; the Arrow
  pool does not grow with them, and no spool file is left on disk.
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
    before = pa.total_allocated_bytes()
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
    grown = pa.total_allocated_bytes() - before
    assert grown < 1_000_000, f"{grown} bytes of the Arrow pool held"  # the rows: ~8 MB
    assert [n for n in os.listdir(tmp_path / "api-spool")] == []  # unlinked once mapped
    DeltaTable(path).delete("pass_id >= 11")  # not an append: read whole, into the spool
    held = snaps.get("findings")
    assert snaps.loads == 2 and ids(held.data) == ids(read_table(path, "findings"))
    assert held.data.num_rows == 50 + 9 * 2000


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
