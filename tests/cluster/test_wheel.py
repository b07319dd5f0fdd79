"""Installable as a package: a wheel of the project, installed into a fresh virtual
environment outside the checkout, sets itself up and audits from any directory.

The wheel is built from the checkout (``pip wheel . --no-deps``) and installed with
``--no-deps`` into a new venv whose third-party packages come from the checkout's venv
(a ``.pth`` line: nothing is downloaded again); the project itself comes only from the
wheel. Commands run from an empty folder, with the per-user cache and data folders
pointed at the test's own (the jar cache pre-seeded with the pinned Maven jars, so
nothing is fetched twice; the project's Java code is compiled from the wheel's sources).
"""

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

from kafka_audit.jars import KAFKA_VERSIONS, jar_cache, tools_classpath
from kafka_audit.scenarios.harness import settings_file

from ..support.extras_env import build_wheel


def test_the_wheel_sets_itself_up_and_runs_from_any_directory(cluster, settings, tmp_path):
    wheel = build_wheel(tmp_path / "dist")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    packages = subprocess.run([str(py), "-c", "import site; print(site.getsitepackages()[0])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    Path(packages, "checkout-deps.pth").write_text(site.getsitepackages()[0] + "\n")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
                   check=True, timeout=300)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    xdg_cache, xdg_data = tmp_path / "xdg-cache", tmp_path / "xdg-data"
    seeded = xdg_cache / "kafka-audit" / "jars"
    tools_classpath()  # the newest Kafka's jars, which the Java tools run on: fetched here
    for name in ("kafka", "spark", f"kafka-{KAFKA_VERSIONS[-1]}"):  # not downloaded twice
        shutil.copytree(jar_cache() / name, seeded / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_AUDIT_")}
    env.update(XDG_CACHE_HOME=str(xdg_cache), XDG_DATA_HOME=str(xdg_data), HOME=str(tmp_path),
               PATH=f"{venv / 'bin'}:{env['PATH']}")
    exe = str(venv / "bin" / "kafka-audit")

    def run(*args, extra=None):
        return subprocess.run([exe, *args], cwd=elsewhere, env={**env, **(extra or {})},
                              capture_output=True, text=True, timeout=600)

    where = subprocess.run([str(py), "-c", "import kafka_audit; print(kafka_audit.__file__)"],
                           cwd=elsewhere, env=env, capture_output=True, text=True)
    assert where.stdout.strip().startswith(packages), where.stdout  # the wheel, not the checkout
    assert run("--help").returncode == 0
    dash_m = subprocess.run([str(py), "-m", "kafka_audit", "--version"], cwd=elsewhere, env=env,
                            capture_output=True, text=True, timeout=60)
    assert dash_m.returncode == 0 and dash_m.stdout.startswith("kafka-audit "), dash_m.stderr
    deploy = Path(packages) / "kafka_audit" / "deploy"  # what an operator deploys with
    for name in ("kafka-audit.service", "prometheus-alerts.yml", "sql/TABLES.md",
                 "sql/setup_duckdb.sql", "sql/loss_by_topic_and_day.sql"):
        assert (deploy / name).is_file(), name
    setup = run("setup")
    assert setup.returncode == 0, setup.stderr
    assert (seeded / "native" / "native.jar").is_file()  # compiled from the wheel's Java code
    shown = run("config", "show", "--json")
    assert shown.returncode == 0 and f'"home": "{xdg_data / "kafka-audit"}"' in shown.stdout
    # one real command against the local cluster: the preflight (librdkafka and Java probe)
    check = run("check", "--json", extra={
        "KAFKA_AUDIT_CONFIG": str(settings_file(settings, tmp_path / "c.yaml"))})
    assert check.returncode == 0, check.stderr
    assert '"kafka_metadata_version": "4.1' in check.stdout
    # nothing was put in the current directory or inside the installed package
    assert list(elsewhere.iterdir()) == []
    installed = Path(packages) / "kafka_audit"
    assert not [p for p in installed.rglob("*") if p.suffix in (".jar", ".class")
                or ".cache" in p.parts]
