"""``kafka-audit run`` as a user runs it: one process holding the watcher, the consume
stream, the audit loop and the REST API.

Findings appear over REST, for producers that commit their own ledger and for ones that
hand it over to the service's committer (``ledger_commits: staged``, also while the
service is stopped); its consume query stopped from outside (SIGUSR1) is restarted;
SIGTERM stops it within 30 s; started again it goes on where it stopped, and no write
is judged twice or missed. It runs its Python objects on glibc's malloc
(``steady.python_allocator``), started again in the process the user started.
"""

import signal
import time
from pathlib import Path

import httpx

from kafka_audit import store
from kafka_audit.producers.load import LoadSpec, run_load
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.scenarios.harness import Component, expand_rows, findings_of
from kafka_audit.status import read_statuses

from ..support.rest import summary


def environ(pid: int) -> list[bytes]:
    return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")


def api_child(pid: int) -> int:
    children = [c for t in Path(f"/proc/{pid}/task").iterdir()
                for c in (t / "children").read_text().split()]  # any thread's
    return next(int(c) for c in children
                if b"kafka_audit.app.api_process" in Path(f"/proc/{c}/cmdline").read_bytes())


def judged(settings, topic, n: int) -> bool:
    s = summary(settings, topic)
    return s is not None and s["acked"] == n and s["pending"] == 0


def test_the_service_audits_restarts_and_stops_cleanly(cluster, settings, topic):
    staged = settings.model_copy(update={"producer": settings.producer.model_copy(
        update={"ledger_commits": "staged"})})
    producers = [run_load(settings, LoadSpec(topic=topic, rate=0, count=5000, acks="all"),
                          keep_record=True)]
    with Component(settings, "run") as service:
        wait_until(lambda: judged(settings, topic, 5000), 240, "5000 writes judged over REST")
        # ready, and the lag measured (log ends less the offsets committed) is 0: all read
        wait_until(lambda: (r := httpx.get(
            f"http://{settings.api.host}:{settings.api.port}/readyz", timeout=10)
        ).status_code == 200 and r.json()["behind"]["consume_lag_offsets"] == 0, 120,
            "/readyz to say every component is ready, with no lag")
        # the pid the user started runs with glibc's malloc for Python, and so does its API
        api = wait_until(lambda: api_child(service.proc.pid), 30, "the API process's pid")
        for pid in (service.proc.pid, api):
            assert b"PYTHONMALLOC=malloc" in environ(pid), pid
        # the consume query stopped from outside: the service starts it again
        service.proc.send_signal(signal.SIGUSR1)
        wait_until(lambda: (read_statuses(settings.home_dir).get("consume").detail or {})
                   .get("restarts", 0) >= 1, 120, "the consume query to be restarted")
        # a producer that hands its ledger over: the service's committer commits it
        producers.append(run_load(staged, LoadSpec(topic=topic, rate=0, count=2000,
                                                   acks="all", producer_id="b"),
                                  keep_record=True))
        wait_until(lambda: judged(settings, topic, 7000), 240, "7000 writes judged")
        t0 = time.monotonic()
        code = service.stop(timeout=60)
        stopped_in = time.monotonic() - t0
        log = service.output()
    print(f"stopped in {stopped_in:.1f}s with exit code {code}")
    assert code == 0 and stopped_in < 30, (code, stopped_in, log[-2000:])
    assert "SIGUSR1: stopping the consume query" in log
    assert log.count("consume: cannot do its work") == 1 and "consume: working again" in log
    # stopped: more writes; started again, it goes on where it stopped
    # ... and one handing over while the service is stopped: committed once it is back
    producers.append(run_load(staged, LoadSpec(topic=topic, rate=0, count=3000, acks="all",
                                               producer_id="c"), keep_record=True))
    assert store.staged_segments(settings.table_path("acks"))  # waiting for the committer
    with Component(settings, "run"):
        wait_until(lambda: judged(settings, topic, 10000), 300, "10000 writes judged")
    assert store.staged_segments(settings.table_path("acks")) == {}
    found = findings_of(settings, topic)
    assert {r["kind"] for r in found} == {"confirmed"}
    for p in producers:  # every write judged exactly once, none missed
        mine = [r for r in found if r["run_id"] == p.run_id]
        assert expand_rows(mine, "seq") == sorted(seq for seq, *_ in p.record)


SECRET_QUESTIONS = ("/v1/summary", "/v1/findings", "/v1/findings/counts", "/v1/topics",
                    "/v1/partitions", "/v1/producers", "/v1/windows", "/v1/latency",
                    "/v1/quality", "/healthz", "/readyz", "/metrics", "/openapi.json",
                    "/dashboard")


def test_the_service_on_a_bucket_never_shows_the_stores_secret(cluster, s3, s3_settings,
                                                                topic):
    """A whole run with the warehouse in a bucket: the object store's secret access key is
    in no line the service logs, no object it writes to the bucket (tables, their logs,
    staged segments, Spark's checkpoint), no file under its home (status files, spools,
    settings) but the secret's own file, and no answer of its API."""
    secret = s3.secret.encode()
    staged = s3_settings.model_copy(update={"producer": s3_settings.producer.model_copy(
        update={"ledger_commits": "staged"})})
    run_load(staged, LoadSpec(topic=topic, rate=0, count=3000, acks="all"), keep_record=True)
    with Component(s3_settings, "run") as service:
        wait_until(lambda: judged(s3_settings, topic, 3000), 300, "3000 writes judged")
        base = f"http://{s3_settings.api.host}:{s3_settings.api.port}"
        answers = {q: httpx.get(base + q, timeout=30) for q in SECRET_QUESTIONS}
        assert service.stop(timeout=60) == 0
        log = service.output()
    for question, answer in answers.items():
        assert answer.status_code in (200, 503), (question, answer.text[:500])
        assert secret not in answer.content, question
    assert "audit pass " in log  # the service's log, passes and all
    assert s3.secret not in log
    shown = Component(s3_settings, "config", "show")
    assert shown.proc.wait(120) == 0
    assert "secret_access_key_file: " in shown.output() and s3.secret not in shown.output()
    shown.stop()

    bucket = s3_settings.warehouse_uri.removeprefix("s3://").split("/")[0]
    objects = [p for p in (s3.folder / "data" / bucket).rglob("*") if p.is_file()]
    assert any("_checkpoints" in p.parts for p in objects)  # Spark's, in the bucket
    assert any("_delta_log" in p.parts for p in objects)
    secret_file = s3_settings.home_dir / "run.yaml.storage-secret"
    assert secret_file.read_bytes() == secret  # the one place it is written, 0600
    assert secret_file.stat().st_mode & 0o077 == 0
    files = [p for p in s3_settings.home_dir.rglob("*")
             if p.is_file() and not p.name.endswith(".storage-secret")]
    assert any(p.parent.name == "status" for p in files)
    for path in objects + files:
        assert secret not in path.read_bytes(), path
