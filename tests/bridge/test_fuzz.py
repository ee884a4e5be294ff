"""Fuzzed input through the whole bridge (tail → parse → trace → redact → file): random bytes,
broken JSON, NUL bytes, huge lines. It never crashes and never drops a line."""

from __future__ import annotations

import itertools
import json
import re

import orjson
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from obsbox.exporters.bridge.sources.compressed import LONGEST, sniff
from tests.bridge.harness import Running

MAX_LINE = 512

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
trace_keys = st.sampled_from(
    [
        "traceparent",
        "trace_id",
        "ActivityId",
        "ParentId",
        "b3",
        "uber-trace-id",
        "X-Amzn-Trace-Id",
        "dd.trace_id",
        "@tr",
        "Request-Id",
        "trace",
        "dd",
    ]
)
objects = st.dictionaries(trace_keys | st.text(max_size=10), json_values, max_size=6).map(
    lambda obj: json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass")
)
lines = st.lists(
    st.one_of(
        st.binary(max_size=80).map(lambda b: b.replace(b"\n", b"")),
        objects,
        objects.map(lambda b: b[: len(b) // 2]),
        st.integers(MAX_LINE, 3 * MAX_LINE).map(lambda n: b'{"big": "' + b"x" * n + b'"}'),
        st.just(b'{"a": "\x00 nul"}'),
    ),
    min_size=1,
    max_size=40,
)


FUZZ = {"deadline": None, "suppress_health_check": [HealthCheck.function_scoped_fixture]}


@settings(max_examples=60, **FUZZ)
@given(lines=lines, trailing_newline=st.booleans())
@example(lines=[b"@=", b"level=info msg=hi"], trailing_newline=True)  # logfmt: the IDs appended
def test_every_line_comes_out(tmp_path_factory, lines, trailing_newline):
    every_line_comes_out(tmp_path_factory, lines, trailing_newline, workers=0)


@settings(max_examples=15, **FUZZ)  # each example starts worker processes (about half a second)
@given(lines=lines, trailing_newline=st.booleans())
def test_every_line_comes_out_through_worker_processes(tmp_path_factory, lines, trailing_newline):
    every_line_comes_out(tmp_path_factory, lines, trailing_newline, workers=None)


def every_line_comes_out(tmp_path_factory, lines: list[bytes], trailing_newline: bool, workers: int | None) -> None:
    """``workers``: 0 processes the lines in the bridge's own process, None as the bridge chooses."""
    tmp = tmp_path_factory.mktemp("fuzz")
    log, out = tmp / "in.log", tmp / "out.jsonl"
    content = b"\n".join(lines) + (b"\n" if trailing_newline else b"")
    log.write_bytes(content)
    running = Running(
        [str(log)],
        tmp / "state",
        once=True,
        sinks={"file": {"path": str(out)}},
        processors=["parse", "trace", "redact"],
        workers=workers,
        max_line_bytes=MAX_LINE,
    )
    running.thread.join(30)
    assert not running.thread.is_alive()
    written = out.read_bytes().split(b"\n")[:-1] if out.exists() else []
    if sniff(content[:LONGEST]):  # starts with a compression's magic number: corrupt, said, never shipped as bytes
        assert written == []
        return
    expected = content.split(b"\n")
    if expected[-1] == b"":  # text after the last newline is a line; nothing after it is not
        expected.pop()
    assert len(written) == len(expected), "a line was dropped or split"
    for original, shipped in itertools.zip_longest(expected, written):
        if len(original) > MAX_LINE:
            assert shipped == original[:MAX_LINE]  # truncated and flagged, never dropped
            continue
        if as_object(original) is not None and b"[REDACTED]" not in shipped:
            enriched = as_object(shipped)
            assert enriched is not None
            # the app's own field of the output name keeps its value; the bridge's ID goes beside it
            trace = enriched.get("obsbox.trace_id", enriched.get("trace_id"))
            span = enriched.get("obsbox.span_id", enriched.get("span_id"))
            assert len(trace) == 32 and len(span) == 16
            assert shipped[: len(original) - 1] == original[:-1], "the app's bytes, the IDs appended"
        elif as_object(original) is None:  # byte for byte; a line read as logfmt gets its IDs appended
            assert shipped == original or b"[REDACTED]" in shipped or appended_ids(original, shipped), shipped


# what the bridge appends to a logfmt line (go-logfmt's grammar: even `@=` is a key with no value)
APPENDED_IDS = re.compile(rb"( (obsbox\.)?trace_id=[0-9a-f]{32})?( (obsbox\.)?span_id=[0-9a-f]{16})?")


def appended_ids(original: bytes, shipped: bytes) -> bool:
    """``shipped`` is ``original`` with a trace and or a span ID appended, and nothing else changed."""
    return (
        shipped.startswith(original)
        and len(shipped) > len(original)
        and bool(APPENDED_IDS.fullmatch(shipped[len(original) :]))
    )


def as_object(line: bytes) -> dict | None:
    """The line as a JSON object, the way the bridge reads it (TRACE_IDS.md): orjson, or Python's
    json for a line orjson refuses that holds NaN or Infinity, as Python's json.dumps writes them."""
    try:
        parsed = orjson.loads(line)
    except orjson.JSONDecodeError:
        if b"NaN" not in line and b"Infinity" not in line:
            return None
        try:
            parsed = json.loads(line)
        except ValueError:
            return None
    return parsed if isinstance(parsed, dict) else None
