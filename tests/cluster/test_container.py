"""The container image (``deploy/Containerfile``) as an operator runs it: built here on a
Debian base made from Debian's packages, run with podman beside the local test cluster.

In the container, ``kafka-audit check`` passes and ``kafka-audit run`` (the image's
command, as its unprivileged user, its data on a volume) finds the losses of an ``acks=1``
leader kill equal to a full read, served by its own REST API beside the dashboard;
SIGTERM stops it within 30 s. Nothing is fetched or compiled when it starts: the image
carries no compiler and its jar cache is read-only to its user.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pyarrow.compute as pc
import pytest

from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.scenarios.groundtruth import acked_but_missing, full_read_stamps
from kafka_audit.scenarios.harness import fetch_lost, lost_messages, settings_file
from kafka_audit.store import read_table

from ..support import container
from ..support.leader_kill import kill_the_leader
from ..support.rest import summary

DATA = Path("/var/lib/kafka-audit")  # the image's volume


@pytest.fixture(scope="module")
def image():
    container.need_tools()
    t0 = time.monotonic()
    name = container.build_image()
    print(f"image {name} built in {time.monotonic() - t0:.0f} s, "
          f"{container.image_size(name) / 1e6:.0f} MB")
    return name


def acked(settings, topic: str) -> int:
    acks = read_table(settings.table_path("acks"), "acks", ["topic", "count"])
    return pc.sum(acks.filter(pc.equal(acks["topic"], topic))["count"]).as_py() or 0


def test_the_image_checks_audits_a_fault_and_stops_on_sigterm(image, cluster, settings,
                                                               topic):
    home = settings.home_dir
    home.mkdir(parents=True, exist_ok=True)
    # what the container sees: the same settings, its data on the volume
    conf = settings_file(settings.model_copy(update={"home": DATA}), home / "settings.yaml")
    os.chown(home, container.UID, container.UID)  # the image's user owns its volume
    mounts = [(home, str(DATA), "rw"),
              # the watcher tails the test cluster's metadata log, read-only
              *((d, d, "ro") for d in settings.watch.metadata_log_dirs)]
    flags = [*container.run_flags(*mounts), "-e", f"KAFKA_AUDIT_CONFIG={DATA / conf.name}"]

    checker = f"kafka-audit-check-{uuid.uuid4().hex[:8]}"
    try:  # named: a podman client timed out leaves no container behind
        check = container.podman("run", "--rm", "--name", checker, *flags, image, "check",
                                 timeout=300, check=False)
    finally:
        container.podman("rm", "-f", checker, check=False)
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    print(check.stdout[-2000:])

    name = f"kafka-audit-test-{uuid.uuid4().hex[:8]}"
    log_path = home.parent / f"{name}.log"
    log = log_path.open("w")
    # its command: kafka-audit run
    service = subprocess.Popen([*container.PODMAN, "run", "--name", name, *flags, image],
                               stdout=log, stderr=subprocess.STDOUT)
    base = f"http://{settings.api.host}:{settings.api.port}"
    try:
        # (a container that exits stops the wait at once: its log says why)
        wait_until(lambda: service.poll() is not None or httpx.get(
            f"{base}/healthz", timeout=10).status_code == 200, 300,
            "the container's REST API to answer")
        assert service.poll() is None, log_path.read_text()[-3000:]
        # the fault, from this host: a producer here writes its ledger onto the volume
        # (world-writable files, so that the container's user may compact them)
        old = os.umask(0)
        try:
            p, _ = kill_the_leader(settings, cluster, topic)
        finally:
            os.umask(old)
        truth = acked_but_missing(p.record, p.producer_id, p.run_id,
                                  full_read_stamps(cluster.bootstrap, topic, timeout=60))
        assert truth, "acks=1 with a leader SIGKILL mid-stream is expected to lose writes"
        total = acked(settings, topic)
        wait_until(lambda: (s := summary(settings, topic)) is not None
                   and s["acked"] == total and s["pending"] == 0, 600,
                   f"all {total} delivery reports judged by the container")
        # the container's own API serves the losses: exactly the full read's
        assert lost_messages(fetch_lost(base, topic)) == truth
        print(f"{len(truth)} of {total} delivery reports lost, as a full read finds")
        # the dashboard, and plotly.js from what the image keeps of plotly
        assert httpx.get(f"{base}/dashboard", timeout=10).status_code == 200
        plotly_js = httpx.get(f"{base}/dashboard/static/plotly.min.js", timeout=30)
        assert plotly_js.status_code == 200 and b"plotly" in plotly_js.content[:2000], \
            plotly_js.status_code

        t0 = time.monotonic()
        container.podman("kill", "--signal", "TERM", name)
        code = service.wait(60)
        stopped_in = time.monotonic() - t0
    finally:
        if service.poll() is None:
            service.kill()
        container.podman("rm", "-f", name, check=False)
        log.close()
    output = log_path.read_text()
    print(f"container stopped in {stopped_in:.1f} s with exit code {code}")
    assert code == 0 and stopped_in < 30, (code, stopped_in, output[-3000:])
    # it ran as the image's user and built nothing at start
    assert "compiling" not in output and "building" not in output, output[-3000:]
    assert {p.stat().st_uid for p in (home / "warehouse" / "findings").iterdir()} \
        == {container.UID}
