"""Run bridge components in-process on a list of lines, with the real classes and registry."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from obsbox.config import build
from obsbox.exporters.bridge import config as bridge_config
from obsbox.exporters.bridge.component import Context
from obsbox.exporters.bridge.metrics import BridgeMetrics
from obsbox.exporters.bridge.processors.parse import ParseProcessor
from obsbox.exporters.bridge.processors.trace import TraceConfig, TraceProcessor
from obsbox.exporters.bridge.record import Origin, Record
from obsbox.exporters.bridge.runner import Bridge
from obsbox.exporters.bridge.sources.reader import FileReader

ORIGIN = Origin("/var/log/app.json", b"\x01" * 16)
LOGFMT = Origin("/var/log/app.log", ORIGIN.key, logfmt=True)  # a file detected as logfmt, same identity


def context(name: str = "test", metrics: BridgeMetrics | None = None, state_dir: Path = Path(".")) -> Context:
    return Context(name=name, metrics=metrics or BridgeMetrics(), state_dir=state_dir)


def records(*lines: bytes, origin: Origin = ORIGIN) -> list[Record]:
    out, offset = [], 0
    for line in lines:
        out.append(Record(line, origin, offset))
        offset += len(line) + 1
    return out


def traced(*lines: bytes, origin: Origin = ORIGIN, **trace_options) -> list[Record]:
    """Lines through ``parse`` and ``trace`` (config built the way YAML is); ``origin``: the file's,
    e.g. ``LOGFMT`` for a file detected as logfmt."""
    ctx = context()
    recs = ParseProcessor(None, ctx).process(records(*lines, origin=origin))
    return TraceProcessor(build(TraceConfig, trace_options), ctx).process(recs)


def open_reader(path: Path, **options: object) -> FileReader:
    """A file reader over ``path`` from its start, identified even before its first line is whole.
    ``options`` are FileReader's (a read chunk of 1 MiB and a 1 KiB fingerprint unless given)."""
    fd = os.open(path, os.O_RDONLY)
    st = os.fstat(fd)
    settings = {"read_chunk_bytes": 1 << 20, "fingerprint_bytes": 1024, **options}
    reader = FileReader(str(path), fd, st.st_dev, st.st_ino, **settings)  # type: ignore[arg-type]
    reader.identify(allow_incomplete=True)
    reader.start_at(0)
    return reader


class Running:
    """A Bridge running in a thread, with its memory sink, for tail tests."""

    def __init__(
        self,
        include: list[str],
        state_dir: Path,
        *,
        once: bool = False,
        sinks: dict | None = None,
        processors: list[str] | None = None,
        workers: int | None = None,
        **tail_options,
    ) -> None:
        tail = {
            "include": include,
            "positions": str(state_dir / "positions.json"),
            "scan_interval": 0.05,
            "rotate_wait": 0.5,
            "multiline": {"timeout": 0.1},  # the default rules; a last line held 0.1 s, not 0.5 s a wait
            **tail_options,
        }
        processors = processors if processors is not None else ["parse", "trace"]
        sinks = sinks or {"memory": {}}
        data = {
            "sources": {"tail": tail},
            "processors": {p: {} for p in processors},
            "sinks": sinks,
            "pipelines": {
                "logs": {
                    "sources": ["tail"],
                    "processors": processors,
                    "sinks": list(sinks),
                    "batch": {"max_records": 500, "timeout": 0.05},
                }
            },
            "settings": {
                "state_dir": str(state_dir),
                "shutdown_timeout": 5,
                "progress": False,
                "once": once,
                "poll_interval": 0.01,
                **({"workers": workers} if workers is not None else {}),
            },
        }
        self.bridge = Bridge(bridge_config.from_data(data))
        self.sink = self.bridge.pipelines[0].sinks[0]
        self.thread = threading.Thread(target=self.bridge.run, daemon=True)
        self.thread.start()

    def wait_for(self, count: int, timeout: float = 30.0) -> list:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.sink.records()
            if len(got) >= count:
                return got
            time.sleep(0.05)
        return self.sink.records()

    def received(self) -> list[bytes]:
        """The lines the memory sink holds, as the bridge shipped them."""
        return [record.raw for record in self.sink.records()]

    def stop(self) -> None:
        self.bridge.request_stop()
        self.thread.join(15)
        assert not self.thread.is_alive(), "the bridge did not stop within 15 s"
