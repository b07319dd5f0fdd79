"""The API stays bounded under hostile requests: nothing is kept per request for a name no
table knows, the response cache is bounded by bytes, a request for an unknown topic is a
404 that scans nothing, and requests beyond the concurrency limit get a 503 at once."""

import asyncio
import threading

import httpx
import pyarrow as pa
import pytest
from fastapi.testclient import TestClient

from kafka_audit.auditor_api import guards
from kafka_audit.auditor_api.cache import ResponseCache
from kafka_audit.auditor_api.main import create_app
from kafka_audit.auditor_api.snapshots import Snapshots
from tests.unit.test_api_resources import warehouse

LOCAL = "http://localhost"


def layer(app, cls):
    """The app's middleware instance of ``cls`` (the stack is built on first use)."""
    if app.middleware_stack is None:
        app.middleware_stack = app.build_middleware_stack()
    stack = app.middleware_stack
    while not isinstance(stack, cls):
        stack = stack.app
    return stack


def test_a_computation_leaves_the_map_of_those_in_flight_when_it_ends(tmp_path):
    snaps = Snapshots(lambda name: str(tmp_path / name))

    def unknown(*_):
        raise LookupError("no such topic")

    for i in range(100):  # ever new keys whose computation raises (an unknown topic's)
        with pytest.raises(LookupError):
            snaps.memo(("summary", f"t{i}"), (), unknown)
    assert snaps.memo(("summary", "known"), (), lambda: 42) == 42
    assert snaps._computing == {}
    assert list(snaps._memo) == [("summary", "known")]


def test_unknown_topics_and_partitions_are_404s_that_read_and_keep_nothing(tmp_path):
    s = warehouse(tmp_path, runs=10)
    app = create_app(s)
    c = TestClient(app, base_url=LOCAL)
    # the tables' snapshots loaded, the lookup of known names made
    assert c.get("/v1/summary", params={"topic": "orders"}).status_code == 200
    snaps = app.state.snapshots[s.warehouse_uri]
    loads, memo = snaps.loads, set(snaps._memo)
    for i in range(50):
        r = c.get(f"/v1/partitions/nope-{i}/0/timeline")
        assert r.status_code == 404 and r.json()["type"].endswith(":unknown-topic")
        r = c.get("/v1/summary", params={"topic": f"nope-{i}"})
        assert r.status_code == 404 and r.json()["type"].endswith(":unknown-topic")
        r = c.get(f"/v1/partitions/orders/{1000 + i}/timeline")  # a known topic
        assert r.status_code == 404 and r.json()["type"].endswith(":unknown-partition")
        assert c.get("/v1/producers", params={"topic": f"nope-{i}"}).json() == []
    assert snaps._row_sets == {}  # the ledger and the stream were never scanned for them
    assert snaps.loads == loads
    assert snaps._computing == {}
    assert set(snaps._memo) == memo
    # what is known is still served
    assert c.get("/v1/partitions/orders/0/timeline").status_code == 200
    assert c.get("/v1/partitions/orders/1/timeline").status_code == 200  # acks only
    assert c.get("/v1/summary", params={"topic": "orders"}).json()["acked"] == 1050


def test_listings_kept_per_filter_are_bounded_by_bytes(tmp_path, monkeypatch):
    from kafka_audit.auditor_api import snapshots

    s = warehouse(tmp_path, runs=10)
    app = create_app(s.model_copy(update={"api": s.api.model_copy(update={
        "response_cache": False})}))
    c = TestClient(app, base_url=LOCAL)
    monkeypatch.setattr(snapshots, "_MAX_MEMO_BYTES", 8 << 10)
    for i in range(60):  # a filter varied each time, every finding matching it
        since = f"2025-12-31T00:00:00.{i:06d}Z"
        assert len(c.get("/v1/findings", params={"since": since}).json()["items"]) == 4
    snaps = app.state.snapshots[s.warehouse_uri]
    tables = [v for _versions, v in snaps._memo.values() if isinstance(v, pa.Table)]
    assert snaps.memo_bytes == sum(t.nbytes for t in tables) <= 8 << 10
    assert 0 < len(tables) < 60


def test_the_response_cache_is_bounded_by_bytes(tmp_path):
    s = warehouse(tmp_path, runs=10)
    budget = 8 << 10
    s = s.model_copy(update={"api": s.api.model_copy(update={
        "response_cache_max_mb": budget / (1 << 20)})})
    app = create_app(s)
    c = TestClient(app, base_url=LOCAL)
    cache = layer(app, ResponseCache)
    assert cache.max_bytes == budget
    sizes = []
    for n in range(1, 41):  # 40 distinct answers of 0.6-1.3 KB: more than the budget holds
        r = c.get("/v1/findings", params={"page_size": n})
        assert r.status_code == 200
        sizes.append(len(r.content))
    assert sum(sizes) > 2 * budget
    assert cache.bytes <= budget
    assert cache.bytes == sum(e[3] for e in cache.entries.values())
    assert 0 < len(cache.entries) < 40
    # the least recently used went first: the last answers are kept, a hit refreshes one
    kept = [dict(httpx.QueryParams(q.decode()))["page_size"] for _p, q in cache.entries]
    assert kept[-1] == "40"
    hits = cache.hits
    c.get("/v1/findings", params={"page_size": kept[0]})
    assert cache.hits == hits + 1
    assert [dict(httpx.QueryParams(q.decode()))["page_size"]
            for _p, q in cache.entries][-1] == kept[0]
    # an answer larger than a quarter of the budget is sent, not kept
    big = c.get("/v1/partitions/orders/0/timeline", params={"points": 2000})
    assert big.status_code == 200 and len(big.content) > budget // 4
    assert ("/v1/partitions/orders/0/timeline", b"points=2000") not in cache.entries


def test_requests_beyond_the_concurrency_limit_get_a_503_at_once(tmp_path, monkeypatch):
    from kafka_audit.auditor_api.routes import topics

    s = warehouse(tmp_path, runs=10)
    s = s.model_copy(update={"api": s.api.model_copy(update={"max_concurrent_requests": 2})})
    app = create_app(s)
    limit = layer(app, guards.ConcurrencyLimit)
    gate = threading.Event()
    real = topics.all_topics

    def held(reader):  # a slow answer: held until the test lets it go
        assert gate.wait(30)
        return real(reader)

    monkeypatch.setattr(topics, "all_topics", held)

    async def scene():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=LOCAL, timeout=30) as c:
            slow = [asyncio.create_task(c.get("/v1/topics")),
                    asyncio.create_task(c.get("/v1/topics/orders"))]
            for _ in range(3000):  # until both are in flight
                if limit.in_flight == 2:
                    break
                await asyncio.sleep(0.01)
            assert limit.in_flight == 2
            refused = await c.get("/v1/summary")
            health = await c.get("/healthz")  # never refused: orchestrators probe it
            gate.set()
            done = await asyncio.gather(*slow)
            after = await c.get("/v1/summary")
            return refused, health, done, after

    refused, health, done, after = asyncio.run(scene())
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "1"
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["type"].endswith(":overloaded")
    assert "api.max_concurrent_requests" in refused.json()["detail"]
    assert "retry-after" not in health.headers and health.status_code in (200, 503)
    assert [r.status_code for r in done] == [200, 200]
    assert after.status_code == 200 and limit.in_flight == 0 and limit.refused == 1
