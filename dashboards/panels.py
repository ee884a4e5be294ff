"""A thin layer over grafanalib: datasource references as ``{type, uid}``, stable panel IDs, a grid.

grafanalib 0.7 writes datasources the way Grafana 8 read them, as plain strings, and Grafana 11
no longer resolves those (grafanalib issue #493). Every panel, target and template variable built
here refers to its datasource as an object, ``{"type": "prometheus", "uid": "${ds_prometheus}"}``,
and :meth:`ObsboxDashboard.to_json_data` refuses to emit a string reference that slipped in.

Panel IDs come from a key (the title unless given), so inserting a panel does not renumber the
others; a collision is an error that names both keys. Layout is a left-to-right grid, 24 columns
wide, that wraps; rows take a full line.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Sequence

import attr
from grafanalib import core as g
from grafanalib._gen import DashboardEncoder

from obsbox import conventions as c
from obsbox.dashboards.queries import LLM_RECORDED, Query

SCHEMA_VERSION = 39  # Grafana 10.4 / 11: no migration runs on these dashboards
GRID_WIDTH = 24
MIXED = {"type": "datasource", "uid": "-- Mixed --"}
TAG = "obsbox"
ALL = "$__all"


class DashboardError(ValueError):
    """A dashboard definition that Grafana would not render as intended."""


def ds_variable(kind: str) -> str:
    return f"ds_{kind}"


def ds_ref(kind: str) -> dict[str, str]:
    """The datasource reference Grafana 11 needs: the plugin type and the UID (here, a variable)."""
    if kind not in c.DATASOURCE_UIDS:
        raise DashboardError(
            f"unknown datasource {kind!r}; conventions.DATASOURCE_UIDS has {sorted(c.DATASOURCE_UIDS)}"
        )
    return {"type": kind, "uid": f"${{{ds_variable(kind)}}}"}


def steps(*levels: tuple[float, str], base: str = "green") -> list[dict]:
    """Threshold steps: the base colour, then (value, colour) in increasing order."""
    values = [v for v, _ in levels]
    if values != sorted(values):
        raise DashboardError(f"threshold values must increase, got {values}")
    return [{"color": base, "value": None}] + [{"color": color, "value": value} for value, color in levels]


# ---------------------------------------------------------------- targets


@attr.s
class PromTarget(g.Target):
    """A Prometheus (or Loki) query with an object datasource, the exemplar toggle and the query type."""

    exemplar = attr.ib(default=False)
    lang = attr.ib(default="promql")

    def to_json_data(self):
        data = super().to_json_data()
        data.pop("query", None)
        data.pop("target", None)
        data.pop("metric", None)
        data.pop("step", None)
        data["range"] = not self.instant
        if self.lang == "promql":
            data["exemplar"] = self.exemplar
            data["editorMode"] = "code"
        else:
            data["queryType"] = "instant" if self.instant else "range"
        return data


@attr.s
class TempoTarget:
    """A TraceQL search, as Grafana's Tempo datasource stores it."""

    query = attr.ib()
    ref_id = attr.ib()
    datasource = attr.ib()
    limit = attr.ib(default=20)

    def to_json_data(self):
        return {
            "datasource": self.datasource,
            "limit": self.limit,
            "query": self.query,
            "queryType": "traceql",
            "refId": self.ref_id,
            "tableType": "traces",
        }


def targets(
    queries: Sequence[Query], *, instant: bool = False, fmt: str = "time_series", exemplar: bool = False
) -> list[PromTarget | TempoTarget]:
    out: list[PromTarget | TempoTarget] = []
    for index, query in enumerate(queries):
        ref = chr(ord("A") + index)
        if query.lang == "traceql":
            out.append(TempoTarget(query=query.expr, ref_id=ref, datasource=ds_ref("tempo")))
        else:
            out.append(
                PromTarget(
                    expr=query.expr,
                    legendFormat=query.legend,
                    refId=ref,
                    instant=instant,
                    format=fmt,
                    exemplar=exemplar,
                    lang=query.lang,
                    datasource=ds_ref(query.datasource),
                    intervalFactor=1,
                )
            )
    return out


def panel_datasource(queries: Sequence[Query]) -> dict[str, str]:
    kinds = {q.datasource for q in queries}
    return ds_ref(kinds.pop()) if len(kinds) == 1 else dict(MIXED)


def _common(title: str, description: str, queries: Sequence[Query], threshold_steps: list[dict], **target_options):
    if not description.strip():
        raise DashboardError(f"panel {title!r} needs a description")
    return {
        "title": title,
        "description": description,
        "dataSource": panel_datasource(queries),
        "targets": targets(queries, **target_options),
        "thresholds": threshold_steps,
    }


# ---------------------------------------------------------------- panels


def timeseries(
    title: str,
    description: str,
    queries: Sequence[Query],
    *,
    unit: str,
    thresholds: list[dict],
    lines: bool = False,
    stack: bool = False,
    bounds: tuple[int | None, int | None] = (None, None),
    exemplar: bool = False,
) -> g.TimeSeries:
    """A time series; ``lines`` draws the threshold values as dashed lines (SLO lines, autoscale levels)."""
    return g.TimeSeries(
        **_common(title, description, queries, thresholds, exemplar=exemplar),
        unit=unit,
        thresholdsStyleMode="dashed" if lines else "off",
        stacking={"mode": "normal", "group": "A"} if stack else {"mode": "none", "group": "A"},
        fillOpacity=40 if stack else 10,
        valueMin=bounds[0],
        valueMax=bounds[1],
        legendDisplayMode="table",
        legendPlacement="right" if len(queries) > 2 else "bottom",
        legendCalcs=["mean", "max", "lastNotNull"],
        tooltipMode="multi",
        tooltipSort="desc",
        lineWidth=2,
    )


def stat(
    title: str,
    description: str,
    queries: Sequence[Query],
    *,
    unit: str,
    thresholds: list[dict],
    texts: dict[str, str] | None = None,
) -> g.Stat:
    """A single value, coloured by ``thresholds``; ``texts`` shows a value as words (``{"0": "missing"}``)."""
    mappings = [
        {"type": "value", "options": {v: {"text": t, "index": i} for i, (v, t) in enumerate((texts or {}).items())}}
    ]
    return g.Stat(
        **_common(title, description, queries, thresholds),
        format=unit,
        reduceCalc="lastNotNull",
        colorMode="background",
        graphMode="area",
        noValue="no data",
        mappings=mappings if texts else [],
    )


def state_timeline(title: str, description: str, queries: Sequence[Query], *, value_text: str, color: str):
    """One lane per series; a sample (value 1, as ``ALERTS`` has) shows as ``value_text`` in ``color``."""
    return g.StateTimeline(
        **_common(title, description, queries, steps()),
        mappings=[{"type": "value", "options": {"1": {"text": value_text, "color": color, "index": 0}}}],
        extraJson={"fieldConfig": {"defaults": {"unit": "none"}}},
    )


def table(
    title: str,
    description: str,
    queries: Sequence[Query],
    *,
    unit: str,
    thresholds: list[dict],
    sort_by: str = "",
    renames: dict[str, tuple[str, str]] | None = None,
) -> g.Table:
    """An instant-query table; several queries are joined on their labels (Grafana's ``merge``).

    ``renames`` maps a value field (``Value``, or ``Value #A`` for query A once merged) to its column
    title and unit.
    """
    overrides = [
        {
            "matcher": {"id": "byName", "options": field},
            "properties": [{"id": "displayName", "value": name}, {"id": "unit", "value": field_unit}],
        }
        for field, (name, field_unit) in (renames or {}).items()
    ]
    return g.Table(
        **_common(title, description, queries, thresholds, instant=True, fmt="table"),
        unit=unit,
        displayMode="color-text",
        overrides=overrides,
        transformations=[
            {"id": "merge", "options": {}},
            {"id": "organize", "options": {"excludeByName": {"Time": True}}},
        ],
        sortBy=[g.TableSortByField(displayName=sort_by, desc=True)] if sort_by else [],
    )


def traces_table(title: str, description: str, queries: Sequence[Query]) -> g.Table:
    """A Tempo search: one row per trace, each linking to its waterfall."""
    return g.Table(**_common(title, description, queries, steps()), unit="none")


@attr.s
class ExemplarHeatmap(g.Panel):
    """Grafana's heatmap panel (the one since 9.0) over pre-bucketed Prometheus histograms, with exemplars.

    grafanalib's ``Heatmap`` writes the options of the retired Angular heatmap; this writes the current
    ``options`` model: buckets as given (``calculate: false``), and exemplars drawn as points that
    link to their trace through the datasource's ``exemplarTraceIdDestinations``.
    """

    unit = attr.ib(default="s")

    def to_json_data(self):
        return self.panel_json(
            {
                "type": g.HEATMAP_TYPE,
                "fieldConfig": {"defaults": {"unit": self.unit}, "overrides": []},
                "options": {
                    "calculate": False,
                    "cellGap": 1,
                    "color": {
                        "exponent": 0.5,
                        "fill": "dark-orange",
                        "mode": "scheme",
                        "reverse": False,
                        "scale": "exponential",
                        "scheme": "Oranges",
                        "steps": 64,
                    },
                    "exemplars": {"color": "rgba(255,0,255,0.7)"},
                    "filterValues": {"le": 1e-09},
                    "legend": {"show": True},
                    "rowsFrame": {"layout": "le"},
                    "showValue": "never",
                    "tooltip": {"mode": "single", "show": True, "yHistogram": True},
                    "yAxis": {"axisPlacement": "left", "unit": self.unit},
                    "cellValues": {"unit": "short"},
                },
            }
        )


def heatmap(title: str, description: str, queries: Sequence[Query], *, unit: str, thresholds: list[dict]):
    return ExemplarHeatmap(
        **_common(title, description, queries, thresholds, fmt="heatmap", exemplar=True), unit=unit, maxDataPoints=200
    )


def logs(title: str, description: str, queries: Sequence[Query]) -> g.Logs:
    return g.Logs(
        **_common(title, description, queries, steps()),
        showTime=True,
        wrapLogMessages=True,
        enableLogDetails=True,
        sortOrder="Descending",
        extraJson={"fieldConfig": {"defaults": {"unit": "none"}}},
    )


# ---------------------------------------------------------------- template variables


def datasource_variable(kind: str) -> g.Template:
    """Pick the datasource by UID; the default is the one compose provisions."""
    t = g.Template(name=ds_variable(kind), label=kind.capitalize(), query=kind, type="datasource", regex="")
    uid = c.DATASOURCE_UIDS[kind]
    t._current = {"selected": False, "text": uid, "value": uid}
    return t


def query_variable(name: str, label: str, *, metric: str, label_name: str, match: str = "", all_value: str = ".*"):
    """A multi-value variable from ``label_values``; "All" becomes ``all_value`` in the queries."""
    selector = f"{{{match}}}" if match else ""
    t = g.Template(
        name=name,
        label=label,
        query=f"label_values({metric}{selector}, {label_name})",
        dataSource=ds_ref("prometheus"),
        includeAll=True,
        multi=True,
        allValue=all_value,
        refresh=g.REFRESH_ON_TIME_RANGE_CHANGE,
        sort=g.SORT_ALPHA_ASC,
    )
    t._current = {"selected": True, "text": ["All"], "value": [ALL]}
    return t


def custom_variable(name: str, label: str, values: Sequence[str]) -> g.Template:
    """A multi-value variable over fixed ``values``, All by default (``.*`` in the queries)."""
    t = g.Template(
        name=name, label=label, query=",".join(values), type="custom", includeAll=True, multi=True, allValue=".*"
    )
    t._current = {"selected": True, "text": ["All"], "value": [ALL]}
    return t


def textbox_variable(name: str, label: str) -> g.Template:
    t = g.Template(name=name, label=label, query="", type="textbox")
    t._current = {"selected": False, "text": "", "value": ""}
    return t


def standard_variables(service_metric: str, *, extra: Iterable[str] = ()) -> list[g.Template]:
    """Datasource (by UID), service, route and model: on every dashboard.

    ``service_metric`` is the metric whose ``job`` values list the services that dashboard is about.
    "All" services is ``.+``: Loki refuses a selector that matches the empty string.
    """
    request_count = f"{c.REQUEST_DURATION}_count"
    return [
        datasource_variable("prometheus"),
        *(datasource_variable(kind) for kind in extra),
        query_variable("service", "Service", metric=service_metric, label_name="job", all_value=".+"),
        query_variable("route", "Route", metric=request_count, label_name="route", match='job=~"$service"'),
        query_variable(
            "model", "Model", metric=request_count, label_name="model", match='job=~"$service", route=~"$route"'
        ),
    ]


def llm_variables(service_metric: str) -> list[g.Template]:
    """Datasource, ``source`` and ``model`` from the recorded ``obsbox:llm_*`` series, and ``service``.

    ``source`` and ``model`` list what the LLM recording rules recorded, so they offer whichever
    serving stacks exist; ``service`` (the ``job`` of ``service_metric``) is for panels on a gateway's
    own metrics. A source without a model label records none: "All" (``.*``) keeps its series.
    """
    return [
        datasource_variable("prometheus"),
        query_variable("source", "Source", metric="", label_name="source", match=LLM_RECORDED),
        query_variable("model", "Model", metric="", label_name="model", match=f'{LLM_RECORDED}, source=~"$source"'),
        query_variable("service", "Service", metric=service_metric, label_name="job", all_value=".+"),
    ]


# ---------------------------------------------------------------- layout and the dashboard


def panel_id(key: str) -> int:
    return zlib.crc32(key.encode()) % 1_000_000 + 1


class Grid:
    """Places panels left to right on Grafana's 24-column grid and gives each a stable ID."""

    def __init__(self) -> None:
        self.panels: list[g.Panel] = []
        self.keys: dict[int, str] = {}
        self.x = self.y = self.line_height = 0

    def _newline(self) -> None:
        self.y += self.line_height
        self.x = self.line_height = 0

    def _id(self, key: str) -> int:
        pid = panel_id(key)
        if pid in self.keys:
            other = self.keys[pid]
            problem = f"two panels have the key {key!r}" if other == key else f"keys {other!r} and {key!r} collide"
            raise DashboardError(f"{problem} (panel ID {pid}); give one of them another key=")
        self.keys[pid] = key
        return pid

    def row(self, title: str, key: str | None = None) -> None:
        if self.x:
            self._newline()
        row = g.RowPanel(title=title, gridPos=g.GridPos(h=1, w=GRID_WIDTH, x=0, y=self.y))
        self.panels.append(attr.evolve(row, id=self._id(f"row:{key or title}")))
        self.y += 1

    def add(self, panel: g.Panel, w: int = 12, h: int = 8, key: str | None = None) -> None:
        if not 0 < w <= GRID_WIDTH or h <= 0:
            raise DashboardError(f"panel {panel.title!r}: width must be 1..{GRID_WIDTH} and height positive")
        if self.x + w > GRID_WIDTH:
            self._newline()
        placed = attr.evolve(panel, gridPos=g.GridPos(h=h, w=w, x=self.x, y=self.y), id=self._id(key or panel.title))
        self.panels.append(placed)
        self.x += w
        self.line_height = max(self.line_height, h)


def to_plain(obj) -> object:
    """grafanalib objects as plain JSON values."""
    return json.loads(json.dumps(obj, cls=DashboardEncoder, sort_keys=True))


def check_datasources(node: object, where: str = "dashboard") -> None:
    """Every ``datasource`` is ``{type, uid}`` (rows may have none): Grafana 11 ignores the string form."""
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{where}.{key}"
            if key == "datasource" and value is not None:
                if not (isinstance(value, dict) and value.get("type") and value.get("uid")):
                    raise DashboardError(f"{here} is {value!r}; Grafana 11 needs an object {{type, uid}}")
            else:
                check_datasources(value, here)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            check_datasources(value, f"{where}[{index}]")


@attr.s
class ObsboxDashboard(g.Dashboard):
    """A grafanalib ``Dashboard`` whose JSON is Grafana 11's model, checked before it is returned."""

    def to_json_data(self):
        data = to_plain(super().to_json_data())
        if not isinstance(data, dict):
            raise DashboardError(f"a dashboard's JSON must be an object, got {type(data).__name__}")
        check_datasources(data)
        for key in ("rows", "style", "hideControls", "sharedCrosshair", "gnetId", "__inputs"):
            data.pop(key, None)
        for panel in data["panels"]:
            if panel["type"] == g.ROW_TYPE:
                panel.pop("datasource", None)
                continue
            for holder in [panel, *panel.get("targets", [])]:
                if not isinstance(holder.get("datasource"), dict):
                    where = f"target {holder['refId']} of " if holder is not panel else ""
                    raise DashboardError(f"{where}panel {panel['title']!r} has no {{type, uid}} datasource")
            defaults = panel["fieldConfig"]["defaults"]
            if not defaults.get("unit") or not defaults.get("thresholds", {}).get("steps"):
                raise DashboardError(f"panel {panel['title']!r} needs a unit and thresholds")
        return data


def dashboard(
    *, uid: str, title: str, description: str, grid: Grid, variables: list[g.Template], tags: Sequence[str] = ()
) -> ObsboxDashboard:
    return ObsboxDashboard(
        uid=uid,
        title=title,
        description=description,
        tags=[TAG, *tags],
        panels=grid.panels,
        templating=g.Templating(list=variables),
        schemaVersion=SCHEMA_VERSION,
        graphTooltip=g.GRAPH_TOOLTIP_MODE_SHARED_CROSSHAIR,
        refresh="30s",
        time=g.Time("now-1h", "now"),
        timezone="browser",
        links=[
            g.DashboardLink(
                title="obsbox", type="dashboards", tags=[TAG], asDropdown=True, includeVars=True, keepTime=True
            )
        ],
    )
