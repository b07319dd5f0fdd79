import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kafka_audit import __version__
from kafka_audit.app import cli
from kafka_audit.errors import ClusterError
from kafka_audit.settings import Settings, get_settings

from ..support.clean_env import clean_env  # noqa: F401 (autouse)


def one_error_line(capsys) -> str:
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("kafka-audit: ")
    return err.strip()


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"kafka-audit {__version__}\n"


def test_environment_typo_is_one_line_and_exit_2(monkeypatch, capsys):
    monkeypatch.setenv("KAFKA_AUDIT_AUDIT__SETTLE_SECOND", "9")
    assert cli.main(["config", "show"]) == 2
    line = one_error_line(capsys)
    assert "KAFKA_AUDIT_AUDIT__SETTLE_SECOND: unknown setting audit.settle_second" in line
    assert "did you mean KAFKA_AUDIT_AUDIT__SETTLE_SECONDS?" in line


def test_yaml_typo_and_bad_value_are_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    path = tmp_path / "o.yaml"
    path.write_text("audit:\n  settle_secondz: 1\n")
    monkeypatch.setenv("KAFKA_AUDIT_CONFIG", str(path))
    assert cli.main(["config", "show"]) == 2
    assert "audit.settle_secondz in" in one_error_line(capsys)
    get_settings.cache_clear()
    path.write_text("audit:\n  settle_seconds: -3\n")
    assert cli.main(["config", "show"]) == 2
    assert "audit.settle_seconds in" in one_error_line(capsys)


def test_missing_overlay_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KAFKA_AUDIT_CONFIG", str(tmp_path / "missing.yaml"))
    assert cli.main(["cluster", "status"]) == 2  # fails on settings, before any cluster
    assert one_error_line(capsys).endswith("missing.yaml: no such file")


@pytest.mark.parametrize("argv", [["--verbose", "config", "show"], ["config", "show", "-v"]])
def test_verbose_prints_the_traceback_too(monkeypatch, capsys, argv):
    monkeypatch.setenv("KAFKA_AUDIT_AUDITT__SETTLE_SECONDS", "1")
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    assert "ConfigError" in err
    assert err.splitlines()[-1].startswith("kafka-audit: [config] KAFKA_AUDIT_AUDITT__")


def test_other_auditor_errors_exit_2(monkeypatch, capsys):
    def fail(args):
        raise ClusterError("node 2 did not start")

    monkeypatch.setattr(cli, "_setup", fail)
    assert cli.main(["setup"]) == 2
    assert one_error_line(capsys) == "kafka-audit: [cluster] node 2 did not start"


def test_interrupt_exits_130_quietly(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_setup", interrupted)
    try:
        assert cli.main(["setup"]) == 130
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped main()")
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize("argv", [[], ["nope"], ["config"], ["config", "show", "--yaml"]])
def test_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    assert "usage: kafka-audit" in capsys.readouterr().err


@pytest.fixture
def effective(tmp_path, monkeypatch):
    """An overlay and a variable; yields the default broker properties, before them."""
    defaults = Settings().cluster.broker_overrides
    path = tmp_path / "o.yaml"
    path.write_text(yaml.safe_dump({"cluster": {"broker_overrides": {
        "num.io.threads": 8, "sasl.jaas.config": "user=audit password=hunter2"}}}))
    monkeypatch.setenv("KAFKA_AUDIT_CONFIG", str(path))
    monkeypatch.setenv("KAFKA_AUDIT_AUDIT__SETTLE_SECONDS", "7")
    return defaults


def check_effective(data, defaults):
    assert set(data) == set(Settings.model_fields)
    assert data["audit"]["settle_seconds"] == 7 and data["audit"]["interval_seconds"] == 5
    overrides = data["cluster"]["broker_overrides"]
    assert overrides["num.io.threads"] == 8 and overrides["replica.lag.time.max.ms"] == 4000
    assert set(overrides) == set(defaults) | {"sasl.jaas.config"}
    assert {k: v for k, v in overrides.items() if k not in ("num.io.threads", "sasl.jaas.config")} \
        == {k: v for k, v in defaults.items() if k != "num.io.threads"}
    assert overrides["sasl.jaas.config"] == "***"
    assert data["cluster"]["nodes"] == 3 and data["api"]["port"] == 8088


def test_config_show_prints_the_merged_settings_as_yaml(effective, capsys):
    assert cli.main(["config", "show"]) == 0
    out = capsys.readouterr().out
    assert "hunter2" not in out
    check_effective(yaml.safe_load(out), effective)


def test_config_show_json(effective, capsys):
    assert cli.main(["config", "show", "--json"]) == 0
    out = capsys.readouterr().out
    assert "hunter2" not in out
    check_effective(json.loads(out), effective)


def test_console_script_prints_one_line_and_exits_2(tmp_path):
    script = Path(sys.executable).parent / "kafka-audit"
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("KAFKA_AUDIT_")}
    env["KAFKA_AUDIT_CONFIG"] = str(tmp_path / "missing.yaml")
    done = subprocess.run([str(script), "config", "show"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == f"kafka-audit: [config] KAFKA_AUDIT_CONFIG={env['KAFKA_AUDIT_CONFIG']}" \
                          ": no such file\n"


@pytest.mark.parametrize("yaml_text,message", [
    ("profile:\n  bootstrapp: x:1\n",
     "profile.bootstrapp in {file}: unknown setting (did you mean profile.bootstrap?)"),
    ("profile:\n  security_protocol: SASL_SSL\n",
     "profile in {file}: security_protocol SASL_SSL needs a sasl section"),
    ("profile:\n  security_protocol: SASL_SSL\n  sasl: {username: u, password_file: /nope}\n",
     "profile.sasl.password_file: cannot read /nope: No such file or directory"),
    ("profile:\n  security_protocol: SASL_SSL\n  sasl: {username: u, password_env: NOPE_PW}\n",
     "profile.sasl.password_env: the environment variable NOPE_PW is not set"),
    ("profile:\n  security_protocol: BOGUS\n", "profile.security_protocol in {file}"),
])
def test_a_bad_profile_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, yaml_text,
                                               message):
    file = tmp_path / "profile.yaml"
    file.write_text(yaml_text)
    monkeypatch.setenv("KAFKA_AUDIT_CONFIG", str(file))
    monkeypatch.delenv("NOPE_PW", raising=False)
    get_settings.cache_clear()
    try:
        assert cli.main(["check"]) == 2
    finally:
        get_settings.cache_clear()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message.format(file=file) in err[0], err


@pytest.mark.parametrize("argv,says", [
    (["scenario", "run"], "name a scenario"),
    (["scenario", "run", "disk-loss", "no-such"], "no scenario 'no-such'"),
    (["scenario", "run", "all", "--seeds", "0"], "--seeds must be at least 1"),
])
def test_scenario_run_refuses_bad_names_and_seeds_before_any_cluster(argv, says, capsys):
    assert cli.main(argv) == 2
    assert says in one_error_line(capsys)


def test_scenario_list_names_every_scenario(capsys):
    from kafka_audit.scenarios.catalog import SCENARIOS
    from kafka_audit.scenarios.rabbit_scenarios import RABBIT_SCENARIOS

    assert cli.main(["scenario", "list"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines()] == [*SCENARIOS, *RABBIT_SCENARIOS]
    assert all(name.startswith("rabbit-") for name in RABBIT_SCENARIOS)
    assert {"simultaneous-crash", "disk-loss"} <= set(SCENARIOS)
