"""``stdout``: enriched JSON (and logfmt) lines on standard output, the default sink. Lines that are
neither are written byte for byte. A closed pipe (``| head``) stops the bridge cleanly.
Threading: the pipeline's export thread only."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from obsbox.exporters.bridge.component import ExportResult, Sink
from obsbox.exporters.bridge.record import Record
from obsbox.exporters.bridge.sinks.file import LineEncoding, lines


class StdoutSink(Sink):
    type = "stdout"

    @staticmethod
    def make_encoder(config: object, context: object) -> Callable[[], LineEncoding]:
        """For worker processes: the batch's bytes are made there, and written here in order."""
        return LineEncoding

    def export(self, records: list[Record]) -> ExportResult:
        return self.export_encoded(lines(records), records)

    def export_encoded(self, payload: bytes, records: Sequence[Record]) -> ExportResult:
        if not payload:
            return ExportResult.SUCCESS
        try:
            sys.stdout.buffer.write(payload)
            sys.stdout.buffer.flush()
        except BrokenPipeError:
            self.context.stop.set()
            self.context.abort.set()
            return ExportResult.FAILURE
        return ExportResult.SUCCESS
