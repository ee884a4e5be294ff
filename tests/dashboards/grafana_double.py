"""An HTTP server that answers the Grafana API endpoints an import uses, as Grafana's HTTP API docs describe.

Documented behaviour reproduced (Dashboard API and Folder API pages):
- auth: ``Authorization: Bearer <service-account token>`` or basic auth; otherwise 401.
- ``GET /api/folders`` → ``[{id, uid, title}]``; ``POST /api/folders {title}`` → the folder (200),
  409 when the title exists, 403 without the right to create folders.
- ``POST /api/dashboards/db {dashboard, folderUid, overwrite, message}`` → 200
  ``{id, uid, url, status: "success", version, slug}``; 400 for a missing folder or dashboard title;
  403 without write access; 412 ``{message, status}`` with status ``name-exists`` (a dashboard with the
  same UID without overwrite, or the same title in the folder under another UID), ``version-mismatch``
  (an older version without overwrite) or ``plugin-dashboard`` (the UID belongs to a plugin).
- Served under ``prefix`` (Grafana's ``root_url`` sub-path): anything else is a 404.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WRITERS = {"Editor", "Admin"}


@dataclass
class GrafanaState:
    tokens: dict[str, str] = field(default_factory=dict)  # token → role
    users: dict[str, tuple[str, str]] = field(default_factory=dict)  # user → (password, role)
    prefix: str = ""
    folders: list[dict] = field(default_factory=list)
    dashboards: dict[str, dict] = field(default_factory=dict)  # uid → {dashboard, folderUid, version}
    plugin_uids: set[str] = field(default_factory=set)
    requests: list[tuple[str, str, dict | None, str | None]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Handler(BaseHTTPRequestHandler):
    state: GrafanaState

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def _send(self, code: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _role(self) -> str | None:
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            return self.state.tokens.get(auth[7:])
        if auth.startswith("Basic "):
            user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
            known = self.state.users.get(user)
            return known[1] if known and known[0] == password else None
        return None

    def _handle(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        s = self.state
        with s.lock:
            s.requests.append((method, self.path, body, self.headers.get("Authorization")))
            path = self.path[len(s.prefix) :].split("?", 1)[0] if self.path.startswith(s.prefix + "/api/") else None
            route = {
                ("GET", "/api/folders"): self._list_folders,
                ("POST", "/api/folders"): self._create_folder,
                ("POST", "/api/dashboards/db"): self._save_dashboard,
            }.get((method, path))
            if route is None:
                return self._send(404, {"message": "Not found"})
            role = self._role()
            if role is None:
                return self._send(401, {"message": "Unauthorized"})
            return route(role, body)

    def _list_folders(self, _role: str, _body: None) -> None:
        return self._send(200, [{k: f[k] for k in ("id", "uid", "title")} for f in self.state.folders])

    def _create_folder(self, role: str, body: dict) -> None:
        s = self.state
        if role not in WRITERS:
            return self._send(403, {"message": "Access denied"})
        if not body or not body.get("title"):
            return self._send(400, {"message": "folder title cannot be empty"})
        if any(f["title"] == body["title"] for f in s.folders):
            return self._send(409, {"message": "a folder with the same name already exists"})
        n = len(s.folders) + 1
        uid = body.get("uid") or f"fold{n:06d}"
        folder = {"id": n, "uid": uid, "title": body["title"], "url": f"/dashboards/f/{uid}/", "version": 1}
        s.folders.append(folder)
        return self._send(200, folder)

    def _save_dashboard(self, role: str, body: dict) -> None:
        s = self.state
        refusal = self._refusal(role, body or {})
        if refusal is not None:
            return self._send(*refusal)
        board, folder = body["dashboard"], body.get("folderUid") or ""
        uid = board.get("uid") or f"gen{len(s.dashboards) + 1:06d}"
        existing = s.dashboards.get(uid)
        version = existing["version"] + 1 if existing else 1
        number = list(s.dashboards).index(uid) + 1 if existing else len(s.dashboards) + 1
        s.dashboards[uid] = {
            "dashboard": board,
            "folderUid": folder,
            "version": version,
            "message": body.get("message"),
        }
        slug = re.sub(r"[^a-z0-9]+", "-", board["title"].lower()).strip("-")
        return self._send(
            200,
            {
                "id": number,
                "uid": uid,
                "url": f"/d/{uid}/{slug}",
                "status": "success",
                "version": version,
                "slug": slug,
            },
        )

    def _refusal(self, role: str, body: dict) -> tuple[int, dict] | None:
        """The documented error answer to this save, if any: the first check that fails."""
        s = self.state
        board = body.get("dashboard") if isinstance(body.get("dashboard"), dict) else {}
        folder, uid = body.get("folderUid") or "", board.get("uid")
        existing = None if body.get("overwrite") else s.dashboards.get(uid)
        same_title = any(
            other_uid != uid and other["folderUid"] == folder and other["dashboard"]["title"] == board.get("title")
            for other_uid, other in s.dashboards.items()
        )
        checks = (
            (role not in WRITERS, 403, {"message": "Access denied"}),
            (not board.get("title"), 400, {"message": "Dashboard title cannot be empty", "status": "empty-name"}),
            (folder and all(f["uid"] != folder for f in s.folders), 400, {"message": "folder not found"}),
            (
                uid in s.plugin_uids,
                412,
                {"message": "The dashboard belongs to plugin Obsbox.", "status": "plugin-dashboard"},
            ),
            (
                same_title,
                412,
                {"message": "A dashboard with the same name in the folder already exists", "status": "name-exists"},
            ),
            (
                existing and board.get("version", 0) < existing["version"],
                412,
                {"message": "The dashboard has been changed by someone else", "status": "version-mismatch"},
            ),
            (existing, 412, {"message": "A dashboard with the same uid already exists", "status": "name-exists"}),
        )
        return next(((code, answer) for failed, code, answer in checks if failed), None)


class GrafanaDouble:
    """The server, on 127.0.0.1 and a port the OS picks, in a thread."""

    def __init__(self, state: GrafanaState) -> None:
        handler = type("BoundHandler", (Handler,), {"state": state})
        self.state = state
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{self.state.prefix}"

    def __enter__(self) -> GrafanaDouble:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
