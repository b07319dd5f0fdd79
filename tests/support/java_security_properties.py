"""The Java client's SSL and SASL properties with their types, from the kafka-clients jar the
project fetches (``deploy/maven/kafka-broker.pom.xml``), for the secret rule's test.

The client's own ``ConfigDef`` (``SslConfigs.addClientSslSupport``,
``SaslConfigs.addClientSaslSupport``) says which properties it types ``PASSWORD`` (it prints
those as ``[hidden]``). Regenerate the checked-in list after changing the pinned Kafka::

    .venv/bin/python -m tests.support.java_security_properties \
        > tests/unit/data/java_security_properties.tsv

``tests/spark/test_java_security_properties.py`` checks that the list is current.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["java_security_properties", "read_checked_in", "CHECKED_IN"]

CHECKED_IN = Path(__file__).resolve().parents[1] / "unit" / "data" / "java_security_properties.tsv"

_SOURCE = """
import java.util.Map;
import java.util.TreeMap;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.SaslConfigs;
import org.apache.kafka.common.config.SslConfigs;
import org.apache.kafka.common.utils.AppInfoParser;

public class JavaSecurityProperties {
  public static void main(String[] args) {
    ConfigDef def = new ConfigDef();
    SslConfigs.addClientSslSupport(def);
    SaslConfigs.addClientSaslSupport(def);
    System.out.println("# kafka-clients " + AppInfoParser.getVersion()
        + ": SslConfigs/SaslConfigs client properties and their ConfigDef types");
    for (Map.Entry<String, ConfigDef.ConfigKey> e : new TreeMap<>(def.configKeys()).entrySet())
      System.out.println(e.getKey() + "\\t" + e.getValue().type);
  }
}
"""


def java_security_properties() -> str:
    """The list as the pinned kafka-clients jar gives it (javac and java; the jars fetched)."""
    from kafka_audit.jars import broker_classpath

    cp = broker_classpath()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "JavaSecurityProperties.java"
        src.write_text(_SOURCE)
        subprocess.run(["javac", "-cp", cp, "-d", tmp, str(src)], check=True,
                       capture_output=True, text=True)
        done = subprocess.run(["java", "-cp", f"{tmp}:{cp}", "JavaSecurityProperties"],
                              check=True, capture_output=True, text=True)
    return done.stdout


def read_checked_in() -> dict[str, str]:
    """The checked-in list: property name -> its ConfigDef type (PASSWORD, STRING, ...)."""
    out = {}
    for line in CHECKED_IN.read_text().splitlines():
        if line and not line.startswith("#"):
            name, kind = line.split("\t")
            out[name] = kind
    return out


if __name__ == "__main__":
    sys.stdout.write(java_security_properties())
