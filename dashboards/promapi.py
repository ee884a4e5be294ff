"""A small client for Prometheus's HTTP query API (``/api/v1/query`` and ``/api/v1/query_range``)."""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from urllib.parse import urlencode

TIMEOUT_SECONDS = 30.0


class PrometheusError(RuntimeError):
    """Prometheus could not be reached, or refused the query; the message has its error text."""


@dataclass
class Series:
    """One series of a query result: its labels and its (timestamp, value) points."""

    labels: dict[str, str]
    times: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)

    def name(self, legend: str) -> str:
        """The legend with ``{{label}}`` replaced, as Grafana draws it."""
        out = legend
        for key, value in self.labels.items():
            out = out.replace("{{" + key + "}}", value)
        return out or ",".join(f"{k}={v}" for k, v in sorted(self.labels.items())) or "value"

    @property
    def finite(self) -> list[float]:
        return [v for v in self.values if math.isfinite(v)]


class Prometheus:
    def __init__(self, url: str, timeout: float = TIMEOUT_SECONDS) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _get(self, path: str, params: dict[str, str]) -> dict:
        url = f"{self.url}{path}?{urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            try:
                body = json.loads(exc.read())
            except ValueError:
                raise PrometheusError(f"{path} answered {exc.code} {exc.reason}; is {self.url} Prometheus?") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise PrometheusError(f"cannot reach Prometheus at {self.url} ({reason}): check --prometheus") from None
        except ValueError:
            raise PrometheusError(f"{url} did not answer JSON; is {self.url} Prometheus?") from None
        if body.get("status") != "success":
            raise PrometheusError(f"{body.get('errorType', 'error')}: {body.get('error', body)}")
        return body["data"]

    def query(self, expr: str, time: float | None = None) -> list[Series]:
        params = {"query": expr}
        if time is not None:
            params["time"] = f"{time:.3f}"
        return self._series(self._get("/api/v1/query", params))

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        return self._series(self._get("/api/v1/query_range", params))

    def query_exemplars(self, expr: str, start: float, end: float) -> list[dict[str, str]]:
        """The labels of every exemplar of the series ``expr`` selects (``trace_id`` ...)."""
        data = self._get("/api/v1/query_exemplars", {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}"})
        return [e["labels"] for s in data for e in s.get("exemplars", [])]

    def alerts(self) -> list[dict]:
        """The alerts Prometheus holds, pending or firing, with their labels and rendered annotations."""
        return list(self._get("/api/v1/alerts", {})["alerts"])

    @staticmethod
    def _series(data: dict) -> list[Series]:
        kind, result = data["resultType"], data["result"]
        if kind == "matrix":
            return [
                Series(r["metric"], [float(t) for t, _ in r["values"]], [float(v) for _, v in r["values"]])
                for r in result
            ]
        if kind == "vector":
            return [Series(r["metric"], [float(r["value"][0])], [float(r["value"][1])]) for r in result]
        if kind == "scalar":
            return [Series({}, [float(result[0])], [float(result[1])])]
        raise PrometheusError(f"unexpected result type {kind!r}")
