"""``kafka-audit token new|hash``: a token is printed once, the settings hold its hash."""

import io

import yaml

from kafka_audit.app.cli import main
from kafka_audit.auditor_api.auth import hash_token
from kafka_audit.settings import Settings


def test_token_new_prints_a_token_and_a_settings_entry_with_its_hash(capsys):
    assert main(["token", "new", "--name", "grafana"]) == 0
    lines = capsys.readouterr().out.splitlines()
    token = lines[1].strip()
    entry = yaml.safe_load(lines[3].strip().removeprefix("- "))
    assert token.startswith("kaudit_") and len(token) > 40
    assert entry == {"name": "grafana", "hash": hash_token(token), "role": "read"}
    assert token not in lines[3]
    assert Settings(api={"tokens": [entry]}).api.tokens[0].hash == hash_token(token)


def test_token_hash_reads_the_token_from_stdin(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("kaudit_secret\n"))
    assert main(["token", "hash"]) == 0
    assert capsys.readouterr().out.strip() == hash_token("kaudit_secret")
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["token", "hash"]) == 2
