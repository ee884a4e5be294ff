"""Redaction: every built-in rule, custom rules, and the Hyperscan and ``re`` paths agreeing."""

from __future__ import annotations

import orjson
import pytest

from obsbox.config import build
from obsbox.exporters.bridge.processors import redact
from obsbox.exporters.bridge.processors.redact import RedactConfig, RedactProcessor
from tests.bridge.harness import context, traced

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
CASES = {
    "bearer": ('{"msg": "Authorization header Bearer abc.def-ghi_jkl~mno/pqr= sent"}', "Bearer [REDACTED]"),
    "jwt": ('{"token_used": "' + JWT + '"}', '"token_used": "[REDACTED]"'),
    "openai": ('{"msg": "key sk-proj-AbCdEfGhIjKlMnOpQrStUvWx1234 leaked"}', "key [REDACTED] leaked"),
    "github": ('{"msg": "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB"}', '"msg": "[REDACTED]"'),
    "aws": ('{"msg": "AKIAIOSFODNN7EXAMPLE in env"}', '"msg": "[REDACTED] in env"'),
    "url_password": ('{"dsn": "postgres://app:s3cr3t-pw@db:5432/main"}', "postgres://app:[REDACTED]@db:5432/main"),
    "secret_field": (
        '{"user": "ann", "Password": "hunter2", "client_secret": "x\\"y"}',
        '"Password": "[REDACTED]", "client_secret": "[REDACTED]"',
    ),
}


def redacted(*lines: bytes, **options):
    recs = traced(*lines)
    return RedactProcessor(build(RedactConfig, options), context()).process(recs)


@pytest.mark.parametrize("name", CASES)
def test_each_builtin_rule(name):
    line, expected = CASES[name]
    (rec,) = redacted(line.encode())
    assert expected in rec.raw.decode(), rec.raw
    assert expected in rec.line().decode()  # the enriched line too
    assert rec.fields == orjson.loads(rec.raw)  # fields are re-read from the clean line


def test_clean_lines_are_untouched_and_secrets_in_plain_text_lines_are_redacted():
    clean = b'{"msg": "ask about tokens", "route": "/v1/chat", "asia": "Asia/Tokyo", "key": "cache-key"}'
    text = b"login failed for https://bob:pa55w0rd@example.com/x"
    recs = redacted(clean, text)
    assert recs[0].raw == clean and recs[0].line().startswith(clean[:-1])
    assert recs[1].raw == b"login failed for https://bob:[REDACTED]@example.com/x" and recs[1].fields is None


def test_custom_rules_and_disabled_builtins():
    (rec,) = redacted(
        b'{"card": "4111 1111 1111 1111", "Password": "x"}',
        disable=["secret_field"],
        rules=[{"name": "card", "pattern": r"\b(?:\d{4} ){3}\d{4}\b", "replacement": "[CARD]"}],
    )
    assert rec.raw == b'{"card": "[CARD]", "Password": "x"}'
    with pytest.raises(Exception, match="cannot disable unknown rules"):
        build(RedactConfig, {"disable": ["nope"]})
    with pytest.raises(Exception, match="invalid regular expression"):
        build(RedactConfig, {"rules": [{"name": "bad", "pattern": "("}]})


def test_hyperscan_and_re_paths_find_the_same_lines(monkeypatch):
    lines = [case[0].encode() for case in CASES.values()] + [b'{"clean": %d}' % i for i in range(50)]
    with_scanner = RedactProcessor(build(RedactConfig, {}), context())
    if not isinstance(with_scanner.prefilter, redact._HyperscanPrefilter):
        pytest.fail("hyperscan is not importable here; it is a dependency on x86_64 Linux")
    monkeypatch.setattr(redact, "hyperscan", None)
    without = RedactProcessor(build(RedactConfig, {}), context())
    assert isinstance(without.prefilter, redact._RePrefilter)
    batch_a, batch_b = traced(*lines), traced(*lines)
    assert with_scanner.candidates(batch_a) == without.candidates(batch_b)
    assert sorted(with_scanner.candidates(batch_a)) == list(range(len(CASES)))
    assert [r.raw for r in with_scanner.process(batch_a)] == [r.raw for r in without.process(batch_b)]


def test_redactions_are_counted_by_rule():
    ctx = context()
    recs = traced(CASES["aws"][0].encode(), CASES["bearer"][0].encode(), CASES["aws"][0].encode())
    RedactProcessor(build(RedactConfig, {}), ctx).process(recs)
    assert ctx.metrics.redactions.labels("api_key")._value.get() == 2
    assert ctx.metrics.redactions.labels("bearer")._value.get() == 1
