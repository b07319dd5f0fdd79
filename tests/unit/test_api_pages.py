"""The pages the app serves to browsers: the dashboard under a Content-Security-Policy that
runs only the app's own scripts, showing values from records as text (chart hover text
included); Swagger UI and ReDoc from packaged assets, nothing from another origin;
``nosniff`` on every answer; big assets and answers gzipped.

Records are written by anyone who can produce to an audited topic: a producer id or a
cause can hold markup. The dashboard's script is run here over such records twice: in
Node with the DOM and plotly.js stubbed (what each chart is given), and, where Debian's
chromium is installed, in headless chromium (what the page shows, and that nothing
breaks under the policy).
"""

import base64
import gzip
import hashlib
import json
import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from urllib.parse import quote

import httpx
import pytest
from fastapi.testclient import TestClient

from kafka_audit.auditor_api.auth import hash_token, new_token
from kafka_audit.auditor_api.main import create_app
from kafka_audit.settings import Settings
from kafka_audit.store import append_rows
from tests.unit.test_api_errors import serving
from tests.unit.test_api_systems import QUEUE
from tests.unit.test_api_systems import app as two_systems

T = datetime(2026, 1, 1, 12, tzinfo=UTC)
LOCAL = "http://localhost"
#: a producer id and a cause with markup; run, the image's handler would mark the page
PRODUCER = '<b>p</b><img src=x onerror="document.body.dataset.pwned=1">'
CAUSE = ('<a href="https://attacker.example/">click</a>'
         '<img src=x onerror="document.body.dataset.pwned=1">')


def escaped(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def hostile_warehouse(home) -> Settings:
    """A partition whose acks, loss, stream run and re-read carry :data:`PRODUCER`, the loss
    :data:`CAUSE`, and a leader change."""
    s = Settings(home=home)
    acks = []
    for i in range(20):
        at = T + timedelta(milliseconds=100 * i)
        acks.append({"run_id": "r", "producer_id": PRODUCER, "seq": i * 10, "count": 10,
                     "topic": "orders", "partition": 0, "offset": i * 10,
                     "send_time": at - timedelta(milliseconds=2), "ack_time": at,
                     "last_ack_time": at + timedelta(milliseconds=50), "error_code": None,
                     "error_name": None, "acks": "1", "idempotence": False, "retries": 2,
                     "max_in_flight": 5, "leader_epoch": None})
    append_rows(s.table_path("acks"), "acks", acks)
    lost_at = T + timedelta(milliseconds=1500)
    append_rows(s.table_path("findings"), "findings", [
        {"finding_id": "lost:orders:0:x:r:150", "kind": "lost", "subkind": "overwritten",
         "topic": "orders", "partition": 0, "offset": 150, "producer_id": PRODUCER,
         "run_id": "r", "seq": 150, "count": 50, "ack_time": lost_at, "evidence": "{}",
         "cause": CAUSE, "detected_at": lost_at, "pass_id": 1}])

    def run(offset, count, source, at, batch):
        return {"topic": "orders", "partition": 0, "offset": offset, "count": count,
                "kafka_timestamp": T, "stamped": True, "stamp_error": None,
                "producer_id": PRODUCER, "run_id": "r", "seq": offset, "checksum_ok": True,
                "read_time": at, "batch_id": batch, "source": source, "status": "record",
                "leader_epoch": 5 if source == "reread" else None}

    append_rows(s.table_path("consumed"), "consumed", [
        run(0, 150, "stream", T, 0), run(140, 10, "reread", T + timedelta(seconds=3), 1)])
    append_rows(s.table_path("cluster_events"), "cluster_events", [
        {"event_time": T + timedelta(milliseconds=1600), "topic": "orders", "partition": 0,
         "kind": "leader_change", "leader": 1, "previous_leader": 2, "isr": [1, 3],
         "previous_isr": [2, 1, 3], "replicas": [1, 2, 3], "leader_epoch": 5,
         "source": "watcher:metadata", "until": None, "log_end": None}])
    append_rows(s.table_path("audit_hot"), "audit_hot", [
        {"kind": "progress", "topic": "", "partition": -1, "pass_id": 1,
         "progress": '{"pass_id": 1, "acks_version": 0, "consumed_version": 0}'}])
    return s


def policy(header: str) -> dict[str, list[str]]:
    return {d.split()[0]: d.split()[1:] for d in header.split(";") if d.strip()}


class _Refs(HTMLParser):
    """Every URL a page loads (src, href) and its inline scripts."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.inline: list[str] = []
        self._in_inline = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.urls += [a[k] for k in ("src", "href") if a.get(k)]
        self._in_inline = tag == "script" and not a.get("src")

    def handle_data(self, data):
        if self._in_inline and data.strip():
            self.inline.append(data)

    def handle_endtag(self, tag):
        self._in_inline = False


def refs(html: str) -> _Refs:
    p = _Refs()
    p.feed(html)
    return p


def test_every_answer_says_nosniff_and_the_dashboard_runs_only_its_own_scripts(tmp_path):
    open_app = TestClient(create_app(Settings(home=tmp_path)), base_url=LOCAL)
    token = {"name": "t", "hash": hash_token(new_token())}
    locked = TestClient(create_app(Settings(home=tmp_path, api={"tokens": [token]})),
                        base_url=LOCAL)
    answers = [open_app.get(p) for p in ("/v1/summary", "/v1/nope", "/healthz", "/dashboard",
                                         "/dashboard/static/dashboard.js", "/docs",
                                         "/openapi.json")]
    answers += [locked.get("/v1/summary"),  # 401
                TestClient(create_app(Settings(home=tmp_path))).get("/v1/summary")]  # 400
    assert {r.status_code for r in answers} >= {200, 400, 401, 404}
    for r in answers:
        assert r.headers["x-content-type-options"] == "nosniff", r.url
        assert "content-security-policy" in r.headers, r.url
    assert policy(answers[0].headers["content-security-policy"])["default-src"] == ["'none'"]

    page = open_app.get("/dashboard")
    csp = policy(page.headers["content-security-policy"])
    assert csp["script-src"] == ["'self'"]  # no inline script, no eval, no other origin
    assert csp["default-src"] == ["'self'"] and csp["connect-src"] == ["'self'"]
    assert csp["object-src"] == ["'none'"] and csp["frame-ancestors"] == ["'none'"]
    found = refs(page.text)
    assert found.inline == [] and found.urls
    for url in found.urls:  # relative: under a proxy's path prefix too
        assert not url.startswith(("/", "http:", "https:")), url
        assert open_app.get("/" + url).status_code == 200, url


NODE_HARNESS = r"""
// dashboard.js as the app serves it, over a stubbed DOM and plotly.js; its requests go to
// the real API (as if through a proxy under a path prefix). Prints what each chart was
// given, the page's text, any markup set, the paths it asked and the topics' rows; given a
// system, then picks it in the filter and prints the rows again.
const vm = require("vm");
const [base, script, pick] = process.argv.slice(2);
const texts = [], markup = [], plots = [], asked = [], listeners = [];
class Node_ {}
class El extends Node_ {
  constructor(tag) {
    super(); this.tag = tag; this.children = []; this.dataset = {}; this._text = "";
  }
  append(...cs) { this.children.push(...cs); }
  replaceChildren(...cs) { this.children = cs; }
  addEventListener(type, fn) { listeners.push([this.tag, type, fn]); }
  setAttribute(k, v) { this.dataset[k] = v; }
  set textContent(v) { this._text = String(v); texts.push(this._text); }
  get textContent() { return this._text; }
  set innerHTML(v) { markup.push(String(v)); }
  set outerHTML(v) { markup.push(String(v)); }
  insertAdjacentHTML(_w, v) { markup.push(String(v)); }
}
class Text_ extends Node_ {
  constructor(t) { super(); this.text = String(t); texts.push(this.text); }
}
const textOf = (e) => e instanceof Text_ ? e.text : (e._text || e.children.map(textOf).join(""));
const byId = {};
const document = {
  body: new El("body"),
  getElementById: (id) => (byId[id] ??= new El(id)),
  querySelector: (sel) => (byId[sel] ??= new El(sel)),
  createElement: (tag) => new El(tag),
  createTextNode: (t) => new Text_(t),
  write: (v) => markup.push(String(v)),
};
const store = {};
let hash = "";  // as a browser reads it back: with its "#"
const context = vm.createContext({
  document, Node: Node_, console, setTimeout,
  sessionStorage: { getItem: (k) => store[k] ?? null, setItem: (k, v) => { store[k] = v; } },
  location: { get hash() { return hash; }, pathname: "/audit/dashboard", search: "",
              set hash(v) { hash = String(v).replace(/^(?!#|$)/, "#"); } },
  history: { replaceState() {} },
  // the page as a reverse proxy serves it under /audit: each path the script asks is
  // resolved against the page's address and must stay under the prefix
  fetch: (path, options) => {
    const url = new URL(path, "http://proxy.example/audit/dashboard");
    asked.push(url.pathname + url.search);
    if (url.origin !== "http://proxy.example" || !url.pathname.startsWith("/audit/")) {
      throw new Error("a request outside the prefix: " + url.href);
    }
    return fetch(base + url.pathname.slice("/audit".length) + url.search, options);
  },
  Plotly: { newPlot: async (_el, traces, layout) => { plots.push({ traces, layout }); } },
});
const rows = () => document.querySelector("#topics tbody").children.map((r) => ({
  topic: r.dataset.topic, system: r.dataset.system, shown: textOf(r.children[0]),
  title: r.children[0].title, badge: textOf(r.children[1]) }));
async function ready() {
  for (let i = 0; i < 600 && !document.body.dataset.ready; i++) {
    await new Promise((r) => setTimeout(r, 50));
  }
  return document.body.dataset.ready ?? null;
}
vm.runInContext(require("fs").readFileSync(script, "utf8"), context);
(async () => {
  const out = { ready: await ready(), plots, texts, markup, rows: rows() };
  if (pick !== undefined) {  // the person picks a system in the filter
    const select = document.getElementById("system");
    delete document.body.dataset.ready;
    select.value = pick;
    for (const [tag, type, fn] of listeners) {
      if (tag === "system" && type === "change") fn({ target: select });
    }
    out.picked = { ready: await ready(), hash, rows: rows(),
                   title: document.getElementById("topic-title").textContent };
  }
  out.asked = asked;
  console.log(JSON.stringify(out));
})();
"""


def chart_strings(plots: list[dict]) -> list[str]:
    """Every string plotly.js is given to draw as text (it reads markup in them): trace names
    and texts, annotation texts."""
    out = []
    for p in plots:
        for t in p["traces"]:
            out += [t.get("name") or ""] + [x for x in t.get("text") or [] if isinstance(x, str)]
        out += [a.get("text") or "" for a in p["layout"].get("annotations") or []]
    return out


def in_node(app, tmp_path, *args: str) -> dict:
    """What the dashboard's script did in :data:`NODE_HARNESS` over ``app`` served by uvicorn
    (``args``: a system to pick in the filter once it is ready)."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is missing: `bash dev.sh setup` installs Debian's nodejs")
    with serving(app) as base:
        script = tmp_path / "dashboard.js"
        script.write_bytes(httpx.get(f"{base}/dashboard/static/dashboard.js").content)
        harness = tmp_path / "harness.js"
        harness.write_text(NODE_HARNESS)
        done = subprocess.run([node, str(harness), base, str(script), *args],
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_values_from_records_reach_the_charts_and_the_page_as_text(tmp_path):
    seen = in_node(create_app(hostile_warehouse(tmp_path / "home")), tmp_path)
    assert seen["ready"] == "yes" and seen["plots"]
    drawn = chart_strings(seen["plots"])
    assert [t for t in drawn if "<" in t or ">" in t] == []  # no markup reaches plotly.js
    # shown, as the text it is: the producer in the re-read's hover text, the cause in the
    # loss's; on the page itself the cause is a text node
    assert any(escaped(f"({PRODUCER}/r)") in t for t in drawn)
    assert any(escaped(f"cause {CAUSE}") in t for t in drawn)
    assert CAUSE in seen["texts"]
    assert seen["markup"] == []  # nothing ever set as HTML


def test_the_dashboard_names_each_topics_system_and_its_filter_asks_the_api_for_one(tmp_path):
    """Each topic row shows its system, a queue's key as a person reads it (the key itself in
    the title); picking RabbitMQ in the filter asks ``/v1/topics?system=rabbitmq`` and keeps
    the queue only, in the list and in the partitions shown."""
    seen = in_node(two_systems(tmp_path / "home"), tmp_path, "rabbitmq")
    assert seen["ready"] == "yes"
    assert sorted(seen["rows"], key=lambda r: r["topic"]) == [
        {"topic": "orders", "system": "kafka", "shown": "orders", "title": "orders",
         "badge": "Kafka"},
        {"topic": QUEUE, "system": "rabbitmq", "shown": "queue orders (vhost /)",
         "title": QUEUE, "badge": "RabbitMQ"}]
    assert "/audit/v1/topics" in seen["asked"]
    picked = seen["picked"]
    assert picked["ready"] == "yes" and picked["hash"] == "#system=rabbitmq"
    assert [r["topic"] for r in picked["rows"]] == [QUEUE]
    assert picked["title"] == "Partitions of queue orders (vhost /)"
    assert "/audit/v1/topics?system=rabbitmq" in seen["asked"]


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run", "--hide-scrollbars",
                  "--window-size=1400,2000", "--virtual-time-budget=30000",
                  "--enable-logging=stderr", "--v=0"]


def chromium_dom(url: str, profile) -> tuple[str, str]:
    exe = shutil.which("chromium")
    done = subprocess.run([exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom",
                           url], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, done.stderr


def test_the_pages_work_under_their_policies_in_chromium(tmp_path):
    if shutil.which("chromium") is None:
        pytest.skip("chromium is missing: `bash dev.sh setup` installs Debian's chromium")
    s = hostile_warehouse(tmp_path / "home")
    with serving(create_app(s)) as base:
        dom, log = chromium_dom(f"{base}/dashboard", tmp_path / "p1")
        docs, docs_log = chromium_dom(f"{base}/docs", tmp_path / "p2")
        redoc, redoc_log = chromium_dom(f"{base}/redoc", tmp_path / "p3")
    for text in (log, docs_log, redoc_log):  # the browser blocked nothing the pages need
        assert "Content Security Policy" not in text, text[-3000:]
    assert 'data-ready="yes"' in dom and "main-svg" in dom  # loaded, charts drawn
    assert "data-pwned" not in dom  # no handler from a record ran
    assert escaped(CAUSE) in dom  # the cause, as text
    assert not re.search(r"<img[^>]*src=\"?x", dom) and "attacker.example/\">click" not in dom
    assert docs.count('class="opblock opblock-get"') >= 10  # Swagger UI drew the operations
    assert "/v1/summary" in redoc and "api-content" in redoc  # and ReDoc


def test_the_dashboards_system_filter_narrows_the_topics_in_chromium(tmp_path):
    """The page as chromium shows it: every topic with its system, then one system's only
    (the filter's choice is in the fragment); a topic of the other system asked in the
    fragment gives way to one of the system kept."""
    if shutil.which("chromium") is None:
        pytest.skip("chromium is missing: `bash dev.sh setup` installs Debian's chromium")

    def rows(dom: str) -> dict[str, str]:
        assert 'data-ready="yes"' in dom, dom[-3000:]
        return dict(re.findall(r'<tr [^>]*data-topic="([^"]*)" data-system="([^"]*)"', dom))

    with serving(two_systems(tmp_path / "home")) as base:
        every, _ = chromium_dom(f"{base}/dashboard", tmp_path / "p1")
        kafka, _ = chromium_dom(f"{base}/dashboard#system=kafka&topic={quote(QUEUE, safe='')}",
                                tmp_path / "p2")
        rabbit, _ = chromium_dom(f"{base}/dashboard#system=rabbitmq", tmp_path / "p3")
    assert rows(every) == {"orders": "kafka", QUEUE: "rabbitmq"}
    assert f'<td class="text" title="{QUEUE}">queue orders (vhost /)</td>' in every
    assert '<span class="system rabbitmq">RabbitMQ</span>' in every
    assert '<span class="system kafka">Kafka</span>' in every
    assert rows(kafka) == {"orders": "kafka"}
    assert '<h2 id="topic-title" title="orders">Partitions of orders</h2>' in kafka
    assert rows(rabbit) == {QUEUE: "rabbitmq"}
    assert "Partitions of queue orders (vhost /)" in rabbit


def test_swagger_ui_and_redoc_load_only_from_this_app(tmp_path):
    c = TestClient(create_app(Settings(home=tmp_path)), base_url=LOCAL)
    for page in ("/docs", "/redoc"):
        r = c.get(page)
        assert r.status_code == 200 and "text/html" in r.headers["content-type"]
        found = refs(r.text)
        urls = found.urls + re.findall(r"url: '([^']+)'", r.text) + re.findall(
            r'spec-url="([^"]+)"', r.text)
        assert len(urls) >= 2, r.text
        for url in urls:
            assert url.startswith("/") and not url.startswith("//"), (page, url)
            got = c.get(url)
            assert got.status_code == 200 and got.content, (page, url)
        csp = policy(r.headers["content-security-policy"])
        assert "'unsafe-inline'" not in csp["script-src"] and "'unsafe-eval'" not in csp[
            "script-src"]
        assert all(s.startswith("'") for s in csp["script-src"])  # no other origin
        assert csp["connect-src"] == ["'self'"]
        for inline in found.inline:  # Swagger UI's start-up script, allowed by its hash
            digest = base64.b64encode(hashlib.sha256(inline.encode()).digest()).decode()
            assert f"'sha256-{digest}'" in csp["script-src"]
    assert "https://" not in c.get("/docs").text and "https://" not in c.get("/redoc").text
    assert c.get("/docs/nope.js").status_code == 404
    assert c.get("/redoc/..%2Fmain.py").status_code == 404


def test_the_charting_library_and_big_answers_are_gzipped(tmp_path):
    c = TestClient(create_app(Settings(home=tmp_path)), base_url=LOCAL)
    plain = c.get("/dashboard/static/plotly.min.js", headers={"Accept-Encoding": "identity"})
    assert plain.status_code == 200 and "content-encoding" not in plain.headers
    assert len(plain.content) > 4_000_000
    with c.stream("GET", "/dashboard/static/plotly.min.js",
                  headers={"Accept-Encoding": "gzip"}) as r:
        packed = b"".join(r.iter_raw())  # as sent, not decoded
        assert r.headers["content-encoding"] == "gzip" and "Accept-Encoding" in r.headers["vary"]
        assert int(r.headers["content-length"]) == len(packed) < len(plain.content) // 2
        assert gzip.decompress(packed) == plain.content
        etag = r.headers["etag"]
    assert etag != plain.headers["etag"]  # one tag per encoding
    assert c.get("/dashboard/static/plotly.min.js", headers={
        "Accept-Encoding": "gzip", "If-None-Match": etag}).status_code == 304
    for path in ("/docs/swagger-ui-bundle.js", "/redoc/redoc.standalone.js", "/openapi.json"):
        r = c.get(path, headers={"Accept-Encoding": "gzip"})
        assert r.status_code == 200 and r.headers.get("content-encoding") == "gzip", path


def test_a_kept_answer_is_sent_gzipped_or_not_as_each_client_asks(tmp_path):
    from tests.unit.test_api_resources import warehouse

    c = TestClient(create_app(warehouse(tmp_path, runs=10)), base_url=LOCAL)
    first = c.get("/v1/findings", headers={"Accept-Encoding": "gzip"})  # computed, kept
    assert first.headers["content-encoding"] == "gzip" and len(first.content) > 1024
    for coding in ("gzip", "identity", "gzip", "identity"):  # from the response cache
        r = c.get("/v1/findings", headers={"Accept-Encoding": coding})
        assert r.status_code == 200 and r.json() == first.json()
        assert r.headers.get("content-encoding") == ("gzip" if coding == "gzip" else None)
