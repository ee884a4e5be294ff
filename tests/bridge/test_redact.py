"""Redaction: every built-in rule, on lines real software wrote and on every Gitleaks shape in every
place a log puts it (tests/bridge/corpus/secrets.yaml), which keys hold secrets, values of every
type, custom rules, and the Hyperscan and ``re`` paths agreeing."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from obsbox.config import ConfigError, build
from obsbox.exporters.bridge.processors import redact
from obsbox.exporters.bridge.processors.redact import RedactConfig, RedactProcessor
from obsbox.exporters.bridge.processors.secret_rules import is_secret_key
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


@pytest.mark.parametrize("name", CASES)
def test_each_builtin_rule(name, make):
    line, expected = CASES[name]
    (rec,) = redacted_by(make(), line.encode())
    assert expected in rec.raw.decode(), rec.raw
    assert expected in rec.line().decode()  # the enriched line too
    assert rec.fields == orjson.loads(rec.raw)  # fields are re-read from the clean line


def test_clean_lines_are_untouched_and_secrets_in_plain_text_lines_are_redacted(make):
    clean = b'{"msg": "ask about tokens", "route": "/v1/chat", "asia": "Asia/Tokyo", "key": "cache-key"}'
    text = b"login failed for https://bob:pa55w0rd@example.com/x"
    recs = redacted_by(make(), clean, text)
    assert recs[0].raw == clean and recs[0].line().startswith(clean[:-1])
    assert recs[1].raw == b"login failed for https://bob:[REDACTED]@example.com/x" and recs[1].fields is None


def test_custom_rules_and_disabled_builtins(make):
    card = {"name": "card", "pattern": r"\b(?:\d{4} ){3}\d{4}\b", "replacement": "[CARD]"}
    lines = (b'{"n": 1}', b'{"card": "4111 1111 1111 1111", "Password": "x"}', b"paid with 4111 1111 1111 1111")
    recs = redacted_by(make(disable=["secret_field"], rules=[card]), *lines)
    assert [rec.raw for rec in recs] == [b'{"n": 1}', b'{"card": "[CARD]", "Password": "x"}', b"paid with [CARD]"]
    everything_else = [name for name in redact.BUILTIN if name != "secret_pair"]
    (rec,) = redacted_by(make(disable=everything_else), b"level=info password=x")
    assert rec.raw == b"level=info password=[REDACTED]"
    with pytest.raises(Exception, match="cannot disable unknown rules"):
        build(RedactConfig, {"disable": ["nope"]})
    with pytest.raises(Exception, match="invalid regular expression"):
        build(RedactConfig, {"rules": [{"name": "bad", "pattern": "("}]})


def test_a_custom_rule_hyperscan_cannot_compile_is_a_config_error():
    if redact.hyperscan is None:
        pytest.fail("hyperscan is not importable here; it is a dependency on x86_64 Linux")
    with pytest.raises(ConfigError, match="rule 'ascii': Hyperscan cannot compile the pattern"):
        build(RedactConfig, {"rules": [{"name": "ascii", "pattern": r"(?a)\w+"}]})


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


# -- the corpus: real lines, and every token shape in every place a log puts it ------------------
CORPUS = yaml.safe_load((Path(__file__).parent / "corpus" / "secrets.yaml").read_text(encoding="utf-8"))


@pytest.fixture(params=["hyperscan", "re"])
def make(request, monkeypatch):
    """A redact processor (default rules) on the Hyperscan path, then on the ``re`` path."""
    if request.param == "re":
        monkeypatch.setattr(redact, "hyperscan", None)
    elif redact.hyperscan is None:
        pytest.fail("hyperscan is not importable here; it is a dependency on x86_64 Linux")

    default = RedactProcessor(build(RedactConfig, {}), context())

    def processor(ctx=None, **options):
        return RedactProcessor(build(RedactConfig, options), ctx or context()) if ctx or options else default

    return processor


def redacted_by(processor, *lines: bytes):
    recs = traced(*lines)
    was_json = [type(rec.fields) is dict for rec in recs]  # a logfmt line's fields are LogfmtFields
    recs = processor.process(recs)
    for rec, json in zip(recs, was_json, strict=True):
        if json:
            assert rec.fields == orjson.loads(rec.raw), rec.raw  # still JSON, fields re-read
    return recs


def assert_gone(secret: str, text: str) -> None:
    """No run of 12 characters of ``secret`` is left in ``text`` (nothing half redacted)."""
    chunks = [secret[i : i + 12] for i in range(0, max(len(secret) - 11, 1), 4)]
    left = [chunk for chunk in chunks if chunk in text]
    assert not left, f"{left[:3]} left in {text!r}"


@pytest.mark.parametrize("entry", CORPUS["lines"], ids=lambda e: e["source"][:50])
def test_real_lines_lose_their_secrets_and_keep_the_rest(entry, make):
    ctx = context()
    (rec,) = redacted_by(make(ctx), entry["line"].encode())
    text = rec.raw.decode()
    for secret in entry["secrets"]:
        assert_gone(secret, text)
    for kept in entry["keeps"]:
        assert kept in text, (kept, text)
    for rule in entry["rules"]:
        assert ctx.metrics.redactions.labels(rule)._value.get() >= 1, (rule, text)


@pytest.mark.parametrize("entry", CORPUS["clean"], ids=lambda e: e["source"][:50])
def test_real_lines_without_secrets_pass_unchanged(entry, make):
    ctx = context()
    (rec,) = redacted_by(make(ctx), entry["line"].encode())
    assert rec.raw == entry["line"].encode()
    assert not next(m for m in ctx.metrics.registry.collect() if m.name.endswith("redactions")).samples


PLACES = {
    "json_field": lambda s: orjson.dumps({"user": "ann", "note": s, "n": 1}),
    "nested": lambda s: orjson.dumps({"user": "ann", "outer": {"items": ["x", s]}, "n": 1}),
    "free_text": lambda s: orjson.dumps({"user": "ann", "msg": f"sent {s} upstream", "n": 1}),
    "text_line": lambda s: b"2026-12-01 20:18:13 INFO user=ann sent " + s.replace("\n", "\\n").encode() + b" upstream",
}


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("shape", CORPUS["shapes"], ids=lambda s: s["gitleaks"])
def test_every_gitleaks_shape_in_every_place(shape, place, make):
    ctx = context()
    (rec,) = redacted_by(make(ctx), PLACES[place](shape["sample"]))
    text = rec.raw.decode()
    keeps = shape.get("keeps", "")
    assert_gone(shape["sample"][len(keeps) :].replace("\n", "\\n"), text)
    assert keeps in text and "ann" in text and ("upstream" in text or place not in ("free_text", "text_line"))
    assert ctx.metrics.redactions.labels(shape["rule"])._value.get() == 1


# -- key names -----------------------------------------------------------------------------------
SECRET_KEYS = (
    "password",
    "Password",
    "PASSWORD",
    "db_password",
    "dbPassword",
    "DB_PASSWORD",
    "passwd",
    "pwd",
    "pass",
    "passphrase",
    "secret",
    "client_secret",
    "client-secret",
    "secretKey",
    "SecretAccessKey",
    "aws_secret_access_key",
    "api_key",
    "apiKey",
    "x-api-key",
    "API_KEY",
    "access_token",
    "refresh_token",
    "id_token",
    "auth_token",
    "authToken",
    "session_token",
    "SessionToken",
    "X-Amz-Security-Token",
    "token",
    "privateKey",
    "private_key",
    "credentials",
    "creds",
    "authorization",
    "Proxy-Authorization",
    "cookie",
    "set-cookie",
    "auth",
    "basic_auth",
    "signature",
    "X-Amz-Signature",
    "X-Amz-Credential",
)
NOT_SECRET_KEYS = (
    "token_count",
    "max_tokens",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "tokens",
    "tokenizer",
    "password_reset_required",
    "password_changed_at",
    "secret_version",
    "secret_name",
    "api_version",
    "token_type",
    "token_expires_in",
    "author",
    "authority",
    "auth_method",
    "auth_type",
    "public_key",
    "pub_key",
    "cache_key",
    "key",
    "user",
    "passed",
    "bypass",
    "keyboard",
    "monkey",
    "access_id",
    "aws_access_key_id",
    "secretLength",
)


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_keys_that_hold_secrets(key, make):
    (rec,) = redacted_by(make(), orjson.dumps({"user": "ann", key: "s3cr3t-V4lue"}))
    assert rec.fields == {"user": "ann", key: "[REDACTED]"}
    (rec,) = redacted_by(make(), f"level=info user=ann {key}=s3cr3t-V4lue status=200".encode())
    assert rec.raw.decode() == f"level=info user=ann {key}=[REDACTED] status=200"


@pytest.mark.parametrize("key", NOT_SECRET_KEYS)
def test_keys_that_only_look_secret_are_kept(key, make):
    line = orjson.dumps({"user": "ann", key: "s3cr3t-V4lue"})
    assert redacted_by(make(), line)[0].raw == line
    text = f"level=info user=ann {key}=s3cr3t-V4lue status=200".encode()
    assert redacted_by(make(), text)[0].raw == text


def test_values_of_every_type_under_a_secret_key_and_json_that_still_parses(make):
    line = orjson.dumps(
        {
            "password": 12345,
            "pwd": ["a", "b"],
            "credentials": {"user": "ann", "pass": "x", "list": [1, {"k": "}"}]},
            "secret": -1.5e3,
            "token": True,
            "auth": None,
            "api_key": "",
            "user": "ann",
        }
    )
    (rec,) = redacted_by(make(), line)
    assert rec.fields == {
        "password": "[REDACTED]",
        "pwd": "[REDACTED]",
        "credentials": "[REDACTED]",
        "secret": "[REDACTED]",
        "token": True,  # booleans, null and empty strings carry nothing
        "auth": None,
        "api_key": "",
        "user": "ann",
    }


def test_json_carried_inside_a_string(make):
    inner = orjson.dumps({"user": "ann", "password": 'x"y', "cfg": {"secretKey": ["a", "b"]}, "n": 2})
    line = orjson.dumps({"msg": "request body", "body": inner.decode()})
    (rec,) = redacted_by(make(), line)
    assert orjson.loads(rec.fields["body"]) == {
        "user": "ann",
        "password": "[REDACTED]",
        "cfg": {"secretKey": "[REDACTED]"},
        "n": 2,
    }


def test_text_pairs_in_their_usual_forms(make):
    cases = {
        b"GET /cb#access_token=ya29.a0AfH6SMB&expires_in=3599": b"GET /cb#access_token=[REDACTED]&expires_in=3599",
        b"pwd: x": b"pwd: [REDACTED]",
        b'login password="hunter 2" user=bob': b'login password="[REDACTED]" user=bob',
        b"{'password': 'hunter2', 'user': 'bob'}": b"{'password': '[REDACTED]', 'user': 'bob'}",
        b'Parameters: {"user"=>{"password"=>"hunter2"}}': b'Parameters: {"user"=>{"password"=>"[REDACTED]"}}',
        b'{"msg": "login password=\\"hunter 2\\" ok"}': b'{"msg": "login password=\\"[REDACTED]\\" ok"}',
        b'{"msg": "user password: ", "n": 1}': b'{"msg": "user password: ", "n": 1}',  # a bare quote ends the string
        b"{password=hunter2}": b"{password=[REDACTED]}",
        b"token: none, secret=false": b"token: none, secret=false",
    }
    recs = redacted_by(make(), *cases)
    assert [rec.raw for rec in recs] == list(cases.values())


def test_a_rule_that_breaks_the_json_is_counted_and_the_line_goes_on_as_text(make):
    ctx = context()
    (rec,) = make(ctx, rules=[{"name": "quote", "pattern": '"n"', "replacement": "n"}]).process(traced(b'{"n": 1}'))
    assert rec.raw == b"{n: 1}" and rec.fields is None and rec.parse_error
    assert ctx.metrics.errors.labels("redact")._value.get() == 1


KEYS = st.sampled_from(["password", "db_password", "secretKey", "token", "auth", "user", "msg", "max_tokens", "n"])
TEXT = st.text(alphabet=st.sampled_from('ab"\\/:=&{}[], \n\u00e9'), max_size=12)
NUMBER = st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False)
JSON = st.recursive(
    st.none() | st.booleans() | NUMBER | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(obj=st.dictionaries(KEYS, JSON | JSON.map(lambda v: orjson.dumps({"password": v}).decode()), min_size=1))
def test_any_json_line_stays_json_with_its_secret_keys_masked(obj, make):
    (rec,) = redacted_by(make(), orjson.dumps(obj))
    assert rec.fields is not None and rec.fields.keys() == obj.keys()
    for key, value in obj.items():
        if is_secret_key(key) and value not in (True, False, None, ""):
            assert rec.fields[key] == "[REDACTED]", (key, value, rec.raw)
