"""What the Loki and OTLP sinks share: split a batch into requests, send each under the retry policy,
and dead-letter what the server rejects for good (or what still fails when the policy's maximum
elapsed time runs out). Subclasses only encode requests."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

from obsbox.exporters.bridge.component import ExportResult, Sink
from obsbox.exporters.bridge.deadletter import DeadLetter, default_path
from obsbox.exporters.bridge.record import Record
from obsbox.exporters.bridge.retry import Attempt
from obsbox.exporters.bridge.sinks.http import HttpEndpoint, Response, post_attempt

log = logging.getLogger(__name__)


class NetworkSink(Sink):
    """Threading: the pipeline's export thread only; one connection, used sequentially."""

    retryable: frozenset[int] | None = None  # None: 429 and every 5xx

    def __init__(self, config, context) -> None:
        super().__init__(config, context)
        self.endpoint = HttpEndpoint(self.target_url(), config.timeout)
        self.dead_letter = DeadLetter(Path(config.dead_letter or default_path(context.state_dir, context.name)))
        self.retry = config.retry or context.retry

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

            outcome = self.retry.run(send, self.context.abort, retried)
            if outcome is None:
                return ExportResult.FAILURE
            if outcome.kind != "ok":
                reason = outcome.reason if outcome.kind == "reject" else f"gave up retrying: {outcome.reason}"
                self.dead_letter.write(name, chunk, reason, outcome.status)
                metrics.dead_letters.labels(name).inc(len(chunk))
                log.error(
                    "%s rejected %d records (%s); written to %s",
                    name,
                    len(chunk),
                    reason,
                    self.dead_letter.path,
                )
        return ExportResult.SUCCESS

    def shutdown(self) -> None:
        self.endpoint.close()
