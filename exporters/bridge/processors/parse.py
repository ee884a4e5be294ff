"""``parse``: read each line as a JSON object (orjson). A line that is not one passes through.

Lines that are not JSON objects (broken UTF-8, plain text, arrays, truncated overlong lines) are
never dropped: they keep their bytes, get ``parse_error`` (sent as ``obsbox.parse_error`` to Loki and
OTLP) and are counted in ``obsbox_bridge_parse_errors_total{reason}``.
Threading: pipeline thread only.
"""

from __future__ import annotations

from collections import Counter

import orjson

from obsbox.exporters.bridge.component import Processor
from obsbox.exporters.bridge.record import Record


def error_reason(raw: bytes, exc: Exception) -> str:
    if not raw.strip():
        return "empty"
    if "UTF-8" in str(exc):
        return "invalid_utf8"
    return "invalid_json"


class ParseProcessor(Processor):
    type = "parse"

    def process(self, records: list[Record]) -> list[Record]:
        loads, decode_error = orjson.loads, orjson.JSONDecodeError
        errors: Counter[str] = Counter()
        for rec in records:
            if rec.truncated:
                rec.parse_error = "truncated"
                errors["truncated"] += 1
                continue
            try:
                obj = loads(rec.raw)
            except decode_error as exc:
                rec.parse_error = error_reason(rec.raw, exc)
                errors[rec.parse_error] += 1
                continue
            if type(obj) is dict:
                rec.fields = obj
            else:
                rec.parse_error = "not_an_object"
                errors["not_an_object"] += 1
        for reason, count in errors.items():
            self.context.metrics.parse_errors.labels(reason).inc(count)
        return records
