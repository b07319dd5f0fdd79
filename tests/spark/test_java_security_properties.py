"""The checked-in list of the Java client's SSL and SASL properties (the secret rule's unit
test runs over it) is the one the pinned kafka-clients jar gives: a JVM, no broker."""

import shutil

import pytest

from tests.support.java_security_properties import CHECKED_IN, java_security_properties


@pytest.mark.skipif(shutil.which("javac") is None, reason="the JDK's javac is not installed")
def test_the_checked_in_list_is_the_pinned_clients():
    assert java_security_properties() == CHECKED_IN.read_text(), (
        "regenerate it: .venv/bin/python -m tests.support.java_security_properties > "
        f"{CHECKED_IN}")
