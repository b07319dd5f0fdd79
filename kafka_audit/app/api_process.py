"""The REST API of ``kafka-audit run`` in a process of its own.

In one process with the audit loop, the consume stream and the watcher, the API's
requests waited for the interpreter lock whenever an audit pass ran its rules: the soak
measured ``GET /v1/summary`` at 0.3-3 s while the same summary, computed beside the
running service in another process, took 1-40 ms (bench/HISTORY.md, the one-hour soaks). The
service (``kafka_audit/app/service.py``) starts this module as a child process, hands it
its settings through a pipe (never on disk, never in its command line; without the Kafka
secrets, which it has no use for: :func:`child_settings`, :func:`child_environment`),
restarts it if it dies, and stops it with SIGTERM. The child dies with the
thread that started it (``PR_SET_PDEATHSIG``), so a killed service leaves no server
holding the port.
"""

from __future__ import annotations

import ctypes
import logging
import os
import pickle
import signal
import subprocess
import sys
import threading

__all__ = ["MODULE", "start_api_process", "supervise_api_process", "start_child", "supervise_child",
           "child_logging", "main", "child_settings", "child_environment"]

log = logging.getLogger("kafka_audit.app.service")

MODULE = "kafka_audit.app.api_process"

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the stop path still terminates it
        pass


def start_api_process(settings) -> subprocess.Popen:
    """The API server as a child process serving ``settings``; its output goes where this
    process's goes, formatted as this process formats its log (``kafka-audit``'s
    ``--log-json`` included)."""
    return start_child(settings, MODULE)


def start_child(settings, module: str) -> subprocess.Popen:
    """``python -m module`` as a child process, its settings (:func:`child_settings`) and
    this process's log formatter handed over through its standard input."""
    from kafka_audit.app.memstats import configure_allocators

    env = child_environment(settings)
    configure_allocators(settings.steady, env)
    proc = subprocess.Popen([sys.executable, "-m", module],
                            stdin=subprocess.PIPE, preexec_fn=_die_with_parent, env=env)
    assert proc.stdin is not None
    proc.stdin.write(pickle.dumps((child_settings(settings), _own_formatter())))
    proc.stdin.close()
    return proc


def child_settings(settings):
    """``settings`` without a Kafka or RabbitMQ secret, for the API process: it never talks
    to either. The profile's secrets go (:meth:`ProfileSettings.without_secrets`), the
    RabbitMQ password, and any secret property of the local cluster's brokers or of Spark
    (a JAAS config)."""
    from pydantic import SecretStr

    from kafka_audit.redact import without_secret_names as keep

    return settings.model_copy(update={
        "profile": settings.profile.without_secrets(),
        "rabbitmq": settings.rabbitmq.model_copy(update={"password": SecretStr("")}),
        "cluster": settings.cluster.model_copy(
            update={"broker_overrides": keep(settings.cluster.broker_overrides)}),
        "spark": settings.spark.model_copy(update={"properties": keep(settings.spark.properties)})})


def child_environment(settings, environ=None) -> dict[str, str]:
    """This process's environment for the API process, without the variables that hold
    Kafka or RabbitMQ secrets: those the profile names (``password_env``,
    ``key_password_env``), every ``KAFKA_AUDIT_PROFILE__*`` and ``KAFKA_AUDIT_RABBITMQ__*``
    setting (the child gets its settings through the pipe)."""
    from kafka_audit.settings import ENV_DELIMITER, ENV_PREFIX

    environ = os.environ if environ is None else environ
    drop = set(settings.profile.secret_environment())
    sections = tuple(f"{ENV_PREFIX}{name}{ENV_DELIMITER}" for name in ("PROFILE", "RABBITMQ"))
    return {k: v for k, v in environ.items()
            if k not in drop and not k.upper().startswith(sections)}


def _own_formatter() -> logging.Formatter | None:
    """The formatter ``kafka-audit``'s CLI gave the root logger (plain lines or JSON lines),
    if it did; another (a test runner's) stays in this process."""
    from kafka_audit.log_format import JsonLines

    return next((h.formatter for h in logging.getLogger().handlers
                 if type(h.formatter) in (logging.Formatter, JsonLines)), None)


def supervise_api_process(settings, stop: threading.Event, stop_seconds: float = 10) -> None:
    """Run the API process until ``stop``; raise if it exits on its own (the service's
    supervisor then starts it again after its back-off)."""
    supervise_child(settings, stop, MODULE, "the API process", stop_seconds)


def supervise_child(settings, stop: threading.Event, module: str, name: str,
                    stop_seconds: float = 10) -> None:
    """Run the child process ``module`` (:func:`start_child`) until ``stop``, then stop it
    with SIGTERM (killed after ``stop_seconds``); raise if it exits on its own."""
    proc = start_child(settings, module)
    try:
        while not stop.wait(0.5):
            code = proc.poll()
            if code is not None:
                raise RuntimeError(f"{name} exited with code {code}")
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(stop_seconds)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop in %.0fs: killed", name, stop_seconds)
                proc.kill()
                proc.wait()


def child_logging(formatter: logging.Formatter | None, level: int = logging.WARNING) -> None:
    """A child process's log: one handler on standard error in the parent's format,
    secrets scrubbed, at ``level``."""
    from kafka_audit.redact import ScrubFilter

    handler = logging.StreamHandler()
    if formatter is not None:
        handler.setFormatter(formatter)
    handler.addFilter(ScrubFilter())
    logging.getLogger().handlers[:] = [handler]
    logging.getLogger().setLevel(level)


def main() -> int:
    import uvicorn

    from kafka_audit.app.memstats import watch_memory
    from kafka_audit.auditor_api.main import create_app
    from kafka_audit.auditor_api.server import uvicorn_config
    from kafka_audit.errors import ConfigError

    settings, formatter = pickle.load(sys.stdin.buffer)
    child_logging(formatter)
    logging.getLogger("kafka_audit.memory").setLevel(logging.INFO)
    for noisy in ("uvicorn.error", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    watch_memory(settings.steady.trim_every_seconds, settings.service.memory_log_seconds,
                 threading.Event(), "api")
    try:  # refused open beyond loopback, TLS files that do not load: one line, exit 2
        config = uvicorn_config(create_app(settings), settings, log_config=None,
                                access_log=False)
    except ConfigError as exc:
        log.error("the API cannot start: %s", exc.message)
        return 2
    server = uvicorn.Server(config)
    server.run()  # SIGTERM: uvicorn finishes the requests in flight and returns
    return 0 if server.started else 1


if __name__ == "__main__":
    sys.exit(main())
