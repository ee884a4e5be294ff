"""``stdout``: enriched JSON lines on standard output, the default sink. Lines that are not JSON
are written byte for byte. A closed pipe (``| head``) stops the bridge cleanly.
Threading: the pipeline's export thread only."""

from __future__ import annotations

import sys

from obsbox.exporters.bridge.component import ExportResult, Sink
from obsbox.exporters.bridge.record import Record


class StdoutSink(Sink):
    type = "stdout"

    def export(self, records: list[Record]) -> ExportResult:
        if not records:
            return ExportResult.SUCCESS
        try:
            sys.stdout.buffer.write(b"\n".join([rec.line() for rec in records]) + b"\n")
            sys.stdout.buffer.flush()
        except BrokenPipeError:
            self.context.stop.set()
            self.context.abort.set()
            return ExportResult.FAILURE
        return ExportResult.SUCCESS
