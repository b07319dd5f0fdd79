"""After a real ``acks=1`` leader kill, its findings checked as the object-store one's
(``test_faults.py``): the REST API over real HTTP with a bearer token,
against the tables the project's own producer, watcher, consume and audit jobs wrote,
and the dashboard in headless Chromium (Debian's ``chromium``, installed by ``dev.sh``).

The losses the API serves (by cursor), the topic and producer totals, each partition's
timeline and the Prometheus counter all equal the ground truth (a full read); the
dashboard, opened with the token in its URL fragment, shows every lost write next to
the leader change that lost it, and its screenshot is kept in ``var/artifacts/``.
"""

import re
import shutil
import subprocess
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from kafka_audit.auditor_api.auth import hash_token, new_token
from kafka_audit.scenarios.harness import (
    ApiServer,
    fetch_lost,
    lost_messages,
)
from kafka_audit.settings import Settings

from ..support.leader_kill import (
    assert_the_leader_kill_findings,
    audited_losses,
    kill_the_leader,
    mark_suspicions,
    watching,
)

ARTIFACTS = Path(__file__).resolve().parents[2] / "var" / "artifacts"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run", "--hide-scrollbars",
                  "--window-size=1400,2600", "--virtual-time-budget=30000"]


def chromium(profile: Path, *args: str) -> str:
    exe = shutil.which("chromium")
    assert exe, "Debian's chromium is missing: `bash dev.sh setup` installs it"
    done = subprocess.run([exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_dashboard_shows_the_lost_writes_of_a_leader_kill(cluster, spark, settings, topic,
                                                          tmp_path, capfd):
    token = new_token()
    settings = Settings(**{**settings.model_dump(), "api": {
        **settings.api.model_dump(), "tokens": [{"name": "test", "hash": hash_token(token)}]}})
    with watching(settings):
        p, killed = kill_the_leader(settings, cluster, topic)
    truth = audited_losses(spark, settings, cluster, topic, p, read_timeout=300)
    assert_the_leader_kill_findings(settings, cluster, topic, p, truth, killed)
    mark_suspicions(settings)  # the service's suspicion marker, once after the fault
    by_partition: dict[int, int] = {}
    for part, _offset, _seq in truth:
        by_partition[part] = by_partition.get(part, 0) + 1

    with ApiServer(settings) as api:
        url = api.base_url
        # auth over real HTTP: none, wrong, right; health open
        assert httpx.get(f"{url}/v1/topics").status_code == 401
        wrong = httpx.get(f"{url}/v1/topics", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 403 and wrong.headers["content-type"] == \
            "application/problem+json"
        assert httpx.get(f"{url}/healthz").status_code == 200
        http = httpx.Client(base_url=url, timeout=30,
                            headers={"Authorization": f"Bearer {token}"})
        # the losses, page by page (cursor), equal the ground truth write for write
        assert lost_messages(fetch_lost(url, topic, token=token)) == truth
        t = http.get(f"/v1/topics/{topic}").json()
        assert (t["lost"], t["pending"], t["acked"]) == (len(truth), 0, p.acked + p.failed)
        assert {d["acks"] for d in t["durability"]} == {"1"}
        assert {x["partition"]: x["lost"] for x in t["partitions"] if x["lost"]} == by_partition
        prod = {x["producer_id"]: x for x in http.get("/v1/producers",
                                                      params={"topic": topic}).json()}
        assert prod[p.producer_id]["lost"] == len(truth)
        assert prod[p.producer_id]["violations"] == 0  # acks=1 allows it: reported, allowed
        assert prod[p.producer_id]["ack_latency_p99_ms"] is not None
        for part, n in by_partition.items():
            tl = http.get(f"/v1/partitions/{topic}/{part}/timeline").json()
            losses = [f for f in tl["findings"] if f["kind"] in ("lost", "lost_after_seen")]
            assert sum(f["count"] for f in losses) == n
            changes = {c["time"]: c for c in tl["leader_changes"]}
            # each loss names a recorded leader change that lost it: the kill's, or (acks=1
            # loses writes at any leader change) the preferred leader's return after it
            by = {changes[f["leader_change"]]["previous_leader"] for f in losses}
            assert by <= {killed, *(c["leader"] for c in changes.values()
                                    if c["previous_leader"] == killed)}, by
            if part == 0:  # its followers were frozen while the leader was killed
                assert killed in by, by
        scrape = http.get("/metrics").text
        assert (f'kafka_audit_lost_writes_total{{system="kafka",topic="{topic}"}} '
                f'{float(len(truth))}') in scrape
        counts = {(x.labels["route"], x.labels["status"]): x.value
                  for f in text_string_to_metric_families(scrape) for x in f.samples
                  if x.name == "kafka_audit_api_request_seconds_count"}
        assert counts[("/v1/topics/{topic}", "200")] >= 1, counts
        assert counts[("unmatched", "401")] >= 1  # refused before routing

        # the dashboard, as a person opens it (the token in the fragment: never sent)
        page = f"{api.dashboard_url}#token={token}&topic={topic}"
        dom = chromium(tmp_path / "profile-dom", "--dump-dom", page)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / f"dashboard-{topic}.png"
        chromium(tmp_path / "profile-shot", f"--screenshot={shot}", page)
    assert 'data-ready="yes"' in dom, dom[-3000:]
    shown = {int(m[1]): int(m[2]) for m in re.finditer(
        r'data-partition="(\d+)"[^>]*>.*?data-lost="(\d+)"', dom, re.S)}
    assert {k: v for k, v in shown.items() if v} == by_partition
    assert f"lost writes ({len(truth):,})" in dom  # the chart's trace of lost writes
    assert f"leader {killed} →" in dom  # and the leader change that lost them
    # suspected at the change: exactly the lost writes (the plugin names the broker)
    assert f"suspected at the leader change ({len(truth):,})" in dom
    assert shot.stat().st_size > 20_000
    shutil.copy(shot, tmp_path / shot.name)
    with capfd.disabled():
        print(f"\ndashboard screenshot: {shot}")
    # no token in any log line of the run
    out, err = capfd.readouterr()
    assert token not in out + err
