"""The ledger's notes of delivery reports it could record nowhere, as ``unrecorded``
findings (``jobs/core/unrecorded.py``): each span one finding, every report counted once;
a note of any other shape skipped and named, never a crash."""

import json
from datetime import UTC, datetime, timedelta

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from kafka_audit.jobs.core.unrecorded import unrecorded_findings
from kafka_audit.producers.ledger import unrecorded_spans
from kafka_audit.schemas.tables import arrow_schema

T0 = datetime(2026, 11, 28, 9, 0, tzinfo=UTC)


def ledger_rows(seqs_by_partition: dict[int, list[int]]) -> pa.Table:
    """Ledger rows (one run of one report each) as a dropped batch holds them."""
    rows = [{"run_id": "r", "producer_id": "p", "seq": seq, "count": 1, "topic": "t",
             "partition": p, "offset": 1000 + seq, "send_time": T0,
             "ack_time": T0 + timedelta(milliseconds=seq),
             "last_ack_time": T0 + timedelta(milliseconds=seq), "error_code": None,
             "error_name": None, "acks": "all", "idempotence": False, "retries": 2,
             "max_in_flight": 5, "leader_epoch": None}
            for p, seqs in seqs_by_partition.items() for seq in seqs]
    return pa.Table.from_pylist(rows, schema=arrow_schema("acks"))


def note_of(table: pa.Table) -> dict:
    """The note as the ledger writes it into a commit (``AckLedger._bound_held``)."""
    spans = unrecorded_spans(table, "p", "r")
    return {"app_id": "p/r", "dropped_reports": table.num_rows, "unrecorded": [
        {**u, "first_ack": u["first_ack"].isoformat(), "last_ack": u["last_ack"].isoformat()}
        for u in spans]}


def test_each_span_of_a_ledger_note_is_one_finding_counting_its_reports():
    batch = ledger_rows({0: list(range(0, 100, 2)), 1: list(range(1, 100, 2))})
    note = json.loads(json.dumps(note_of(batch)))  # as the commit's JSON holds it
    found, problems = unrecorded_findings([(7, note)])
    assert problems == []
    assert [(f.kind, f.topic, f.partition, f.producer_id, f.run_id, f.seq, f.count, f.offset)
            for f in found] == [("unrecorded", "t", 0, "p", "r", 0, 50, None),
                                ("unrecorded", "t", 1, "p", "r", 1, 50, None)]
    assert sum(f.count for f in found) == batch.num_rows
    assert found[0].ack_time == T0 and found[0].evidence["last_seq"] == 98
    assert found[1].evidence["last_ack"] == (T0 + timedelta(milliseconds=99)).isoformat()
    assert found[0].evidence["ledger"] == "p/r"
    assert len({f.finding_id for f in found}) == 2


def test_a_malformed_span_is_skipped_and_named_the_others_kept():
    good = note_of(ledger_rows({0: [0, 1, 2]}))["unrecorded"][0]
    spans = [good, {**good, "reports": -1}, {**good, "topic": ""}, "a string",
             {**good, "first_ack": "yesterday"}, {**good, "partition": True},
             {**good, "last_seq": -5}, {k: v for k, v in good.items() if k != "run_id"}]
    found, problems = unrecorded_findings([(3, {"unrecorded": spans}), (4, "not a note"),
                                           (5, {"unrecorded": "none"}),
                                           (6, [{"unrecorded": [good]}, 7])])  # a staged one
    assert [f.count for f in found] == [3, 3]
    assert len(problems) == len(spans) - 1 + 3
    assert all(p.startswith("commit ") and p.endswith("skipped") for p in problems)


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5)
                     | st.floats(allow_nan=False), lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


@given(st.lists(_JSON, max_size=4))
def test_any_json_in_a_note_never_raises_and_every_finding_counts_a_report(notes):
    found, problems = unrecorded_findings(enumerate(notes))
    assert all(f.kind == "unrecorded" and f.count >= 1 for f in found)
    assert all(isinstance(p, str) for p in problems)
