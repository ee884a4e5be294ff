"""A small HTTP/1.1 client for the load generator: h11 over asyncio streams, one keep-alive
connection per session (as a browser or IDE plugin holds one), with time to first byte measured
at the first body bytes received.

Why not a general client: the load generator shares two cores with the gateway it measures, and
this path costs a fraction of a general-purpose client's CPU per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import h11


@dataclass
class Exchange:
    status: int
    headers: dict[str, str]
    body: bytes
    sent: float  # perf_counter when the request was written
    first_byte: float  # when the first body bytes arrived
    done: float  # when the response was complete


def parse_target(url: str) -> tuple[str, int]:
    """``http://host:port`` → (host, port); only plain HTTP (the gateway behind a local proxy)."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"target {url!r}: expected http://HOST[:PORT]")
    return parts.hostname, parts.port or 80


class Connection:
    """One keep-alive connection, reopened when the server closes it. Not for concurrent use."""

    def __init__(self, host: str, port: int, timeout: float = 30.0) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.conn: h11.Connection | None = None

    async def request(self, method: str, target: str, headers: list[tuple[str, str]], body: bytes = b"") -> Exchange:
        """Send one request and read the whole response; ``TimeoutError`` after ``timeout`` s."""
        try:
            return await asyncio.wait_for(self._request(method, target, headers, body), self.timeout)
        except BaseException:
            await self.close()  # the connection is in an unknown state
            raise

    async def _request(self, method: str, target: str, headers: list[tuple[str, str]], body: bytes) -> Exchange:
        conn, reader, writer = self.conn, self.reader, self.writer
        if conn is None or reader is None or writer is None or conn.our_state is not h11.IDLE:
            await self.close()
            reader, writer = await asyncio.open_connection(self.host, self.port)
            conn = h11.Connection(h11.CLIENT)
            self.reader, self.writer, self.conn = reader, writer, conn
        all_headers = [("Host", f"{self.host}:{self.port}"), ("Content-Length", str(len(body))), *headers]
        data = conn.send(h11.Request(method=method, target=target, headers=all_headers))
        data += conn.send(h11.Data(data=body)) if body else b""
        data += conn.send(h11.EndOfMessage())
        sent = time.perf_counter()
        writer.write(data)
        await writer.drain()
        status, response_headers, chunks, first_byte = 0, {}, [], 0.0
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                raw = await reader.read(65536)
                conn.receive_data(raw)
                continue
            if isinstance(event, h11.Response):
                status = event.status_code
                response_headers = {k.decode().lower(): v.decode("latin-1") for k, v in event.headers}
            elif isinstance(event, h11.Data):
                if not first_byte and event.data:
                    first_byte = time.perf_counter()
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):
                raise ConnectionError(f"{self.host}:{self.port} closed the connection mid-response")
        done = time.perf_counter()
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()
        return Exchange(status, response_headers, b"".join(chunks), sent, first_byte or done, done)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()
        self.reader = self.writer = self.conn = None
