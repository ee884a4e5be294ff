"""``memory``: keeps what it is given, for tests and embedding (like the OTel SDK's
``InMemoryLogExporter``). Threading: ``export`` from the pipeline's export thread; readers take the lock."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from obsbox.exporters.bridge.component import ExportResult, Sink
from obsbox.exporters.bridge.record import Record


@dataclass
class MemoryConfig:
    max_records: int = 10_000_000


class MemorySink(Sink):
    type = "memory"
    Config = MemoryConfig

    def __init__(self, config: MemoryConfig, context) -> None:
        super().__init__(config, context)
        self._lock = threading.Lock()
        self._records: list[Record] = []

    def export(self, records: list[Record]) -> ExportResult:
        with self._lock:
            if len(self._records) + len(records) > self.config.max_records:
                raise MemoryError(f"memory sink holds more than {self.config.max_records} records")
            self._records.extend(records)
        return ExportResult.SUCCESS

    def records(self) -> list[Record]:
        with self._lock:
            return list(self._records)

    def clear(self) -> None:
        with self._lock:
            self._records.clear()
