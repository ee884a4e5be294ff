"""Serve an ASGI app with uvicorn inside an event loop the caller owns.

``uvicorn.Server.serve()`` takes over SIGINT/SIGTERM and re-raises them when it stops; the demo
runs a load generator beside the gateway and needs to stop both in order, so it drives uvicorn's
startup, main loop and shutdown itself and keeps the signals.
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4


class ServerStartError(RuntimeError):
    pass


class GatewayServer:
    def __init__(self, app: Any, host: str, port: int) -> None:
        self.config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=5,
        )
        self.server = uvicorn.Server(self.config)
        self.task: asyncio.Task[None] | None = None
        self.port = port

    async def start(self) -> None:
        config = self.config
        config.load()
        self.server.lifespan = config.lifespan_class(config)
        try:
            await self.server.startup()
        except SystemExit:
            where = f"{config.host}:{config.port}"
            raise ServerStartError(f"could not listen on {where} (in use, or not allowed)") from None
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        self.task = asyncio.create_task(self.server.main_loop())

    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    async def stop(self) -> None:
        self.server.should_exit = True
        if self.task is not None:
            await self.task
            self.task = None
        await self.server.shutdown()


def metrics_app(registry: CollectorRegistry) -> Any:
    """An ASGI app serving ``registry`` in the text format 0.0.4 at any path, whatever the scraper's
    Accept header asks. prometheus_client's OpenMetrics output (which Prometheus asks for first)
    writes ``vllm:ttft`` as ``vllm_ttft`` on sample lines while keeping the colon in ``# TYPE``
    (prometheus/client_python#1177, 0.26.0), so the names would not reach Prometheus as vLLM's."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        headers = [(b"content-type", CONTENT_TYPE_PLAIN_0_0_4.encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": generate_latest(registry)})

    return app
