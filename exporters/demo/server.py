"""Serve an ASGI app with uvicorn inside an event loop the caller owns.

``uvicorn.Server.serve()`` takes over SIGINT/SIGTERM and re-raises them when it stops; the demo
runs a load generator beside the gateway and needs to stop both in order, so it drives uvicorn's
startup, main loop and shutdown itself and keeps the signals.
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn


class ServerStartError(RuntimeError):
    pass


class GatewayServer:
    def __init__(self, app: Any, host: str, port: int, lifespan: str = "on") -> None:
        """``lifespan``: "off" for an app that speaks only HTTP (prometheus_client's ``make_asgi_app``)."""
        self.config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            lifespan=lifespan,
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
