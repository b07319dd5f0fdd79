"""The service's API in a child process: it serves the settings it was handed (not the
ones its environment would give), stops when the service stops, and a child that dies
is reported to the supervisor, which starts it again."""

import os
import signal
import socket
import threading

import httpx
import pytest

from kafka_audit.app.api_process import start_api_process, supervise_api_process
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.settings import Settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code in (200,
                                                                                         503)
    except httpx.HTTPError:
        return False


def test_the_api_process_serves_its_settings_and_stops_with_the_service(tmp_path):
    port = free_port()
    settings = Settings(home=tmp_path, api={"host": "127.0.0.1", "port": port})
    stop = threading.Event()
    done: list = []
    t = threading.Thread(target=lambda: done.append(supervise_api_process(settings, stop)))
    t.start()
    try:
        wait_until(lambda: healthy(port), 60, "the API process to answer")
        r = httpx.get(f"http://127.0.0.1:{port}/v1/summary", timeout=10)
        assert r.status_code == 200 and r.json()["acked"] == 0  # the empty warehouse it got
    finally:
        stop.set()
        t.join(30)
    assert not t.is_alive() and done == [None]
    wait_until(lambda: not healthy(port), 10, "the server to be gone")


def test_a_dead_api_process_is_reported_to_the_supervisor(tmp_path):
    port = free_port()
    settings = Settings(home=tmp_path, api={"host": "127.0.0.1", "port": port})
    proc = start_api_process(settings)
    try:
        wait_until(lambda: healthy(port), 60, "the API process to answer")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    # the supervising loop raises when its child exits on its own
    busy = socket.socket()
    busy.bind(("127.0.0.1", port))  # the port taken: the next child cannot serve
    busy.listen()
    try:
        with pytest.raises(RuntimeError, match="the API process exited with code"):
            supervise_api_process(settings, threading.Event())
    finally:
        busy.close()


def test_the_suspicion_marker_runs_in_a_child_process_and_stops_with_the_service(tmp_path):
    """The marker's own process: it rounds (its status file says so, written by another
    pid than this one) and stops when the service does."""
    import json
    import os

    from kafka_audit.app.api_process import supervise_child
    from kafka_audit.app.marker_process import MODULE

    settings = Settings(home=tmp_path)
    stop = threading.Event()
    done: list = []
    t = threading.Thread(target=lambda: done.append(supervise_child(
        settings, stop, MODULE, "the suspicion marker process")))
    t.start()
    status = settings.home_dir / "status" / "suspicions.json"
    try:
        seen = wait_until(lambda: status.exists() and json.loads(status.read_text()), 60,
                          "the marker's status file")
        assert seen.get("pid") not in (None, os.getpid()), seen
    finally:
        stop.set()
        t.join(30)
    assert not t.is_alive() and done == [None]
