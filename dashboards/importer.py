"""Import dashboards into a running Grafana through its HTTP API.

``POST /api/dashboards/db`` with ``overwrite: true`` creates or replaces each dashboard by UID; the
folder is looked up with ``GET /api/folders`` and created with ``POST /api/folders`` when missing.
Credentials come from the environment: ``GRAFANA_TOKEN`` (a service-account token, sent as a bearer
token), or ``GRAFANA_USER`` and ``GRAFANA_PASSWORD`` (basic auth). Every failure is a
:class:`GrafanaError` whose message says what to change.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from obsbox import conventions as c
from obsbox.dashboards.panels import ds_variable

TIMEOUT_SECONDS = 15.0
FOLDER_PAGE = 1000


class GrafanaError(RuntimeError):
    """A request Grafana refused, or could not be sent; the message names the fix."""


def _answer(value: object, expected: type[dict] | type[list], doing: str) -> Any:
    """Grafana's decoded answer, checked to be the JSON object or array its API documents."""
    if not isinstance(value, expected):
        shape = "an object" if expected is dict else "an array"
        raise GrafanaError(f"Grafana answered {value!r:.80} where {shape} was expected, while trying to {doing}")
    return value


@dataclass(frozen=True)
class Credentials:
    token: str | None = None
    user: str | None = None
    password: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Credentials:
        env = os.environ if env is None else env
        token = env.get("GRAFANA_TOKEN") or None
        user, password = env.get("GRAFANA_USER") or None, env.get("GRAFANA_PASSWORD")
        if not token and user and password is None:
            raise GrafanaError("GRAFANA_USER is set but GRAFANA_PASSWORD is not; set both, or set GRAFANA_TOKEN")
        return cls(token=token, user=user, password=password)

    def header(self) -> str | None:
        if self.token:
            return f"Bearer {self.token}"
        if self.user:
            pair = f"{self.user}:{self.password or ''}".encode()
            return "Basic " + base64.b64encode(pair).decode("ascii")
        return None

    def describe(self) -> str:
        if self.token:
            return "the token in GRAFANA_TOKEN"
        if self.user:
            return f"user {self.user!r} from GRAFANA_USER/GRAFANA_PASSWORD"
        return "no credentials (neither GRAFANA_TOKEN nor GRAFANA_USER/GRAFANA_PASSWORD is set)"


def parse_datasource_mappings(items: list[str]) -> dict[str, str]:
    """``["prometheus=abc"]`` → ``{"prometheus": "abc"}``, for the datasources the dashboards use."""
    out: dict[str, str] = {}
    for item in items:
        kind, sep, uid = item.partition("=")
        kind, uid = kind.strip(), uid.strip()
        if not sep or not uid:
            raise GrafanaError(f"--datasource {item!r}: write KIND=UID, e.g. prometheus=P1809F7CD0C75ACF3")
        if kind not in c.DATASOURCE_UIDS:
            raise GrafanaError(f"--datasource {item!r}: KIND must be one of {', '.join(sorted(c.DATASOURCE_UIDS))}")
        out[kind] = uid
    return out


def map_datasources(model: dict, mapping: Mapping[str, str]) -> dict:
    """A copy of a dashboard whose datasources point at the UIDs of the target Grafana.

    The dashboards pick their datasources through variables (``ds_prometheus`` ...), whose default
    is the UID compose provisions; that default becomes the mapped UID. A literal reference to a
    provisioned UID, should a panel have one, is rewritten too.
    """
    model = copy.deepcopy(model)
    for variable in model.get("templating", {}).get("list", []):
        kind = variable.get("query")
        if variable.get("type") == "datasource" and kind in mapping and variable.get("name") == ds_variable(kind):
            variable["current"] = {"selected": False, "text": mapping[kind], "value": mapping[kind]}

    def visit(node: object) -> None:
        if isinstance(node, dict):
            ref = node.get("datasource")
            if (
                isinstance(ref, dict)
                and ref.get("type") in mapping
                and ref.get("uid") == c.DATASOURCE_UIDS[ref["type"]]
            ):
                ref["uid"] = mapping[ref["type"]]
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(model)
    return model


class Grafana:
    """The few endpoints of Grafana's HTTP API that an import needs."""

    def __init__(self, url: str, credentials: Credentials, timeout: float = TIMEOUT_SECONDS) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise GrafanaError(f"--grafana-url {url!r}: give the full URL, e.g. http://localhost:{c.PORTS['grafana']}")
        self.url = url.rstrip("/")
        self.credentials = credentials
        self.timeout = timeout

    def request(self, method: str, path: str, body: object = None, what: str = "") -> object:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        auth = self.credentials.header()
        if auth:
            req.add_header("Authorization", auth)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                payload = resp.read()
        except urllib.error.HTTPError as exc:
            raise self._http_error(exc, method, path, what) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise GrafanaError(
                f"cannot reach Grafana at {self.url} ({reason}): check --grafana-url (scheme, host and port) "
                "and that Grafana is running and reachable from here"
            ) from None
        try:
            return json.loads(payload) if payload else None
        except ValueError:
            raise GrafanaError(
                f"{method} {self.url}{path} answered with something that is not JSON; is --grafana-url a Grafana "
                "(and not, e.g., a login proxy)?"
            ) from None

    def _http_error(self, exc: urllib.error.HTTPError, method: str, path: str, what: str) -> GrafanaError:
        try:
            body = json.loads(exc.read() or b"{}")
        except ValueError:
            body = {}
        message = body.get("message", "") if isinstance(body, dict) else ""
        said = f" Grafana said: {message!r}." if message else ""
        doing = what or f"{method} {path}"
        if exc.code == 401:
            return GrafanaError(
                f"Grafana at {self.url} rejected the credentials (401 Unauthorized) while trying to {doing}; "
                f"it got {self.credentials.describe()}. Set GRAFANA_TOKEN to a valid service-account token, or "
                f"GRAFANA_USER and GRAFANA_PASSWORD.{said}"
            )
        if exc.code == 403:
            return GrafanaError(
                f"Grafana at {self.url} refused to {doing} (403 Forbidden) for {self.credentials.describe()}: "
                "the account may not create or change dashboards and folders. Give the service account or user "
                "the Editor role (or the dashboards:create, dashboards:write and folders:create permissions), "
                f"or import into a folder it may write to with --folder.{said}"
            )
        if exc.code == 404:
            return GrafanaError(
                f"{method} {self.url}{path} was not found (404) while trying to {doing}: --grafana-url does not "
                "point at Grafana's root. Check the host and port, and include the sub-path if Grafana is served "
                f"under one (e.g. http://host/grafana).{said}"
            )
        if exc.code == 412:
            status = body.get("status", "") if isinstance(body, dict) else ""
            fixes = {
                "name-exists": "another dashboard with the same title already exists in that folder; rename or "
                "delete it, or import into another --folder",
                "version-mismatch": "someone changed the dashboard in Grafana since; the import overwrites, so "
                "run it again, or save their change into the dashboard's definition first",
                "plugin-dashboard": "a plugin owns a dashboard with this UID; remove the plugin's dashboard first",
            }
            fix = fixes.get(status, "see Grafana's message")
            return GrafanaError(
                f"Grafana refused to {doing} (412 Precondition Failed, status {status or 'unknown'}): {fix}.{said}"
            )
        return GrafanaError(f"Grafana answered {exc.code} {exc.reason} while trying to {doing}.{said}")

    # ------------------------------------------------------------ folders and dashboards

    def folder_uid(self, title: str, create: bool = True) -> str | None:
        """The UID of the folder titled ``title``, created when it does not exist (None when it does
        not and ``create`` is False)."""
        found = self._find_folder(title)
        if found is not None or not create:
            return found
        doing = f"create the folder {title!r}"
        try:
            answer = self.request("POST", "/api/folders", {"title": title}, what=doing)
        except GrafanaError:
            found = self._find_folder(title)  # created meanwhile by someone else (409)
            if found is None:
                raise
            return found
        created: dict[str, Any] = _answer(answer, dict, doing)
        return created["uid"]

    def _find_folder(self, title: str) -> str | None:
        folders = self.request("GET", f"/api/folders?limit={FOLDER_PAGE}", what="list the folders")
        listed: list[Any] = [] if folders is None else _answer(folders, list, "list the folders")
        for folder in listed:
            if folder.get("title") == title:
                return folder["uid"]
        return None

    def save_dashboard(self, model: dict, folder_uid: str | None, message: str) -> dict:
        body: dict = {"dashboard": {**model, "id": None}, "overwrite": True, "message": message}
        if folder_uid:
            body["folderUid"] = folder_uid
        doing = f"save the dashboard {model.get('title')!r} ({model.get('uid')})"
        saved: dict[str, Any] = _answer(self.request("POST", "/api/dashboards/db", body, what=doing), dict, doing)
        return saved


def import_dashboards(
    grafana: Grafana, models: list[dict], folder: str | None = None, datasources: Mapping[str, str] | None = None
) -> list[dict]:
    """Create or overwrite every dashboard; returns Grafana's answers (uid, url, version, status)."""
    folder_uid = grafana.folder_uid(folder) if folder else None
    return [
        grafana.save_dashboard(map_datasources(model, datasources or {}), folder_uid, "obsbox dashboards import")
        for model in models
    ]
