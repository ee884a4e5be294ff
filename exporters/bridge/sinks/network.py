"""What the Loki and OTLP sinks share: split a batch into requests, send each with retries, and
dead-letter what the server rejects for good. Subclasses only encode requests."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

from obsbox.exporters.bridge.component import ExportResult, Sink
from obsbox.exporters.bridge.record import Record
from obsbox.exporters.bridge.sinks.deadletter import DeadLetter
from obsbox.exporters.bridge.sinks.http import HttpEndpoint, Response, post_attempt
from obsbox.exporters.bridge.sinks.retry import Attempt, with_retry

log = logging.getLogger(__name__)


class NetworkSink(Sink):
    """Threading: pipeline thread only; one connection, used sequentially."""

    retryable: frozenset[int] | None = None  # None: 429 and every 5xx

    def __init__(self, config, context) -> None:
        super().__init__(config, context)
        self.endpoint = HttpEndpoint(self.target_url(), config.timeout)
        dead = config.dead_letter or context.state_dir / f"dead-letter-{context.name.replace('/', '-')}.jsonl"
        self.dead_letter = DeadLetter(Path(dead))

    def target_url(self) -> str:
        raise NotImplementedError

    def requests(self, records: list[Record]) -> Iterator[tuple[bytes, dict[str, str], list[Record]]]:
        raise NotImplementedError

    def accepted(self, response: Response, records: list[Record]) -> None:
        """Hook for a 2xx response (OTLP reads partial success here)."""

    def export(self, records: list[Record]) -> ExportResult:
        metrics, name = self.context.metrics, self.context.name
        for body, headers, chunk in self.requests(records):

            def send(body: bytes = body, headers: dict[str, str] = headers, chunk: list[Record] = chunk) -> Attempt:
                attempt, response = post_attempt(self.endpoint, body, headers, self.retryable)
                if attempt.kind == "ok" and response is not None:
                    self.accepted(response, chunk)
                return attempt

            def retried(attempt: Attempt) -> None:
                reason = f"http_{attempt.status}" if attempt.status else "connection"
                metrics.retries.labels(name, reason).inc()
                log.warning("%s: %s; retrying", name, attempt.reason)

            outcome = with_retry(send, self.config.retry, self.context.abort, retried)
            if outcome is None:
                return ExportResult.FAILURE
            if outcome.kind == "reject":
                self.dead_letter.write(name, chunk, outcome.reason, outcome.status)
                metrics.dead_letters.labels(name).inc(len(chunk))
                log.error(
                    "%s rejected %d records (%s); written to %s",
                    name,
                    len(chunk),
                    outcome.reason,
                    self.dead_letter.path,
                )
        return ExportResult.SUCCESS

    def shutdown(self) -> None:
        self.endpoint.close()
