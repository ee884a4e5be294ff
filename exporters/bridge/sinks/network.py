"""What the Loki and OTLP sinks share: split a batch into requests, send each under the retry policy,
and dead-letter what the server rejects for good (or what still fails when the policy's maximum
elapsed time runs out). Subclasses only encode requests."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

from obsbox.exporters.bridge.component import ExportResult, Sink
from obsbox.exporters.bridge.deadletter import DeadLetter, default_path
from obsbox.exporters.bridge.record import Record
from obsbox.exporters.bridge.retry import Attempt
from obsbox.exporters.bridge.sinks.http import HttpEndpoint, Response, post_attempt
from obsbox.exporters.bridge.sinks.rejections import refused

log = logging.getLogger(__name__)
UNSAID = "which of the {} records were refused was not fully said: all are here, some may also have been stored"


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

    def requests(self, records: Sequence[Record]) -> Iterator[tuple[bytes, dict[str, str], Sequence[Record]]]:
        raise NotImplementedError

    def accepted(self, response: Response, records: Sequence[Record]) -> None:
        """Hook for a 2xx response (OTLP reads partial success here)."""

    def answer_text(self, response: Response) -> str:
        """What the receiver said in a failed response's body (OTLP wraps it in a ``Status``)."""
        return response.body.decode("utf-8", "replace")

    def export(self, records: Sequence[Record]) -> ExportResult:
        metrics, name = self.context.metrics, self.context.name
        for body, headers, chunk in self.requests(records):
            last: list[Response | None] = [None]

            def send(
                body: bytes = body,
                headers: dict[str, str] = headers,
                chunk: Sequence[Record] = chunk,
                last: list[Response | None] = last,
            ) -> Attempt:
                attempt, response = post_attempt(self.endpoint, body, headers, self.retryable)
                last[0] = response
                if attempt.kind == "ok" and response is not None:
                    self.accepted(response, chunk)
                elif response is not None:
                    said = self.answer_text(response).strip()
                    attempt = attempt._replace(reason=f"HTTP {response.status}: {said[:500]}")
                return attempt

            def retried(attempt: Attempt) -> None:
                reason = f"http_{attempt.status}" if attempt.status else "connection"
                metrics.retries.labels(name, reason).inc()
                log.warning("%s: %s; retrying", name, attempt.reason)

            outcome = self.retry.run(send, self.context.abort, retried)
            if outcome is None:
                return ExportResult.FAILURE
            if outcome.kind == "reject":
                message = self.answer_text(last[0]) if last[0] is not None else outcome.reason
                self.refuse(chunk, message, outcome.reason, outcome.status)
            elif outcome.kind == "retry":
                self.refuse(chunk, None, f"gave up retrying: {outcome.reason}", outcome.status)
        return ExportResult.SUCCESS

    def refuse(
        self, chunk: Sequence[Record], message: str | None, reason: str, status: int | None, expected: int | None = None
    ) -> None:
        """Dead-letter what the receiver refused: the records its ``message`` names (Loki keeps the
        rest of a request; see ``rejections``), else every record of the request, marked as such: the
        receiver may have kept some of them, so a line there may be a duplicate, never a loss."""
        name = self.context.name
        named = refused(message, chunk, expected) if message else None
        records: Sequence[Record]
        if named is not None:
            records, why = named, f"{reason} ({len(named)} of {len(chunk)} refused; the rest were accepted)"
        elif message:
            records, why = chunk, f"{reason} ({UNSAID.format(len(chunk))})"
            self.context.metrics.errors.labels("refusal_unattributed").inc()
        else:
            records, why = chunk, reason
        self.dead_letter.write(name, records, why, status)
        self.context.metrics.dead_lettered(name, len(records))
        log.error("%s refused %d records (%s); written to %s", name, len(records), why, self.dead_letter.path)

    def shutdown(self) -> None:
        self.endpoint.close()
