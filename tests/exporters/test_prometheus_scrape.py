"""A real Prometheus scrapes an instrumented app's /metrics: histogram_quantile over our buckets
gives the P95 that the bucket math predicts for the latencies we drove, and the exemplars it
stored carry the trace IDs of those requests."""

from __future__ import annotations

import asyncio
import math
import random
import time

import httpx
from prometheus_client import CollectorRegistry

from obsbox import conventions
from obsbox.exporters import instrument
from tests.exporters.servers import Prometheus, no_otlp, serve_asgi, wait_until

# Intended reply latencies sit inside a bucket, at least 25 ms below its upper bound, so the few
# milliseconds the server adds can never move one into the next bucket.
INTERIORS = [(0.055, 0.07), (0.105, 0.17), (0.205, 0.27), (0.305, 0.47), (0.505, 0.72)]
WEIGHTS = [10, 30, 25, 20, 15]


def intended_latencies(n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    ranges = rng.choices(INTERIORS, WEIGHTS, k=n)
    return [round(rng.uniform(low, high), 3) for low, high in ranges]


def expected_quantile(q: float, values: list[float], bounds: tuple[float, ...]) -> float:
    """histogram_quantile's rule, worked out from the values: find the bucket holding rank q*n and
    interpolate linearly between its bounds."""
    n = len(values)
    rank = q * n
    lower = 0.0
    for bound in bounds:
        below = sum(v <= lower for v in values)
        inside = sum(lower < v <= bound for v in values)
        if below + inside >= rank:
            return lower + (bound - lower) * (rank - below) / inside
        lower = bound
    return lower


async def delayed(scope, receive, send):
    if scope["type"] != "http":
        return
    await receive()
    await asyncio.sleep(float(scope["query_string"].decode().partition("=")[2]))
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


async def drive(url: str, latencies: list[float]) -> list[str]:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        responses = await asyncio.gather(*(client.get("/reply", params={"s": s}) for s in latencies))
    assert {r.status_code for r in responses} == {200}
    return [r.headers["traceresponse"].split("-")[1] for r in responses]


def test_histogram_quantile_and_exemplars_from_a_real_prometheus(tmp_path):
    latencies = intended_latencies(120, seed=3)
    registry = CollectorRegistry()
    app = instrument(delayed, "quantiles", registry=registry, routes=["/reply"], otel=no_otlp())
    with serve_asgi(app) as url:
        prometheus = Prometheus(tmp_path, [url.removeprefix("http://")], interval="1s")
        try:
            started = time.time()
            trace_ids = set(asyncio.run(drive(url, latencies)))
            count = f"sum({conventions.REPLY_LATENCY}_count)"

            def scraped_all():
                result = prometheus.api("/api/v1/query", query=count)["result"]
                return result and float(result[0]["value"][1]) == len(latencies)

            wait_until(scraped_all, 20, "Prometheus to scrape every request", interval=0.3)
            query = f"histogram_quantile(0.95, sum by (le) ({conventions.REPLY_LATENCY}_bucket))"
            p95 = float(prometheus.api("/api/v1/query", query=query)["result"][0]["value"][1])
            exemplars = prometheus.api(
                "/api/v1/query_exemplars",
                query=f"{conventions.REPLY_LATENCY}_bucket",
                start=started - 5,
                end=time.time() + 5,
            )
        finally:
            prometheus.close()
    app.instrumentation.shutdown()

    expected = expected_quantile(0.95, latencies, conventions.REPLY_BUCKETS)
    assert math.isclose(p95, expected, rel_tol=1e-9), (p95, expected)
    assert 0.3 < expected < 0.75  # the drive is meant to straddle the SLO threshold
    stored = {e["labels"]["trace_id"] for series in exemplars for e in series["exemplars"]}
    assert stored, "Prometheus stored no exemplar"
    assert stored <= trace_ids  # every exemplar points at a request we made
