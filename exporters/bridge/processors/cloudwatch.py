"""CloudWatch Logs subscription payloads read as the log events they hold.

A subscription filter delivers ``{"messageType": "DATA_MESSAGE", "owner", "logGroup", "logStream",
"subscriptionFilters", "logEvents": [{"id", "timestamp", "message"}]}``: several app lines in one
JSON object (a Lambda consumer or Firehose that writes the decompressed payload to a file keeps it
as one line). Each event becomes a record, as the collector's awslogs_encoding extension makes one
log record per event (extension/encoding/awslogsencodingextension/internal/unmarshaler/
subscription-filter/unmarshaler.go); its line is the event object as compact JSON, so its
``message`` (the app's line) is searched for IDs like any JSON in a message field. A
``CONTROL_MESSAGE`` (the destination's health check) holds no app line and stays one record.
"""

from __future__ import annotations

from typing import Any

import orjson

from obsbox.exporters.bridge.processors.otlpjson import PartRecord
from obsbox.exporters.bridge.record import Record

# The payload's fields → the record's attributes, with the names the collector gives its resource.
_ATTRIBUTES = (
    ("owner", "cloud.account.id"),
    ("logGroup", "aws.log.group.names"),
    ("logStream", "aws.log.stream.names"),
)


def expand(rec: Record, obj: dict[str, Any]) -> list[Record]:
    """The log events of a ``DATA_MESSAGE`` payload; empty for anything else (the line then stays
    whole, as it also does when an event is not an object: nothing of it is dropped)."""
    events = obj.get("logEvents")
    if obj.get("messageType") != "DATA_MESSAGE" or type(events) is not list:
        return []
    if not all(type(event) is dict for event in events):
        return []
    attrs = {"cloud.provider": "aws"}
    attrs.update((name, obj[key]) for key, name in _ATTRIBUTES if type(obj.get(key)) is str)
    out: list[Record] = []
    for event in events:
        part = PartRecord(orjson.dumps(event), rec, len(out))
        part.fields = event
        part.attributes = dict(attrs)
        out.append(part)
    return out
