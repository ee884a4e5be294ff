"""The app's JSON object inside a string: journald's ``MESSAGE``, a Docker ``log``, an app's ``message``.

journald's JSON export (``journalctl -o json``) keeps a service's stdout line as the string
``MESSAGE``; a JSON logger behind another one (structlog's ``JSONRenderer`` handed to a stdlib JSON
formatter) writes its line as ``message``. The app's IDs are one level down. The trace processor asks
for the object only when the outer record gave no ID of its own: a line pays one dict lookup per key
below, and a value is parsed only when it starts with ``{`` (TRACE_IDS.md, "JSON inside a string").
"""

from __future__ import annotations

from typing import Any

import orjson

from obsbox import logfields
from obsbox.exporters.bridge.processors.parse import python_json

# journald's field first, then the message fields the sinks read as a line's message; not the
# templates (``@mt``, ``MessageTemplate``), whose ``{`` opens a placeholder, not an object.
KEYS = ("MESSAGE", *(key for key in logfields.MESSAGE_KEYS if key not in ("@mt", "MessageTemplate")))


def inner_object(fields: dict[str, Any]) -> tuple[dict[str, Any], str] | None:
    """The first JSON object held as a string in a message field, with its text; None without one.

    journald writes a value that is not valid, printable UTF-8 as an array of byte values: such a
    ``MESSAGE`` is decoded with replacement characters (an ID is ASCII, so it survives)."""
    for key in KEYS:
        value = fields.get(key)
        if type(value) is str:
            if not value.startswith("{"):
                continue
        elif type(value) is list and value and value[0] == 0x7B:  # journald's bytes, starting with "{"
            try:
                value = bytes(value).decode("utf-8", "replace")
            except (TypeError, ValueError):  # not a list of byte values
                continue
        else:
            continue
        try:
            obj = orjson.loads(value)
        except orjson.JSONDecodeError:
            obj = python_json(value.encode("utf-8", "surrogatepass"))  # NaN, Infinity
        if type(obj) is dict:
            return obj, value
    return None
