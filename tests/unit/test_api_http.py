"""HTTP as proxies, probes and tools expect it: ``HEAD`` answers what ``GET`` would without
the body (through a real uvicorn too), ``/metrics`` carries the process's own figures and
the build's, operation ids are the routes' names, and ``/dashboard/`` sends the browser to
the page whose relative paths hold under a proxy's prefix."""

import re

import httpx
from fastapi.testclient import TestClient

from kafka_audit import __version__
from kafka_audit.auditor_api.main import create_app
from kafka_audit.settings import Settings
from kafka_audit.store import append_rows
from tests.support.rows import ledger_row
from tests.unit.test_api_errors import serving

LOCAL = "http://localhost"
PLAIN = {"Accept-Encoding": "identity"}


def app_with_acks(tmp_path):
    s = Settings(home=tmp_path)
    append_rows(s.table_path("acks"), "acks", [ledger_row(i, "orders") for i in range(3)])
    return create_app(s)


def test_head_answers_what_get_would_without_the_body(tmp_path):
    c = TestClient(app_with_acks(tmp_path), base_url=LOCAL)
    for path in ("/healthz", "/v1/summary", "/v1/topics", "/v1/topics/orders", "/metrics",
                 "/dashboard", "/dashboard/static/dashboard.js", "/openapi.json",
                 "/v1/topics/nosuch", "/v1/nowhere"):
        got, head = c.get(path, headers=PLAIN), c.head(path, headers=PLAIN)
        assert head.status_code == got.status_code, path
        assert head.content == b"", path
        assert head.headers["content-type"] == got.headers["content-type"], path
        if path != "/metrics":  # its timings move between the two requests
            assert int(head.headers["content-length"]) == len(got.content), path
    assert c.head("/v1/summary").status_code == 200  # not a 405 any more
    assert c.post("/v1/summary").status_code == 405  # only HEAD became a GET


def test_head_through_uvicorn_and_counted_as_head_on_its_route(tmp_path):
    with serving(app_with_acks(tmp_path)) as base:
        head = httpx.head(f"{base}/v1/summary", headers=PLAIN)
        got = httpx.get(f"{base}/v1/summary", headers=PLAIN)
        metrics = httpx.get(f"{base}/metrics").text
    assert head.status_code == 200 and head.content == b""
    assert int(head.headers["content-length"]) == len(got.content)
    assert re.search(r'kafka_audit_api_request_seconds_count\{method="HEAD",'
                     r'route="/v1/summary",status="200"\} 1\.0', metrics), metrics[-3000:]


def test_metrics_carry_the_process_the_interpreter_and_the_build(tmp_path):
    text = TestClient(create_app(Settings(home=tmp_path)), base_url=LOCAL).get("/metrics").text
    for family in ("process_resident_memory_bytes", "process_cpu_seconds_total",
                   "process_open_fds", "python_info", "python_gc_objects_collected_total"):
        assert re.search(rf"^{family}(\{{[^}}]*\}})? [0-9.e+]+$", text, re.M), family
    build = re.search(r"^kafka_audit_build_info\{(.*)\} 1\.0$", text, re.M)
    assert build and f'version="{__version__}"' in build.group(1)
    assert 'python="3.' in build.group(1)
    rss = float(re.search(r"^process_resident_memory_bytes (\S+)$", text, re.M).group(1))
    assert rss > 10e6  # this process's own memory, not a placeholder


def test_operation_ids_are_the_routes_names_and_unique(tmp_path):
    schema = TestClient(create_app(Settings(home=tmp_path)), base_url=LOCAL).get(
        "/openapi.json").json()
    ids = [op["operationId"] for ops in schema["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids)) >= 15
    for op_id in ids:
        assert re.fullmatch(r"[a-z][a-z_]*[a-z]", op_id) and not op_id.endswith("_get"), op_id
    assert {"list_findings", "get_finding", "summary", "timeline", "metrics"} <= set(ids)


def test_the_slash_form_of_the_dashboard_sends_the_browser_to_the_page(tmp_path):
    c = TestClient(create_app(Settings(home=tmp_path)), base_url=LOCAL)
    moved = c.get("/dashboard/", follow_redirects=False)
    assert moved.status_code == 308 and moved.headers["location"] == "../dashboard"
    # relative: under a proxy's prefix it resolves under the prefix
    assert str(httpx.URL("https://proxy.example/audit/dashboard/").join(
        moved.headers["location"])) == "https://proxy.example/audit/dashboard"
    assert c.get("/dashboard/").status_code == 200  # followed


def test_behind_a_proxy_that_strips_a_prefix_the_open_paths_stay_open(tmp_path):
    """uvicorn with ``api.root_path`` (what ``kafka-audit serve`` passes it) puts the
    prefix in front of each path it receives: health, the dashboard and the docs must
    still be the open ones, the audit's answers still need the token, and the docs link
    their assets under the prefix."""
    from kafka_audit.auditor_api.auth import hash_token, new_token
    from kafka_audit.auditor_api.server import uvicorn_config

    token = new_token()
    s = Settings(home=tmp_path, api={"tokens": [{"name": "t", "hash": hash_token(token)}],
                                     "root_path": "/audit"})
    assert uvicorn_config(create_app(s), s).root_path == "/audit"
    with serving(create_app(s), root_path="/audit") as base:  # the proxy stripped /audit
        assert httpx.get(f"{base}/healthz").status_code == 200
        assert httpx.head(f"{base}/readyz").status_code in (200, 503)
        assert httpx.get(f"{base}/dashboard").status_code == 200
        assert httpx.get(f"{base}/v1/summary").status_code == 401
        ok = httpx.get(f"{base}/v1/summary", headers={"Authorization": f"Bearer {token}"})
        assert ok.status_code == 200
        docs = httpx.get(f"{base}/docs")
    assert docs.status_code == 200 and "/audit/openapi.json" in docs.text
