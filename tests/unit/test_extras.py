"""The extras of pyproject.toml and what the CLI says when one is missing agree.

A plain install is the ground floor; each part's libraries come with an extra. The CLI
names the extra a missing module belongs to (``EXTRA_OF_MODULE``): every module it names
must really be installed by that extra, and every library an extra lists must be named,
or a user missing it gets a traceback instead of the install line.
"""

import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from kafka_audit.app import cli

from ..support.extras_env import closure

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
PARTS = ("producer", "api", "spark", "rabbitmq")


def _names(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in requirements}


def test_every_module_named_is_installed_by_its_extra_and_not_by_the_plain_install():
    providers = packages_distributions()
    extras = PROJECT["optional-dependencies"]
    for module, extra in cli.EXTRA_OF_MODULE.items():
        dists = {canonicalize_name(d) for d in providers[module]}
        assert dists & set(closure(extras[extra], set())), (module, extra, dists)
        assert not dists & set(closure(PROJECT["dependencies"], set())), module


def test_every_library_of_an_extra_is_named_by_a_module():
    providers = packages_distributions()
    named = {canonicalize_name(d) for module in cli.EXTRA_OF_MODULE for d in providers[module]}
    for extra in PARTS:  # (a library of two extras, confluent-kafka, names the slimmer)
        for dist in _names(PROJECT["optional-dependencies"][extra]):
            assert dist in named, (dist, extra)


def test_all_is_every_part_and_the_ground_floor_has_no_part():
    assert PROJECT["optional-dependencies"]["all"] == [f"kafka-audit[{','.join(PARTS)}]"]
    ground = _names(PROJECT["dependencies"])
    for extra in PARTS:
        assert not ground & _names(PROJECT["optional-dependencies"][extra]), extra
    assert {"pyspark", "great-expectations", "fastapi", "confluent-kafka"}.isdisjoint(ground)


def test_a_missing_extra_is_one_line_naming_it(capsys, monkeypatch):
    def serve(args):
        raise ModuleNotFoundError("No module named 'uvicorn'", name="uvicorn")

    monkeypatch.setattr(cli, "_serve", serve)
    assert cli.main(["serve"]) == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert err == ("kafka-audit: kafka-audit serve needs uvicorn, which this install lacks: "
                   "pip install 'kafka-audit[api]' (or [all], the whole auditor)\n")


def test_a_missing_module_of_no_extra_stays_an_error_of_its_own(capsys, monkeypatch):
    def serve(args):
        raise ModuleNotFoundError("No module named 'nothing_of_ours'", name="nothing_of_ours")

    monkeypatch.setattr(cli, "_serve", serve)
    assert cli.main(["serve"]) == cli.EXIT_ERROR
    assert "ModuleNotFoundError: No module named 'nothing_of_ours'" in capsys.readouterr().err
