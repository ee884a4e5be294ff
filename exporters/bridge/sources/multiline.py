"""Multiline records: a stack trace, a traceback or a panic grouped with the line it belongs to.

The rules are state machines over lines, in the shape of Fluent Bit's built-in multiline parsers
(``src/multiline/flb_ml_parser_java.c``, ``_python.c``, ``_go.c`` at v5.1.1: a rule is "in these
states, a line matching this regex continues the record and moves it to that state"), with one
difference of judgement: a line that begins a trace (``Traceback (most recent call last):``,
``panic: ...``, a Java or .NET exception, a frame) **continues the record before it** when that
record is an ordinary line, as ``logger.exception(...)`` writes its message and then the trace.
A line that no rule of the record's state takes starts a record of its own.

A custom rule takes Vector's ``multiline`` options (``src/line_agg.rs``: ``start_pattern``,
``condition_pattern``, ``mode``: ``continue_through``, ``continue_past``, ``halt_before``,
``halt_with``). Vector emits the line that ends a group on its own; here it is judged as the start
of the next one, which groups the same lines for the patterns Vector's own tests use.

The reader holds a record open until a line that does not continue it arrives, or its file stays
idle for ``timeout`` seconds (0.5 s by default, the collector filelog's ``force_flush_period``;
Fluent Bit's ``flush_timeout`` is 4 s, ``FLB_ML_FLUSH_TIMEOUT`` in
``include/fluent-bit/multiline/flb_ml.h``). A runtime writes a trace in one burst, so a record is
held only until the next line, and the last line of a burst waits for the timeout. A newer
generation of the file being read releases it at once (the writer moved on).
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Any

from obsbox.durations import parse_duration
from obsbox.exporters.bridge.record import Record

PLAIN = "plain"  # an ordinary line, which a trace may continue
DONE = "done"  # a record nothing more continues

# (states, regex, next state). "plain" rules are also the ones a record's first line is judged by.
_FQCN_EXCEPTION = rb"(?:[A-Za-z_$][\w$]*\.)+[A-Za-z_$][\w$]*(?:Exception|Error|Throwable)(?::|\s|$)"
BUILTIN: dict[str, list[tuple[tuple[str, ...], bytes, str]]] = {
    # JVM languages (Java, Kotlin, Scala) and .NET, which print the same shapes (Fluent Bit's java
    # parser carries C#'s rules too): the exception, "at" frames, causes, inner exceptions.
    "java": [
        ((PLAIN,), rb'(?:Exception in thread "[^"]*" |Unhandled exception\. )?' + _FQCN_EXCEPTION, "java"),
        ((PLAIN, "java"), rb"[\t ]+(?:eval )?at \S", "java"),
        (("java",), rb"[\t ]*(?:Caused by|Suppressed): ", "java"),
        (("java",), rb"[\t ]*\.\.\. \d+ (?:more|common frames omitted)", "java"),
        (("java",), rb"[\t ]*--- End of (?:inner exception stack trace|stack trace from previous location)", "java"),
        (("java",), rb"[\t ]*---> ", "java"),
        (("java",), rb"[\t ]*nested exception is:", "java"),
    ],
    "python": [
        ((PLAIN, "py_chain"), rb"Traceback \(most recent call last\):$", "py"),
        (("py",), rb"[\t ]", "py"),  # File "...", line N; the code; the carets of 3.11
        (("py",), rb"(?:[^\s.():]+\.)*[^\s.():]+(?::|$)", "py_end"),  # the exception and its message
        (("py_end", "py_chain"), rb"$", "py_chain"),
        (("py_end", "py_chain"), rb"During handling of the above exception, another exception occurred:$", "py_chain"),
        (("py_end", "py_chain"), rb"The above exception was the direct cause of the following exception:$", "py_chain"),
    ],
    "go": [
        ((PLAIN,), rb"(?:panic: |fatal error: |SIG[A-Z]+: )|.*\bhttp: panic serving", "go"),
        (("go",), rb"$|\[signal |goroutine \d+ \[[^\]]+\]:$|created by |\s", "go"),
        (("go",), rb"(?:[^\s.:]+\.)*[^\s.():]+\(", "go"),  # a function, its file on the next line
        (("go",), rb"exit status \d+$", DONE),
    ],
    # Ruby's own frames ("from file.rb:N:in") and Rails' backtrace lines ("  app/x.rb:N:in `m'")
    "ruby": [((PLAIN, "ruby"), rb"[\t ]+(?:from )?[^\s:][^:]*\.rb:\d+:in [`']", "ruby")],
    # PHP's "Stack trace:" after the error line, its "#N" frames and the closing "thrown in"
    # (the shapes of fluent-plugin-detect-exceptions' PHP rules, which Fluent Bit has no parser for)
    "php": [
        ((PLAIN, "php"), rb"Stack trace:$", "php"),
        (("php",), rb"#\d+ ", "php"),
        (("php",), rb"[\t ]+thrown in ", DONE),
    ],
    # Dart: "Unhandled exception:", the exception's one line, "#N" frames, asynchronous suspensions
    "dart": [
        ((PLAIN,), rb"Unhandled exception:$", "dart"),
        (("dart", "dart_msg", "dart_frames"), rb"#\d+\s+\S", "dart_frames"),
        (("dart",), rb"(?!#)\S", "dart_msg"),
        (("dart_frames",), rb"<asynchronous suspension>$", "dart_frames"),
    ],
}
BUILTIN["dotnet"] = BUILTIN["java"]
BUILTIN["node"] = [((PLAIN, "node"), rb"[\t ]+at \S", "node")]
MODES = ("continue_through", "continue_past", "halt_before", "halt_with")
# a line that may take part in a trace does not start with "{"; a Block of JSON lines has none
CANDIDATE = rb"\n[^{]"
_CANDIDATE = re.compile(CANDIDATE)

hyperscan: Any
try:  # x86_64 wheels (a dependency there); elsewhere ``re`` scans
    import hyperscan
except ImportError:  # pragma: no cover - depends on the platform
    hyperscan = None
_SCAN_DB: Any = None  # CANDIDATE compiled for hyperscan, once a process


class CandidateScan:
    """Does a read hold a line that does not start with ``{``? Every read of a file with ``multiline``
    on asks, in the bridge's own process, over every byte. ``re`` walks the bytes one by one to each
    newline (0.17 µs a 340-byte line, a quarter of what the bridge process spends on a line);
    hyperscan's SIMD scan of a ``memoryview`` costs a quarter of that. One per reader: a scratch
    space serves one thread."""

    def __init__(self) -> None:
        global _SCAN_DB  # noqa: PLW0603 - compiled once, shared read-only by every reader
        self.scratch: Any = None
        self.stopped: type[Exception] = Exception  # hyperscan's ScanTerminated, where it is used
        if hyperscan is not None:
            if _SCAN_DB is None:
                db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
                db.compile(expressions=[CANDIDATE], ids=[0], elements=1, flags=[hyperscan.HS_FLAG_SINGLEMATCH])
                _SCAN_DB = db
            self.scratch, self.stopped = hyperscan.Scratch(_SCAN_DB), hyperscan.ScanTerminated

    def found(self, data: bytes, end: int) -> bool:
        """Is there a candidate in ``data[:end]``?"""
        if self.scratch is None:
            return _CANDIDATE.search(data, 0, end) is not None
        try:
            _SCAN_DB.scan(memoryview(data)[:end], match_event_handler=_stop, scratch=self.scratch)
        except self.stopped:
            return True
        return False


def _stop(*_: Any) -> int:
    return 1  # the first match answers: stop the scan (it raises ScanTerminated)


@dataclass(frozen=True)
class MultilineConfig:
    """A tail source's ``multiline`` option, checked (see :func:`parse`)."""

    rules: tuple[str, ...] = ()  # built-in rule sets, in order
    start_pattern: str | None = None  # a custom rule (Vector's shape)
    condition_pattern: str = ""
    mode: str = "continue_through"
    timeout: float = 0.5

    def compile(self) -> Rules | None:
        if not self.rules and self.start_pattern is None:
            return None
        return Rules(self)


def parse(value: Any) -> MultilineConfig:  # noqa: PLR0912 - one check per key, each its own message
    """``auto`` (every built-in rule), ``none``, a list of built-in names, or a mapping: ``rules``
    (``auto``, ``none`` or a list) or a custom ``start_pattern`` / ``condition_pattern`` / ``mode``,
    with ``timeout`` (seconds). Raises ValueError naming the key at fault."""
    if isinstance(value, MultilineConfig):
        return value
    if not isinstance(value, dict):
        value = {"rules": value}
    unknown = set(value) - {"rules", "start_pattern", "condition_pattern", "mode", "timeout"}
    if unknown:
        raise ValueError(f"multiline: unknown key {sorted(unknown)[0]!r}")
    timeout = value.get("timeout", 0.5)
    if isinstance(timeout, str):
        with contextlib.suppress(ValueError):  # reported below, with the key's name
            timeout = parse_duration(timeout, bare_seconds=True)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise ValueError(f"multiline.timeout must be a number of seconds above 0, not {timeout!r}")
    if "start_pattern" in value or "condition_pattern" in value:
        if "rules" in value:
            raise ValueError("multiline: give rules or start_pattern/condition_pattern, not both")
        mode = value.get("mode", "continue_through")
        if mode not in MODES:
            raise ValueError(f"multiline.mode must be one of {', '.join(MODES)}, not {mode!r}")
        patterns = {}
        for key in ("start_pattern", "condition_pattern"):
            pattern = value.get(key)
            if not isinstance(pattern, str):
                raise ValueError(f"multiline.{key} is needed, a regular expression")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"multiline.{key} is not a regular expression: {exc}") from None
            patterns[key] = pattern
        return MultilineConfig((), patterns["start_pattern"], patterns["condition_pattern"], mode, float(timeout))
    rules = value.get("rules", "auto")
    if rules == "auto":
        names: list[str] = ["java", "python", "go", "ruby", "node", "php", "dart"]
    elif rules in ("none", None, False):
        names = []
    elif isinstance(rules, list) and all(isinstance(name, str) for name in rules):
        names = rules
    else:
        raise ValueError(f"multiline must be auto, none, a list of {sorted(BUILTIN)} or a custom rule, not {rules!r}")
    bad = [name for name in names if name not in BUILTIN]
    if bad:
        raise ValueError(f"multiline: unknown rules {bad} (built-in: {', '.join(sorted(BUILTIN))})")
    return MultilineConfig(tuple(dict.fromkeys(names)), timeout=float(timeout))


class Rules:
    """The compiled rules: which state a record's first line puts it in, and whether a line continues
    a record in a given state (its next state) or not (None)."""

    def __init__(self, config: MultilineConfig) -> None:
        self.timeout = config.timeout
        self.scan = CandidateScan()
        self.custom: tuple[re.Pattern[bytes], re.Pattern[bytes], str] | None = None
        self.states: dict[str, list[tuple[re.Pattern[bytes], str]]] = {}
        if config.start_pattern is not None:
            self.custom = (
                re.compile(config.start_pattern.encode()),
                re.compile(config.condition_pattern.encode()),
                config.mode,
            )
            return
        for name in config.rules:
            for states, regex, target in BUILTIN[name]:
                for state in states:
                    self.states.setdefault(state, []).append((re.compile(regex), target))

    def first(self, line: bytes) -> str:
        """The state a record that starts with ``line`` is in."""
        if self.custom is not None:
            return "custom" if self.custom[0].search(line) else DONE
        for regex, target in self.states[PLAIN]:
            if regex.match(line):
                return target
        return PLAIN

    def next(self, state: str, line: bytes) -> str | None:  # noqa: PLR0911 - Vector's four modes
        """The record's state once ``line`` continues it; None when ``line`` starts a record."""
        if self.custom is not None:
            if state != "custom":
                return None
            matched = self.custom[1].search(line) is not None
            mode = self.custom[2]
            if mode == "continue_through":
                return state if matched else None
            if mode == "continue_past":
                return state if matched else DONE
            if mode == "halt_before":
                return None if matched else state
            return DONE if matched else state  # halt_with
        for regex, target in self.states.get(state, ()):
            if regex.match(line):
                return target
        return None

    def plain_block(self, data: bytes, end: int) -> bool:
        """Can no line of ``data[:end]`` begin or continue a trace? True for JSON lines, at C speed."""
        return self.custom is None and data[:1] == b"{" and not self.scan.found(data, end - 1)


class Group:
    """A record being put together: its first line's Record, the lines after it, and its state."""

    __slots__ = ("first", "lines", "seq", "size", "state", "truncated")

    def __init__(self, first: Record, state: str, seq: int) -> None:
        self.first, self.state, self.seq = first, state, seq
        self.lines: list[bytes] = []
        self.size = len(first.raw)
        self.truncated = first.truncated

    def record(self) -> tuple[Record, int]:
        """The grouped Record, and how many lines were added to its first one."""
        rec = self.first
        if self.lines:
            rec.rest = b"\n" + b"\n".join(self.lines)
            rec.truncated = self.truncated
        return rec, len(self.lines)


class Grouper:
    """Groups one file's Records into multiline records, per stream (stdout and stderr never mix;
    a plain file is one stream). ``max_bytes`` bounds a record: a line that would pass it starts a
    record of its own, and the one before is flagged truncated. Records leave in the order their
    first lines came: one of stdout waits while a record of stderr that began before it is open.
    Threading: owned by one reader."""

    def __init__(self, rules: Rules, max_bytes: int) -> None:
        self.rules, self.max_bytes = rules, max_bytes
        self.open: dict[str | None, Group] = {}
        self.ready: list[tuple[int, Record]] = []  # closed, behind an open record that began before
        self.seq = 0  # records begun so far: their order of arrival
        self.grouped = 0  # lines added to a record before them, since last taken

    def feed(self, records: list[Record], out: list[Record]) -> None:
        """Group ``records`` (in file order); records whose group closed go to ``out``."""
        rules, open_ = self.rules, self.open
        for rec in records:
            stream = rec.attributes.get("log.iostream") if rec.attributes else None
            group = open_.get(stream)
            if group is not None and not rec.truncated:
                state = rules.next(group.state, rec.raw)
                if state is not None:
                    if group.size + 1 + len(rec.raw) <= self.max_bytes:
                        group.lines.append(rec.raw)
                        group.size += 1 + len(rec.raw)
                        group.state = state
                        continue
                    group.truncated = True
            if group is not None:
                self._close(group)
            self.seq += 1
            open_[stream] = Group(rec, rules.first(rec.raw), self.seq)
        self._release(out)

    def flush(self, out: list[Record]) -> None:
        """Emit every open record (the timeout, or the end of a bounded read)."""
        for group in self.open.values():
            self._close(group)
        self.open.clear()
        self._release(out)

    def close(self, stream: str | None, out: list[Record]) -> None:
        """Emit the record open on ``stream`` now (it cannot be held)."""
        self._close(self.open.pop(stream))
        self._release(out)

    def pending_start(self) -> int | None:
        """The offset of the first line of the oldest record still open."""
        return min((group.first.offset for group in self.open.values()), default=None)

    def _close(self, group: Group) -> None:
        rec, added = group.record()
        self.grouped += added
        self.ready.append((group.seq, rec))

    def _release(self, out: list[Record]) -> None:
        """Hand on the closed records that no open record began before."""
        if not self.ready:
            return
        first_open = min((group.seq for group in self.open.values()), default=None)
        ready = sorted(self.ready, key=lambda item: item[0]) if len(self.ready) > 1 else self.ready
        cut = len(ready) if first_open is None else sum(1 for seq, _ in ready if seq < first_open)
        out.extend([rec for _, rec in ready[:cut]])
        self.ready = ready[cut:]
