"""``parse``: read each line as a JSON object (orjson). A line that is not one passes through.

Lines that are not JSON objects (broken UTF-8, plain text, arrays, truncated overlong lines) are
never dropped: they keep their bytes, get ``parse_error`` (sent as ``obsbox.parse_error`` to Loki and
OTLP) and are counted in ``obsbox_bridge_parse_errors_total{reason}``.
Python's ``json.dumps`` extensions (``NaN``, ``Infinity``, ``-Infinity``: structlog and
python-json-logger write them by default), which orjson rejects, are read by the standard library
instead, integers exactly; only lines orjson failed on pay for that.
A line that is not JSON is read as logfmt (see ``logfmt``) in a file whose lines are logfmt
(``Origin.logfmt``: detected from its first line, or forced), and in any other file when it starts
like a logfmt record (``key=``); a line of a logfmt file that breaks go-logfmt's rules, or holds no
``key=value`` pair, is counted as ``invalid_logfmt`` and passes through. JSON lines never reach this:
only lines orjson rejected pay for it.
A line that is an OTLP/JSON export (a top-level ``resourceLogs``) becomes one record per log record
it holds (see ``otlpjson``), unless ``expand_otlp`` is off; a CloudWatch Logs subscription payload
(a top-level ``logEvents``) one record per log event (see ``cloudwatch``), unless
``expand_cloudwatch`` is off. Threading: pipeline thread only.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

import orjson

from obsbox.exporters.bridge import logfmt
from obsbox.exporters.bridge.component import Processor
from obsbox.exporters.bridge.processors import cloudwatch, otlpjson
from obsbox.exporters.bridge.record import Record


@dataclass
class ParseConfig:
    expand_otlp: bool = True  # an OTLP/JSON export line becomes its log records
    expand_cloudwatch: bool = True  # a CloudWatch Logs subscription payload becomes its log events


def error_reason(raw: bytes, exc: Exception) -> str:
    if not raw.strip():
        return "empty"
    if "UTF-8" in str(exc):
        return "invalid_utf8"
    return "invalid_json"


def text_fields(rec: Record) -> None:
    """Read a line that is not JSON as logfmt (``logfmt.fields_of``): a record of pairs gets its
    ``fields`` and no error; a line of a logfmt file that is not one gets ``invalid_logfmt``; a line
    of another file keeps ``invalid_json``."""
    try:
        fields = logfmt.fields_of(rec.raw, rec.origin.logfmt)
    except logfmt.LogfmtError:
        rec.parse_error = "invalid_logfmt"
        return
    if fields is not None:
        rec.fields, rec.parse_error = fields, None


def python_json(raw: bytes) -> Any:
    """``raw`` read as Python's ``json`` module writes it, or None: tried only on lines orjson
    rejected that hold one of its non-standard constants."""
    if b"NaN" not in raw and b"Infinity" not in raw:
        return None
    return exact_json(raw)


def exact_json(raw: bytes | str) -> dict[str, Any] | None:
    """``raw`` as a JSON object with every integer exact (orjson reads one above 2**64 as a float)
    and ``NaN``/``Infinity`` accepted; None when it is not one."""
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return obj if type(obj) is dict else None


class ParseProcessor(Processor):
    type = "parse"
    Config = ParseConfig

    def process(self, records: list[Record]) -> list[Record]:
        loads, decode_error = orjson.loads, orjson.JSONDecodeError
        errors: Counter[str] = Counter()
        expand = self.config is None or self.config.expand_otlp
        expand_cw = self.config is None or self.config.expand_cloudwatch
        expanded: dict[int, list[Record]] = {}
        for rec in records:
            if rec.truncated:
                rec.parse_error = "truncated"
                errors["truncated"] += 1
                continue
            try:
                obj = loads(rec.raw)
            except decode_error as exc:
                obj = python_json(rec.raw)
                if obj is None:
                    rec.parse_error = error_reason(rec.raw, exc)
                    if rec.parse_error == "invalid_json":
                        text_fields(rec)
                    if rec.parse_error is not None:
                        errors[rec.parse_error] += 1
                    continue
            if type(obj) is dict:
                rec.fields = obj
                if (expand and "resourceLogs" in obj and (parts := otlpjson.expand(rec, obj))) or (
                    expand_cw and "logEvents" in obj and (parts := cloudwatch.expand(rec, obj))
                ):
                    expanded[id(rec)] = parts
            else:
                rec.parse_error = "not_an_object"
                errors["not_an_object"] += 1
        for reason, count in errors.items():
            self.context.metrics.parse_errors.labels(reason).inc(count)
        if expanded:
            return [part for rec in records for part in expanded.get(id(rec), (rec,))]
        return records
