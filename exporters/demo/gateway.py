"""The demo LLM gateway: an ASGI app with ``POST /v1/chat/completions`` (OpenAI-style, streamed as
server-sent events or not), ``GET /v1/models`` and ``GET /healthz``.

Every request walks the stages of ``pipeline.Pipeline`` and, at completion, writes one line to the
legacy JSON log. ``build_gateway`` returns it instrumented with ``obsbox.exporters.instrument``;
``DemoGateway`` alone is the same app uninstrumented (the benchmark compares the two).
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from opentelemetry import trace

from obsbox.exporters import instrument
from obsbox.exporters.demo.backends import Clock
from obsbox.exporters.demo.latency import LatencyModel
from obsbox.exporters.demo.legacylog import LegacyLogWriter
from obsbox.exporters.demo.pipeline import Chat, Pipeline, RequestFailedError
from obsbox.exporters.demo.scenarios import Scenario, scenario
from obsbox.exporters.demo.vllm_metrics import VllmMetrics
from obsbox.exporters.instrumentation.core import InstrumentConfig
from obsbox.exporters.instrumentation.labels import OTHER

ROUTE = "/v1/chat/completions"
MODELS = ("code-small", "code-large")
MAX_BODY = 1024 * 1024
JSON = [(b"content-type", b"application/json")]
SSE = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


@dataclass
class GatewayConfig:
    scenario: Scenario = field(default_factory=lambda: scenario("untuned"))
    seed: int = 7
    log_dir: Path | None = None  # where gateway.json is appended; None: no legacy log
    time_scale: float = 1.0  # 0: no simulated waiting (benchmarks)
    latency: LatencyModel = field(default_factory=LatencyModel)


class BadRequestError(ValueError):
    pass


def parse_chat(body: bytes) -> Chat:
    """The request body as a ``Chat``; ``BadRequestError`` names the field to fix."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequestError(f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequestError("the body must be a JSON object")
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequestError("'model' must be a non-empty string")
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequestError("'messages' must be a non-empty list")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            raise BadRequestError(f"messages[{i}] must be an object with a string 'content'")
        if message.get("role") not in ("system", "user", "assistant"):
            raise BadRequestError(f"messages[{i}].role must be 'system', 'user' or 'assistant'")
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequestError("'stream' must be true or false")
    max_tokens = data.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1):
        raise BadRequestError("'max_tokens' must be a positive integer")
    return Chat(model=model, messages=messages, stream=stream, max_tokens=max_tokens)


class DemoGateway:
    """The ASGI app. One per process; safe for any number of concurrent requests."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        # the simulated inference backend's own metrics, under vLLM's names (served apart from /metrics)
        self.backend = VllmMetrics(MODELS, config.latency.kv_capacity_tokens)
        clock = Clock(config.time_scale)
        self.pipeline = Pipeline(config.scenario, config.latency, clock, self.rng, self.backend)
        self.log = LegacyLogWriter(config.log_dir) if config.log_dir is not None else None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path == ROUTE:
            if method != "POST":
                await _json(send, 405, {"error": {"message": f"{ROUTE} takes POST, not {method}"}})
                return
            await self.chat(receive, send)
        elif path == "/healthz":
            await _json(send, 200, {"status": "ok", "scenario": self.config.scenario.name})
        elif path == "/v1/models":
            await _json(send, 200, {"object": "list", "data": [{"id": m, "object": "model"} for m in MODELS]})
        else:
            await _json(send, 404, {"error": {"message": f"no route {path}; try POST {ROUTE}"}})

    async def chat(self, receive: Any, send: Any) -> None:
        start = time.perf_counter()
        body = await _read_body(receive)
        if body is None:
            await _json(send, 413, {"error": {"message": f"the body is larger than {MAX_BODY} bytes"}})
            return
        try:
            chat = parse_chat(body)
        except BadRequestError as exc:
            await _json(send, 400, {"error": {"message": str(exc)}})
            return
        reply = _Reply(send, chat)
        status, level, message = 200, "Information", ""
        try:
            await self.pipeline.prepare(chat)
            await self.pipeline.decode(chat, reply.emit)
            await reply.finish()
            message = chat.degraded or f"chat completion served: {chat.reply_tokens} tokens"
            level = "Error" if chat.degraded else "Information"
        except RequestFailedError as failed:
            status, level, message = failed.status, "Error", failed.message
            await reply.fail(status, message)
        except BaseException:
            status, level, message = 499, "Warning", "client closed the request before the reply was complete"
            raise
        finally:
            if chat.engine is not None:  # gone before the backend finished it (a client that hung up)
                chat.engine.finish("abort")
            self._log(chat, status, level, message, start)

    def _log(self, chat: Chat, status: int, level: str, message: str, start: float) -> None:
        """One line in the legacy JSON log, when the gateway writes one (``log_dir``)."""
        log = self.log
        if log is None:
            return
        ctx = trace.get_current_span().get_span_context()
        trace_id, span_id = (
            (ctx.trace_id, ctx.span_id) if ctx.is_valid else (uuid.uuid4().int, self.rng.getrandbits(64) or 1)
        )
        log.request(
            trace_id=trace_id,
            span_id=span_id,
            route=ROUTE,
            model=chat.model if chat.model in MODELS else OTHER,
            status=status,
            duration_ms=(time.perf_counter() - start) * 1000.0,
            message=message,
            level=level,
            stages_s=chat.stages,
        )

    def close(self) -> None:
        if self.log is not None:
            self.log.close()


class _Reply:
    """Streams SSE chunks, or gathers the text for one JSON reply."""

    def __init__(self, send: Any, chat: Chat) -> None:
        self.send = send
        self.chat = chat
        self.started = False
        self.parts: list[str] = []
        self.id = f"chatcmpl-{uuid.uuid4().hex[:24]}"

    async def emit(self, text: str) -> None:
        if not self.chat.stream:
            self.parts.append(text)
            return
        if not self.started:
            self.started = True
            await self.send({"type": "http.response.start", "status": 200, "headers": SSE})
        event: dict[str, Any] = {"id": self.id, "object": "chat.completion.chunk", "model": self.chat.model}
        event["choices"] = [{"index": 0, "delta": {"content": text}, "finish_reason": None}]
        chunk = b"data: " + orjson.dumps(event) + b"\n\n"
        await self.send({"type": "http.response.body", "body": chunk, "more_body": True})

    async def finish(self) -> None:
        usage = {"prompt_tokens": self.chat.prompt_tokens, "completion_tokens": self.chat.reply_tokens}
        if self.chat.stream:
            await self.send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})
            return
        message = {"role": "assistant", "content": "".join(self.parts)}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        body = {"id": self.id, "object": "chat.completion", "model": self.chat.model, "choices": [choice]}
        await _json(self.send, 200, {**body, "usage": usage})

    async def fail(self, status: int, message: str) -> None:
        if self.started:  # the stream is open: say so in-band and end it
            error = orjson.dumps({"error": {"message": message, "code": status}})
            await self.send({"type": "http.response.body", "body": b"data: " + error + b"\n\n", "more_body": False})
        else:
            await _json(self.send, status, {"error": {"message": message, "code": status}})


async def _read_body(receive: Any) -> bytes | None:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _json(send: Any, status: int, body: dict[str, Any]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": JSON})
    await send({"type": "http.response.body", "body": orjson.dumps(body)})


async def _lifespan(receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def build_gateway(
    config: GatewayConfig, instrument_config: InstrumentConfig | None = None, stage_spans: bool = True
) -> Any:
    """The demo gateway, instrumented: ``/metrics`` on its own port, models and routes bounded, and
    (unlike ``instrument()``'s default) a child span per stage, to show the waterfall in traces."""
    app = DemoGateway(config)
    options = {
        "routes": [ROUTE, "/healthz", "/v1/models"],
        "models": MODELS,
        "untraced_paths": ["/healthz"],
        "stage_spans": stage_spans,
    }
    return instrument(app, "gateway", instrument_config, **options)
