"""What is never printed: the one rule for secrets, by property or field name.

A *secret* is a value that grants access: a password or passphrase, a private key, a
client secret, a token, a JAAS configuration (it carries a password). The rule tells one
from its name alone, so it covers librdkafka's and the Java client's properties, the
settings' own fields (``profile.sasl.password``) and free dicts of properties
(``profile.librdkafka``, ``profile.java``, ``cluster.broker_overrides``) alike. A name is
split into words at ``.``, ``_`` and ``-`` (case does not matter); it is a secret when

* a word is ``password``, ``passwd``, ``passphrase``, ``secret``, ``token`` or ``jaas``
  (or their plurals): ``sasl.password``, ``ssl.keystore.password``,
  ``sasl.oauthbearer.client.secret``, ``sasl.jaas.config``, ``session_token``;
* it ends with the word ``key``, or ``key`` then ``pem``: a key given inline
  (``ssl.keystore.key``, ``ssl_key``, ``ssl.key.pem``,
  ``sasl.oauthbearer.assertion.private.key.pem``);
* it is librdkafka's ``sasl.oauthbearer.config`` (the unsecured JWT's principal and
  extensions),

unless its last word says *where* the secret is rather than what it is: ``env`` (the
name of an environment variable), ``file``, ``location``, ``path`` (a file), ``url`` (an
endpoint) or ``cb`` (a callback). Those, usernames, mechanisms, protocols and public
certificates (``ssl.certificate.pem``, ``ssl.ca.pem``, ``ssl.keystore.certificate.chain``)
print as they are, because they are what an operator checks. Unset values (None) print
as None.

Two value checks back the names up: a PEM private key block, and a URL with a password
in it (``https://user:pass@host``), are hidden whatever property holds them.

``tests/unit/test_redact.py`` runs the rule over every property librdkafka lists and over
the Java client's SSL and SASL properties (``tests/unit/data/java_security_properties.tsv``).
It is used by ``kafka-audit config show`` (:func:`redacted`), settings errors
(``settings.describe_validation_error``), any client config shown (:func:`redact_config`),
Spark's plans and errors (:data:`SPARK_REDACTION_REGEX`; Java's regex engine reads it as
Python's does), status files, the service's log and the CLI's error line (:func:`scrub`),
and by anything else that shows settings (:func:`redacted`).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, SecretBytes, SecretStr

__all__ = ["REDACTED", "SECRET_NAME", "SECRET_NAME_PATTERN", "SPARK_REDACTION_REGEX",
           "is_secret_name", "without_secret_names",
           "redact_config", "redacted", "scrub", "remember_secret", "ScrubFilter"]

REDACTED = "***"

_SEP = r"[._-]"
#: the rule, as one regular expression on a name, in the syntax Python and Java share
SECRET_NAME_PATTERN = (
    rf"(?i)^(?!.*(?:^|{_SEP})(?:env|file|location|path|url|cb)$)"  # where, not what
    rf"(?:.*(?:^|{_SEP})(?:passwords?|passwd|passphrases?|secrets?|tokens?|jaas)(?:{_SEP}|$)"
    rf"|(?:.*{_SEP})?key(?:{_SEP}pem)?$"  # a key inline
    rf"|(?:.*{_SEP})?oauthbearer{_SEP}config$)")
SECRET_NAME = re.compile(SECRET_NAME_PATTERN)
#: Spark's ``spark.sql.redaction.options.regex``: Spark hides an option's value when this
#: finds a match in its key or its value; ``url`` is Spark's own default (JDBC URLs)
SPARK_REDACTION_REGEX = SECRET_NAME_PATTERN + "|url"

#: values hidden whatever their name: a private key's PEM block, a URL's password
_SECRET_VALUE = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----|://[^/\s:@]*:[^/\s@]+@")


def is_secret_name(name: str) -> bool:
    """Whether a property or field called ``name`` holds a secret (the module's rule)."""
    return SECRET_NAME.search(str(name)) is not None


def without_secret_names(props: Mapping[str, Any]) -> dict[str, Any]:
    """``props`` without the properties whose names say they hold a secret."""
    return {k: v for k, v in props.items() if not is_secret_name(k)}


def _secret_value(value: Any) -> bool:
    return isinstance(value, str) and _SECRET_VALUE.search(value) is not None


def redact_config(conf: Mapping[str, Any]) -> dict[str, Any]:
    """A client config (librdkafka properties, Spark's ``kafka.*`` options) fit to print:
    secret values replaced by ``***``."""
    return {k: REDACTED if v is not None and (is_secret_name(k) or _secret_value(v)) else v
            for k, v in conf.items()}


def redacted(value: Any, name: str = "") -> Any:
    """``value`` (a settings model, or part of one) as plain data to print, secrets as
    ``***``: a field or dict key named as a secret, a ``SecretStr``/``SecretBytes``, a
    value that is a private key. None stays None: an unset secret is not one."""
    if value is None:
        return None
    if (name and is_secret_name(name)) or isinstance(value, SecretStr | SecretBytes) \
            or _secret_value(value):
        return REDACTED
    if isinstance(value, BaseModel):
        return {k: redacted(getattr(value, k), k) for k in type(value).model_fields}
    if isinstance(value, Mapping):
        return {str(k): redacted(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [redacted(v) for v in value]
    if isinstance(value, str | int | float | bool):
        return value
    return str(value)


# ---- free text: errors, status files, log lines -------------------------------------------

#: secret values resolved in this process (passwords read from the environment or files,
#: inline keys): :func:`scrub` hides them wherever they appear in a text
_known: set[str] = set()
_known_lock = threading.Lock()
_MIN_KNOWN = 6  # shorter values would hide ordinary words; their names still hide them


def remember_secret(value: str | None) -> str | None:
    """Note a secret value this process resolved, so that :func:`scrub` hides it in any
    text; returns it unchanged."""
    if value and len(value) >= _MIN_KNOWN:
        with _known_lock:
            _known.add(value)
            for line in value.splitlines():  # a key's lines may be quoted one by one
                line = line.strip()
                if len(line) >= 16 and not line.startswith("-----"):  # not the armor
                    _known.add(line)
    return value


_PEM_KEY = re.compile(r"-----BEGIN ([A-Z0-9 ]*PRIVATE KEY)-----.*?(?:-----END \1-----|\Z)",
                      re.DOTALL)
_URL_PASSWORD = re.compile(r"(://[^/\s:@]*:)[^/\s@]+@")
_VALUE = r"""("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^\s,;}\]"')]+)"""
# a secret's name, then its value: "name": value (JSON, a dict's repr) and name=value (a
# properties dump, JAAS's password="..."); not name: text, the form of error messages
_QUOTED_PAIR = re.compile(r"""(["'])([A-Za-z][\w.-]*)\1(\s*:\s*)""" + _VALUE)
_EQUALS_PAIR = re.compile(r"(?<![\w.-])([A-Za-z][\w.-]*)(\s*=\s*)" + _VALUE)


def _hide(name: str, value: str) -> str:
    if not is_secret_name(name) or value in ("None", "null", "''", '""'):
        return value
    quote = value[0] if value[:1] in "\"'" else ""
    return f"{quote}{REDACTED}{quote}"


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` (an error message, a log line) with every secret in it replaced by ``***``:
    private key blocks, a URL's password, the value of a ``name=value`` pair whose name is
    a secret's (a JAAS ``password="..."``, a properties dump), and every secret value
    this process resolved (:func:`remember_secret`) or given in ``secrets``."""
    if not text:
        return text
    text = _PEM_KEY.sub(REDACTED, text)
    with _known_lock:
        values = sorted({*_known, *(s for s in secrets if s and len(s) >= _MIN_KNOWN)},
                        key=len, reverse=True)
    for v in values:
        if v in text:
            text = text.replace(v, REDACTED)
    text = _URL_PASSWORD.sub(rf"\1{REDACTED}@", text)
    text = _QUOTED_PAIR.sub(lambda m: m[1] + m[2] + m[1] + m[3] + _hide(m[2], m[4]), text)
    return _EQUALS_PAIR.sub(lambda m: m[1] + m[2] + _hide(m[1], m[3]), text)


class ScrubFilter:
    """A logging filter that :func:`scrub`\\ s each record's message (its arguments merged
    in) and its exception text: on the handlers of ``kafka-audit``'s log, so that no line
    it writes carries a secret, whoever logged it (Spark's, the clients')."""

    def filter(self, record) -> bool:
        try:
            message = record.getMessage()
            clean = scrub(message)
            if clean != message:
                record.msg, record.args = clean, ()
            if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
                import traceback

                # formatters print exc_text when it is set (cli's JSON lines too)
                record.exc_text = scrub("".join(
                    traceback.format_exception(*record.exc_info))).rstrip("\n")
        except Exception:  # noqa: BLE001 - a record that cannot be formatted: logging says so
            pass
        return True
