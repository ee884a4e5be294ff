"""The component interfaces of a bridge pipeline, shaped like the OTel SDK's processors and exporters.

A component is a class with a ``type`` name, a ``Config`` dataclass and a small lifecycle:
sources ``poll``/``commit``, processors ``process``, sinks ``export``; all of them ``flush`` and
``shutdown``. Sources and processors are called from their pipeline's thread, sinks from its export
thread, one batch at a time; so they need no locks unless they start threads of their own (their
docstrings say so).
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from obsbox.exporters.bridge.record import Batch, Record

if TYPE_CHECKING:
    from obsbox.exporters.bridge.metrics import BridgeMetrics


class ExportResult(enum.Enum):
    """SUCCESS: every record was delivered, or dead-lettered with its reason. FAILURE: not delivered
    (the sink gave up, for example at shutdown); the batch is not acknowledged and is read again."""

    SUCCESS = 0
    FAILURE = 1


@dataclass
class Context:
    """What a component gets besides its config: its name, shared metrics, a state dir, and two
    signals: ``stop`` (stop reading, finish what is in flight) and ``abort`` (give up retrying)."""

    name: str
    metrics: BridgeMetrics
    stop: threading.Event = field(default_factory=threading.Event)
    abort: threading.Event = field(default_factory=threading.Event)
    state_dir: Path = Path(".")
    pipeline: str = "default"


@dataclass
class NoConfig:
    """For components without options."""


class Component:
    type: ClassVar[str]
    Config: ClassVar[type] = NoConfig

    def __init__(self, config: Any, context: Context) -> None:
        self.config = config
        self.context = context

    def flush(self, timeout: float) -> bool:
        """Push out anything buffered; True when done within ``timeout`` seconds."""
        return True

    def shutdown(self) -> None:
        """Release resources. Called once, after the last flush."""


class Source(Component):
    def poll(self, max_records: int, max_bytes: int) -> Batch | None:
        """Return the next batch, or None when there is nothing new right now."""
        raise NotImplementedError

    def commit(self, checkpoint: Any) -> None:
        """Every sink has acknowledged the batch that carried ``checkpoint``: make it durable."""
        raise NotImplementedError

    def exhausted(self) -> bool:
        """True when a bounded read (``--once``) has reached the end of everything."""
        return False

    def progress(self) -> tuple[int, int]:
        """(bytes read, bytes known) for progress reporting."""
        return (0, 0)


class Processor(Component):
    def process(self, records: list[Record]) -> list[Record]:
        raise NotImplementedError


class Sink(Component):
    def export(self, records: list[Record]) -> ExportResult:
        """Deliver ``records``; block through retries. Return FAILURE only when giving up."""
        raise NotImplementedError
