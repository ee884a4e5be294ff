"""The component interfaces of a bridge pipeline, shaped like the OTel SDK's processors and exporters.

A component is a class with a ``type`` name, a ``Config`` dataclass and a small lifecycle:
sources ``poll``/``commit``, processors ``process``, sinks ``export``; all of them ``flush`` and
``shutdown``. Threading: sources and processors are called from their pipeline's thread, sinks from
its export thread, one batch at a time, so none needs locks unless it starts threads of its own (its
docstring then says so). A source may be asked for ``progress`` from another thread.

Records: processors may change ``fields``, drop records, add records, and add string
``attributes`` to a record; the Loki sink ships attributes as structured metadata and the OTLP sink
as LogRecord attributes. ``raw`` is never changed except by ``redact``.
"""

from __future__ import annotations

import builtins
import enum
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from obsbox.exporters.bridge.record import Batch, Checkpoint, Record
from obsbox.exporters.bridge.retry import RetryPolicy

if TYPE_CHECKING:  # prometheus-client only where metrics are kept: a worker process counts without it
    from obsbox.exporters.bridge.metrics import BridgeMetrics
    from obsbox.exporters.bridge.telemetry import Telemetry

C = TypeVar("C", bound=Checkpoint)


class ExportResult(enum.Enum):
    """SUCCESS: every record was delivered, or dead-lettered with its reason. FAILURE: not delivered
    (the sink gave up: its retry policy ran out, or the pipeline is aborting); the batch is exported
    again under the pipeline's retry policy, and never acknowledged before it succeeds."""

    SUCCESS = 0
    FAILURE = 1


def _bridge_metrics() -> BridgeMetrics:
    from obsbox.exporters.bridge.metrics import BridgeMetrics  # noqa: PLC0415 - see the TYPE_CHECKING import

    return BridgeMetrics()


@dataclass
class Context:
    """What a component gets besides its config.

    ``name`` (its ``type[/name]``), the bridge's ``metrics`` and a ``telemetry`` handle for metrics of
    its own, the ``state_dir``, its ``pipeline``, the bridge-wide modes (``once``: read to the end and
    exit; ``poll_interval``: how long an idle pipeline waits), the ``retry`` policy every export
    follows, and two signals: ``stop`` (stop reading, finish what is in flight) and ``abort`` (give up
    retrying)."""

    name: str
    metrics: BridgeMetrics = field(default_factory=_bridge_metrics)
    stop: threading.Event = field(default_factory=threading.Event)
    abort: threading.Event = field(default_factory=threading.Event)
    state_dir: Path = Path(".")
    pipeline: str = "default"
    once: bool = False
    poll_interval: float = 0.1
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    @property
    def telemetry(self) -> Telemetry:
        return self.metrics.telemetry


@dataclass
class ComponentSpec:
    """A component as the config declares it: its class and its loaded config. Here rather than in
    ``config`` so that a worker process can unpickle one without the YAML machinery."""

    kind: str
    key: str  # "type" or "type/name"
    cls: type
    config: Any


@dataclass
class NoConfig:
    """For components without options."""


class Component(ABC):
    type: ClassVar[str]
    Config: ClassVar[builtins.type] = NoConfig  # builtins: ``type`` above is the name

    def __init__(self, config: Any, context: Context) -> None:
        self.config = config
        self.context = context

    def flush(self, timeout: float) -> bool:
        """Push out anything buffered; True when done within ``timeout`` seconds."""
        return True

    def shutdown(self) -> None:  # noqa: B027 - an optional hook: most components hold nothing to release
        """Release resources. Called once, after the last flush."""


class Source(Component, Generic[C]):
    """Reads records. ``C`` is its checkpoint type: a mapping whose later entries supersede earlier
    ones for the same key, so the pipeline merges the checkpoints of several polls with ``update``."""

    @abstractmethod
    def poll(self, max_records: int, max_bytes: int) -> Batch[C] | None:
        """Return the next batch, or None when there is nothing new right now."""

    @abstractmethod
    def commit(self, checkpoint: C) -> None:
        """Every sink has acknowledged the batches that carried ``checkpoint``: make it durable."""

    def exhausted(self) -> bool:
        """True when a bounded read (``once``) has reached the end of everything."""
        return False

    def progress(self) -> tuple[int, int]:
        """(bytes read, bytes known) for progress reporting."""
        return (0, 0)

    def resumed(self) -> tuple[int, Path | None]:
        """(files started past their beginning at a saved position, the file keeping those positions):
        a ``--once`` run says so, or a second run that reads nothing would look like a broken one."""
        return (0, None)


class Processor(Component):
    @abstractmethod
    def process(self, records: list[Record]) -> list[Record]:
        """Change, drop or add records (see the module docstring for what may change)."""


class Encoding(Protocol):
    """A batch a sink encodes in a worker process (``make_encoder`` makes one per batch), a chunk of
    records at a time: the worker runs every processor and encoder over a chunk while its records are
    still in the CPU's cache, then sends the ``payload`` to the sink's ``export_encoded``."""

    def add(self, records: list[Record]) -> None: ...

    def payload(self) -> Any: ...


class Sink(Component):
    url_option: ClassVar[str | None] = None  # the config field ``--to TYPE:VALUE`` sets; None: ``--to TYPE``

    @abstractmethod
    def export(self, records: list[Record]) -> ExportResult:
        """Deliver ``records``. Return FAILURE when they were not delivered; the pipeline retries."""
