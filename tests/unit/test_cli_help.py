"""The command line as people expect it: every command and option says what it does in
text written for a terminal (no reStructuredText markup), ``python -m kafka_audit`` is the
same command, and the exit codes ``--help`` prints are the code's and the docs' table's."""

import argparse
import re
import subprocess
import sys
from pathlib import Path

from kafka_audit import __version__
from kafka_audit.app.cli import EXIT_CODES, build_parser

DOCS = Path(__file__).resolve().parents[2] / "docs" / "reference" / "cli.md"
MARKUP = re.compile(r"``|:class:|:func:|:data:|:meth:")


def parsers(p: argparse.ArgumentParser, name: str = "kafka-audit"):
    yield name, p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, child in action.choices.items():
                yield from parsers(child, f"{name} {sub}")


def test_every_command_and_option_has_help_without_markup():
    seen = 0
    for name, p in parsers(build_parser()):
        assert not MARKUP.search(p.description or ""), name
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:  # each subcommand's line
                    assert choice.help and not MARKUP.search(choice.help), (name, choice.dest)
                continue
            seen += 1
            assert action.help and action.help.strip(), (name, action.option_strings or
                                                         action.dest)
            assert not MARKUP.search(action.help), (name, action.dest)
    assert seen > 50  # the walk reached the subcommands' options


def test_python_dash_m_is_the_same_command():
    version = subprocess.run([sys.executable, "-m", "kafka_audit", "--version"],
                             capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.strip() == f"kafka-audit {__version__}"
    bad = subprocess.run([sys.executable, "-m", "kafka_audit", "no-such-command"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def test_the_exit_codes_help_prints_are_the_codes_and_the_docs_table():
    text = build_parser().format_help()
    listed = {int(c) for c in re.findall(r"^\s+(\d+)  \S", text.split("exit codes:")[1], re.M)}
    assert listed == set(EXIT_CODES) == {0, 1, 2, 3, 130}
    table = DOCS.read_text().split("## Exit codes")[1]
    assert {int(c) for c in re.findall(r"^\| (\d+) \|", table, re.M)} == set(EXIT_CODES)


def test_every_subcommand_is_in_the_docs_table():
    commands = next(a for a in build_parser()._actions
                    if isinstance(a, argparse._SubParsersAction)).choices
    text = DOCS.read_text().split("## Exit codes")[0]
    for name in commands:
        assert f"| `{name}" in text, name
