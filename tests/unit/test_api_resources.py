"""Topics, producers and a partition's timeline over real Delta tables (delta-rs), the
table snapshots kept between requests, and the dashboard's assets served by the app."""

from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient

from kafka_audit.auditor_api.main import create_app
from kafka_audit.settings import Settings
from kafka_audit.store import append_rows

T = datetime(2026, 1, 1, 12, tzinfo=UTC)


def ack(seq, count, at, acks="1", producer="p", partition=0, latency_ms=2):
    return {"run_id": "r", "producer_id": producer, "seq": seq, "count": count,
            "topic": "orders", "partition": partition, "offset": seq,
            "send_time": at - timedelta(milliseconds=latency_ms), "ack_time": at,
            "last_ack_time": at + timedelta(milliseconds=50), "error_code": None,
            "error_name": None, "acks": acks, "idempotence": acks == "all",
            "retries": 2, "max_in_flight": 5, "leader_epoch": None}


def finding(kind, offset, count, at, producer="p", pass_id=1, cause=None):
    return {"finding_id": f"{kind}:orders:0:{producer}:r:{offset}", "kind": kind,
            "subkind": "overwritten" if kind == "lost" else None, "topic": "orders",
            "partition": 0, "offset": offset, "producer_id": producer, "run_id": "r",
            "seq": offset, "count": count, "ack_time": at, "evidence": "{}", "cause": cause,
            "detected_at": at, "pass_id": pass_id}


def event(at, kind, leader, previous, isr):
    return {"event_time": at, "topic": "orders", "partition": 0, "kind": kind,
            "leader": leader, "previous_leader": previous, "isr": isr, "previous_isr": None,
            "replicas": [1, 2, 3], "leader_epoch": 4, "source": "watcher:metadata",
            "until": None, "log_end": None}


def warehouse(tmp_path, runs=3000, settings=None):
    """``settings``: where (a test's object-store settings); else a warehouse under tmp_path."""
    s = settings or Settings(home=tmp_path)
    # 3000 runs of 100 writes each, one every 20 ms; a leader change at run 1500 loses 200
    append_rows(s.table_path("acks"), "acks", [
        ack(i * 100, 100, T + timedelta(milliseconds=20 * i), latency_ms=1 + i % 10)
        for i in range(runs)])
    append_rows(s.table_path("acks"), "acks", [ack(0, 50, T, acks="all", producer="safe",
                                                   partition=1, latency_ms=40)])
    lost_at = T + timedelta(milliseconds=20 * 1498)
    change = T + timedelta(milliseconds=20 * 1500)
    append_rows(s.table_path("findings"), "findings", [
        finding("confirmed", 0, 149_800, T), finding("lost", 149_800, 200, lost_at,
                                                     cause="acks=1 fail-over"),
        finding("lost", 0, 7, T, producer="safe", cause="unknown"),
        finding("confirmed", 150_000, (runs - 1500) * 100, change)])
    append_rows(s.table_path("cluster_events"), "cluster_events", [
        event(T - timedelta(seconds=1), "first_seen", 2, None, [2, 1, 3]),
        event(change, "leader_change", 1, 2, [1, 3]),
        event(change + timedelta(seconds=5), "isr_expand", 1, 1, [1, 3, 2])])
    append_rows(s.table_path("audit_hot"), "audit_hot", [
        {"kind": "progress", "topic": "", "partition": -1, "pass_id": 1,
         "progress": '{"pass_id": 1, "acks_version": 1, "consumed_version": -1}'}])
    return s


def test_topics_producers_and_a_downsampled_timeline(tmp_path):
    s = warehouse(tmp_path)
    c = TestClient(create_app(s), base_url="http://localhost")
    (t,) = c.get("/v1/topics").json()
    assert (t["acked"], t["lost"], t["pending"]) == (300_050, 207, 43)  # safe: 43 unjudged
    assert t["last_loss"].startswith("2026-01-01T12:00:29.96")
    assert [(d["acks"], d["writes"]) for d in t["durability"]] == [("1", 300_000), ("all", 50)]
    detail = c.get("/v1/topics/orders").json()
    p0 = detail["partitions"][0]
    assert (p0["partition"], p0["lost"], p0["leader"], p0["isr"]) == (0, 207, 1, [1, 3, 2])
    assert c.get("/v1/topics/nope").status_code == 404

    producers = {p["producer_id"]: p for p in c.get("/v1/producers").json()}
    assert producers["p"]["lost"] == 200 and producers["p"]["violations"] == 0
    assert producers["safe"]["violations"] == 7  # a loss with acks=all: a broken promise
    assert producers["safe"]["settings"][0]["allows"] == []
    assert (producers["p"]["ack_latency_p50_ms"], producers["p"]["ack_latency_p99_ms"]) == (5, 10)

    tl = c.get("/v1/partitions/orders/0/timeline", params={"points": 100}).json()
    assert tl["downsampled"] == ["acks"] and 90 <= len(tl["acks"]) <= 100
    assert sum(a["count"] for a in tl["acks"]) == 300_000
    assert sum(a["runs"] for a in tl["acks"]) == 3000
    assert tl["acks"][0]["offset"] == 0 and tl["acks"][-1]["last_offset"] == 299_999
    (loss,) = [f for f in tl["findings"] if f["cause"] == "acks=1 fail-over"]
    assert (loss["offset"], loss["last_offset"], loss["count"]) == (149_800, 149_999, 200)
    assert loss["leader_change"] == "2026-01-01T12:00:30Z"  # the change that lost them
    assert [c_["previous_leader"] for c_ in tl["leader_changes"]] == [2]
    assert [p["size"] for p in tl["isr"]] == [3, 2, 3]
    assert tl["windows"] is None  # no windows table in this warehouse
    # a narrow range around the loss is not downsampled: the runs as stored
    near = c.get("/v1/partitions/orders/0/timeline", params={
        "since": "2026-01-01T12:00:29.9Z", "until": "2026-01-01T12:00:30.1Z"}).json()
    offsets = [a["offset"] for a in near["acks"]]
    assert near["downsampled"] == [] and {a["runs"] for a in near["acks"]} == {1}
    assert 149_800 in offsets and len(offsets) < 15  # runs overlapping the range


def test_the_timeline_shows_windows_when_the_warehouse_has_them(tmp_path):
    from kafka_audit.schemas.tables import column_names

    s = warehouse(tmp_path, runs=10)
    row = dict.fromkeys(column_names("windows"))
    row.update({"window_id": "exposure:orders:0:x", "kind": "exposure", "topic": "orders",
                "partition": 0, "start": T, "end": T + timedelta(seconds=1),
                "opened_by": "isr_shrink", "acks": 10, "losses": 0, "computed_at": T})
    append_rows(s.table_path("windows"), "windows", [row])
    tl = TestClient(create_app(s), base_url="http://localhost").get(
        "/v1/partitions/orders/0/timeline").json()
    assert [(w["kind"], w["opened_by"], w["acks"]) for w in tl["windows"]] == [
        ("exposure", "isr_shrink", 10)]


def window_row(kind, start, end, partition=0, losses=0):
    from kafka_audit.schemas.tables import column_names

    row = dict.fromkeys(column_names("windows"))
    row.update({"window_id": f"{kind}:orders:{partition}:{start.isoformat()}", "kind": kind,
                "topic": "orders", "partition": partition, "start": start, "end": end,
                "opened_by": "isr_shrink", "closed_by": "isr_expand" if end else None,
                "acks": 10, "losses": losses, "computed_at": T})
    return row


def test_windows_are_served_filtered_and_each_loss_names_its_window(tmp_path):
    s = warehouse(tmp_path, runs=3000)
    c = TestClient(create_app(s), base_url="http://localhost")
    assert c.get("/v1/windows").json() == {"computed": False, "items": []}
    lost_at = T + timedelta(milliseconds=20 * 1498)
    assert c.get("/v1/findings", params={"kind": "lost"}).json()["items"][0]["window_id"] is None
    exposure = window_row("exposure", lost_at - timedelta(seconds=2),
                          lost_at + timedelta(seconds=1), losses=200)
    reduced = window_row("reduced_redundancy", lost_at - timedelta(seconds=3), None)
    other = window_row("rejection", T, T + timedelta(seconds=1), partition=1)
    append_rows(s.table_path("windows"), "windows", [exposure, reduced, other])
    c = TestClient(create_app(s), base_url="http://localhost")
    page = c.get("/v1/windows").json()
    assert page["computed"] is True
    assert [(w["partition"], w["kind"]) for w in page["items"]] == [
        (0, "reduced_redundancy"), (0, "exposure"), (1, "rejection")]
    assert [w["kind"] for w in c.get("/v1/windows", params={
        "kind": ["exposure", "rejection"]}).json()["items"]] == ["exposure", "rejection"]
    assert [w["kind"] for w in c.get("/v1/windows", params={"partition": 1}).json()[
        "items"]] == ["rejection"]
    assert [w["kind"] for w in c.get("/v1/windows", params={"open_only": True}).json()[
        "items"]] == ["reduced_redundancy"]
    # an overlap: the exposure ends after `since`; the open one always does
    late = (lost_at + timedelta(seconds=5)).isoformat()
    assert [w["kind"] for w in c.get("/v1/windows", params={"since": late}).json()[
        "items"]] == ["reduced_redundancy"]
    assert c.get("/v1/windows", params={"until": "2026-01-01T12:00:00Z"}).json()["items"] == []
    assert c.get("/v1/windows", params={"kind": "nope"}).status_code == 422
    assert c.get("/v1/windows", params={"since": late, "until": late}).status_code == 422
    # p's loss fell in both: the exposure is the more telling; safe's (at T) in none
    items = c.get("/v1/findings", params={"kind": "lost"}).json()["items"]
    assert {(f["producer_id"], f["window_id"]) for f in items} == {
        ("p", exposure["window_id"]), ("safe", None)}
    (mine,) = [f for f in items if f["producer_id"] == "p"]
    one = c.get(f"/v1/findings/{mine['finding_id']}").json()
    assert one["window_id"] == exposure["window_id"]
    # each window says how many lost writes name it, beside those acknowledged inside
    named = {w["kind"]: w["losses_named"] for w in c.get("/v1/windows").json()["items"]}
    assert named == {"exposure": mine["count"], "reduced_redundancy": 0, "rejection": 0}
    assert mine["count"] > 0


def test_snapshots_are_kept_between_requests_and_follow_appends(tmp_path):
    s = warehouse(tmp_path, runs=10)
    app = create_app(s)
    c = TestClient(app, base_url="http://localhost")
    first = c.get("/v1/topics").json()[0]["acked"]
    snaps = app.state.snapshots[s.warehouse_uri]
    loads = snaps.loads
    for _ in range(5):
        c.get("/v1/topics"), c.get("/v1/summary"), c.get("/v1/findings")
    assert snaps.loads == loads and snaps.appends == 0  # nothing read again
    append_rows(s.table_path("acks"), "acks", [ack(10_000, 5, T, producer="late")])
    assert c.get("/v1/topics").json()[0]["acked"] == first + 5
    assert snaps.loads == loads and snaps.appends == 1  # only the new file was read
    # the ledger and the stream grow with every write: folded, not held
    assert snaps.get("acks").data is None and snaps.get("consumed").data is None


def test_a_repeated_request_is_answered_from_memory_until_a_table_changes(tmp_path):
    from kafka_audit.auditor_api.cache import ResponseCache

    s = warehouse(tmp_path, runs=10)
    app = create_app(s)
    c = TestClient(app, base_url="http://localhost")
    first = c.get("/v1/topics/orders").json()
    cache = next(m.kwargs for m in app.user_middleware if m.cls is ResponseCache)
    assert cache  # the middleware is installed (api.response_cache, on by default)
    stack = app.middleware_stack
    while not isinstance(stack, ResponseCache):
        stack = stack.app
    hits = stack.hits
    assert c.get("/v1/topics/orders").json() == first and stack.hits == hits + 1
    append_rows(s.table_path("acks"), "acks", [ack(10_000, 5, T, producer="late")])
    assert c.get("/v1/topics/orders").json()["acked"] == first["acked"] + 5
    assert stack.hits == hits + 1  # a table changed: computed again
    off = TestClient(create_app(Settings(home=tmp_path, api={"response_cache": False})),
                     base_url="http://localhost")
    assert off.get("/v1/topics/orders").json()["acked"] == first["acked"] + 5


def _cache_of(app):
    from kafka_audit.auditor_api.cache import ResponseCache

    app.middleware_stack = app.build_middleware_stack()
    stack = app.middleware_stack
    while not isinstance(stack, ResponseCache):
        stack = stack.app
    return stack


def _burst(app, n: int) -> list:
    """``n`` requests for one topic sent at once (each arrives while the first computes)."""
    import asyncio

    import httpx

    async def burst() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
            return await asyncio.gather(*[c.get("/v1/topics/orders") for _ in range(n)])

    return asyncio.run(burst())


def test_requests_arriving_while_their_answer_is_computed_wait_for_it_and_share_it(tmp_path):
    s = warehouse(tmp_path, runs=10)
    app = create_app(s)
    stack = _cache_of(app)
    answers = _burst(app, 20)
    assert {a.status_code for a in answers} == {200}
    assert len({a.content for a in answers}) == 1
    # the first computed it, the 19 that came while it ran were sent its answer
    assert (stack.misses, stack.shared, stack.hits) == (1, 19, 0)
    assert stack.flights == {}
    append_rows(s.table_path("acks"), "acks", [ack(10_000, 5, T, producer="late")])
    again = _burst(app, 5)
    assert {a.json()["acked"] for a in again} == {answers[0].json()["acked"] + 5}
    assert (stack.misses, stack.shared) == (2, 23)


def test_an_answer_of_older_versions_computed_late_does_not_replace_a_newer_one(tmp_path):
    s = warehouse(tmp_path, runs=10)
    app = create_app(s)
    stack = _cache_of(app)
    _burst(app, 1)
    key = next(iter(stack.entries))
    kept = stack.entries[key]
    older = (kept[0][0], *(v - 1 for v in kept[0][1:]))
    stack._keep(key, older, [], b"old")
    assert stack.entries[key][2] == kept[2]
    newer = (kept[0][0], *(v + 1 for v in kept[0][1:]))
    stack._keep(key, newer, [], b"new")
    assert stack.entries[key][2] == b"new"


def test_the_dashboard_and_its_charting_library_are_served_by_the_app(tmp_path):
    c = TestClient(create_app(Settings(home=tmp_path)), base_url="http://localhost")
    page = c.get("/dashboard")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert 'src="dashboard/static/plotly.min.js"' in page.text and "https://" not in page.text
    lib = c.get("/dashboard/static/plotly.min.js")
    assert lib.status_code == 200 and "plotly.js v" in lib.text[:200]
    assert c.get("/dashboard/static/plotly.min.js",
                 headers={"If-None-Match": lib.headers["etag"]}).status_code == 304
    assert c.get("/dashboard/static/../deps.py").status_code == 404
    assert "/dashboard" not in c.get("/openapi.json").json()["paths"]


def test_a_timeline_reads_on_from_the_ledgers_new_files(tmp_path):
    """The ledger is not held: a partition's timeline keeps its rows apart and reads only the
    files each commit appends (a compaction reads nothing), not the table again."""
    from kafka_audit.store import compact

    s = warehouse(tmp_path, runs=10)
    app = create_app(s)
    c = TestClient(app, base_url="http://localhost")
    first = c.get("/v1/partitions/orders/0/timeline").json()
    assert sum(a["count"] for a in first["acks"]) == 1000
    snaps = app.state.snapshots[s.warehouse_uri]
    (acks,) = [rows for (name, *_), (_lock, rows) in snaps._row_sets.items()
               if name == "acks"]
    assert acks.full_reads == 1 and acks.appended_files == 0
    compact(s.table_path("acks"))
    append_rows(s.table_path("acks"), "acks", [ack(10_000, 5, T + timedelta(seconds=1))])
    later = c.get("/v1/partitions/orders/0/timeline").json()
    assert sum(a["count"] for a in later["acks"]) == 1005
    assert later["acks"][-1]["last_offset"] == 10_004
    assert acks.full_reads == 1 and acks.appended_files == 1  # the new file alone
