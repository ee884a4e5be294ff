"""The public corpus (tests/bridge/corpus/lines.yaml): lines as logging libraries and platforms write
them, each through the real ``parse`` and ``trace`` processors, with its expected W3C IDs exactly.

Derived IDs are computed here from the documented derivation (blake2b over the file fingerprint
digest, the 8-byte big-endian offset and, for a record expanded from a line, its 4-byte part index;
correlation values with their own personalisation), not by calling the bridge's functions.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
import yaml

from tests.bridge.harness import LOGFMT, ORIGIN, traced

CORPUS = Path(__file__).parent / "corpus" / "lines.yaml"
RULES = Path(__file__).parents[2] / "exporters" / "bridge" / "TRACE_IDS.md"
ENTRIES = yaml.safe_load(CORPUS.read_text(encoding="utf-8"))["entries"]


def _identity(part: int) -> bytes:
    identity = ORIGIN.key + (0).to_bytes(8, "big")
    return identity + part.to_bytes(4, "big") if part else identity


def expected_trace(value: str, part: int) -> str:
    if value == "derived":
        return hashlib.blake2b(_identity(part), digest_size=16, person=b"obsbox-trace").hexdigest()
    if value.startswith("correlation:"):
        key = value.removeprefix("correlation:").encode()
        return hashlib.blake2b(key, digest_size=16, person=b"obsbox-corr").hexdigest()
    return value


def expected_span(value: str, part: int) -> str:
    if value == "derived":
        return hashlib.blake2b(_identity(part), digest_size=8, person=b"obsbox-span").hexdigest()
    return value


def _id(entry: dict) -> str:
    return f"{entry['producer']}:{ENTRIES.index(entry)}"


@pytest.mark.parametrize("entry", ENTRIES, ids=_id)
def test_corpus_line_gets_its_ids(entry):
    expects = entry["expect"] if isinstance(entry["expect"], list) else [entry["expect"]]
    origin = LOGFMT if entry.get("format") == "logfmt" else ORIGIN
    recs = traced(entry["line"].encode(), origin=origin, **entry.get("options", {}))
    assert len(recs) == len(expects), f"{len(recs)} records from {entry['source']}"
    for rec, expect in zip(recs, expects, strict=True):
        part = expect.get("part", 0)
        got = (rec.trace_id, rec.span_id, rec.parent_span_id)
        want = (
            expected_trace(str(expect["trace_id"]), part),
            expected_span(str(expect["span_id"]), part),
            expect.get("parent_span_id"),
        )
        assert got == want, entry["source"]
        if "attributes" in expect:
            assert rec.attributes == expect["attributes"]


def test_corpus_size_and_sources():
    lines = sum(len(e["expect"]) if isinstance(e["expect"], list) else 1 for e in ENTRIES)
    assert lines >= 40 and len({e["producer"] for e in ENTRIES}) >= 20
    assert all(e.get("source", "").strip() for e in ENTRIES)
    for entry in ENTRIES:
        for expect in entry["expect"] if isinstance(entry["expect"], list) else [entry["expect"]]:
            for key in ("trace_id", "span_id"):
                value = str(expect[key])
                assert re.fullmatch(r"[0-9a-f]{32}|[0-9a-f]{16}|derived|correlation:.+", value), value


def test_every_rule_named_is_written_down():
    anchors = set(re.findall(r'<a id="([a-z0-9-]+)"></a>', RULES.read_text(encoding="utf-8")))
    named = {e["rule"] for e in ENTRIES if "rule" in e}
    assert named <= anchors, f"rules without a section in TRACE_IDS.md: {sorted(named - anchors)}"
