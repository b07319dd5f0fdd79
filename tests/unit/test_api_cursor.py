"""Cursor pagination while audit passes commit between pages: no row skipped or repeated.

Real Delta tables (delta-rs): between two page requests, findings of a new pass are
appended and its progress row committed, with sort keys that fall before, inside and
after the page already served. A traversal serves the findings committed at its first
page; ``after_pass`` then fetches exactly what came since.
"""

import random
from datetime import UTC, datetime

from fastapi.testclient import TestClient

from kafka_audit.auditor_api.main import create_app
from kafka_audit.settings import Settings
from kafka_audit.store import append_rows

T = datetime(2026, 1, 1, 12, tzinfo=UTC)


def finding(topic, partition, offset, pass_id, kind="lost"):
    return {"finding_id": f"{kind}:{topic}:{partition}:p:r:{offset}", "kind": kind,
            "subkind": None, "topic": topic, "partition": partition, "offset": offset,
            "producer_id": "p", "run_id": "r", "seq": offset, "count": 1, "ack_time": T,
            "evidence": "{}", "cause": None, "detected_at": T, "pass_id": pass_id}


def commit(s, pass_id, rows):
    append_rows(s.table_path("findings"), "findings", rows)
    append_rows(s.table_path("audit_hot"), "audit_hot", [
        {"kind": "progress", "topic": "", "partition": -1, "pass_id": pass_id,
         "progress": f'{{"pass_id": {pass_id}, "acks_version": -1, "consumed_version": -1}}'}])


def test_no_row_skipped_or_repeated_while_passes_commit(tmp_path):
    s = Settings(home=tmp_path)
    rng = random.Random(7)
    topics = ["a", "m", "z"]
    commit(s, 1, [finding(rng.choice(topics), rng.randrange(3), o, 1) for o in range(0, 300, 3)])
    committed = {1: 100}
    c = TestClient(create_app(s), base_url="http://localhost")
    seen, pages, cursor, pass_id = [], 0, None, 1
    while True:
        params = {"page_size": 7, **({"cursor": cursor} if cursor else {})}
        body = c.get("/v1/findings", params=params).json()
        assert body["as_of_pass"] == 1 and body["total"] == 100
        seen += [(i["finding_id"], i["pass_id"]) for i in body["items"]]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break
        # a pass commits between pages: rows sorting before, among and after those served
        pass_id += 1
        rows = [finding(rng.choice(topics), rng.randrange(3), rng.randrange(400) * 3 + 1,
                        pass_id) for _ in range(5)]
        commit(s, pass_id, rows)
        committed[pass_id] = len(rows)
        # and a pass that dies before its commit point: its rows are never served
        append_rows(s.table_path("findings"), "findings",
                    [finding("a", 0, 100_000 + pass_id, 10_000)])
    assert pages == 15
    assert len(seen) == len(set(seen)) == 100  # none repeated, none skipped
    assert {p for _, p in seen} == {1}
    # what committed since the traversal began: exactly the new passes' rows
    later, cursor = [], None
    while True:
        body = c.get("/v1/findings", params={"after_pass": 1, "page_size": 50,
                                             **({"cursor": cursor} if cursor else {})}).json()
        later += [(i["finding_id"], i["pass_id"]) for i in body["items"]]
        if (cursor := body["next_cursor"]) is None:
            break
    assert len(later) == len(set(later)) == sum(n for p, n in committed.items() if p > 1)
    assert body["as_of_pass"] == pass_id
    every = c.get("/v1/findings/counts").json()
    assert every["as_of_pass"] == pass_id
    assert {k["kind"]: k["writes"] for k in every["kinds"]}["lost"] == sum(committed.values())


def test_pages_keep_the_order_topic_partition_kind_offset(tmp_path):
    s = Settings(home=tmp_path)
    rows = [finding(t, p, o, 1, k) for t in ("b", "a") for p in (1, 0)
            for k in ("lost", "duplicate") for o in (20, 3, None)]
    commit(s, 1, rows)
    c = TestClient(create_app(s), base_url="http://localhost")
    items, cursor = [], None
    while True:
        body = c.get("/v1/findings", params={"page_size": 5,
                                             **({"cursor": cursor} if cursor else {})}).json()
        items += body["items"]
        if (cursor := body["next_cursor"]) is None:
            break
    keys = [(i["topic"], i["partition"], i["kind"],
             i["offset"] if i["offset"] is not None else 2**63) for i in items]
    assert keys == sorted(keys) and len(keys) == len(rows)
    one = c.get(f"/v1/findings/{items[0]['finding_id']}").json()
    assert one["finding_id"] == items[0]["finding_id"]
    missing = c.get("/v1/findings/nope")
    assert missing.status_code == 404 and missing.headers["content-type"] == \
        "application/problem+json"


def test_a_request_never_waits_on_another_reading_a_new_version(tmp_path):
    """While one request reads a table's new version (its lock held here, as a slow read
    holds it), another is answered at once from the version held, never older than one
    already served, and that answer is not kept by the response cache: once the read is
    done, the same request gets the new version."""
    import threading

    from kafka_audit.auditor_api.deps import snapshots_for

    s = Settings(home=tmp_path)
    commit(s, 1, [finding("a", 0, o, 1) for o in range(10)])
    app = create_app(s)
    c = TestClient(app, base_url="http://localhost")
    assert c.get("/v1/findings").json()["as_of_pass"] == 1
    commit(s, 2, [finding("a", 0, o, 2) for o in range(10, 15)])
    held = snapshots_for(app, s)._entry("audit_hot")
    held.lock.acquire()  # a request reading pass 2's progress, slowly
    try:
        answers: list = []
        t = threading.Thread(target=lambda: answers.append(c.get("/v1/findings").json()))
        t.start()
        t.join(30)
        assert not t.is_alive(), "a request waited on another's read"
        assert answers[0]["as_of_pass"] == 1 and answers[0]["total"] == 10
    finally:
        held.lock.release()
    body = c.get("/v1/findings").json()  # not the stale answer from the cache
    assert body["as_of_pass"] == 2 and body["total"] == 15
