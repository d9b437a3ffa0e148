"""The HTTP side of `lc_cfr.serve`: a standard-library server for one page and a JSON API.

Routes (every reply is JSON except the page and its static files):

    GET  /                          the page (static/index.html)
    GET  /static/<file>             its script and style sheet
    GET  /api/info                  checkpoints, views, rules, card names
    POST /api/games                 {checkpoint?, view?, seat?, seed?, deal?} -> a new game
    GET  /api/games/<id>            the game as the human sees it
    POST /api/games/<id>/move       {action, decision} -> the game after the agent replied
    GET  /api/games/<id>/hint       the agent's policy over the human's legal moves

A refused request (`games.RequestError`, malformed JSON, an unknown route) gets its 4xx
status and {"error": "<one line>"}; the game is unchanged. The standard library is
enough for a local page with a handful of players (`ThreadingHTTPServer`, one thread per
request; `GameStore` serialises the games), so nothing is added to the install.
"""

from __future__ import annotations

import http.server
import json
import mimetypes
import pathlib
import re
import threading

from lc_cfr.web.games import GameStore, RequestError

STATIC = pathlib.Path(__file__).resolve().parent / "static"
MAX_BODY = 64 * 1024  # bytes: a move is a few dozen
_GAME = re.compile(r"^/api/games/([0-9a-f]{1,64})(/move|/hint)?$")


class _Handler(http.server.BaseHTTPRequestHandler):
    store: GameStore  # set by `make_server` on a subclass
    quiet: bool = True

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        if not self.quiet:
            super().log_message(format, *args)

    # ----- replies ------------------------------------------------------------------------

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, document) -> None:
        self._send(status, json.dumps(document).encode(), "application/json")

    def _error(self, status: int, reason: str) -> None:
        self._json(status, {"error": reason})

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise RequestError(413, f"the body is over {MAX_BODY} bytes")
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise RequestError(400, f"the body is not JSON: {error}") from None

    # ----- routes -------------------------------------------------------------------------

    def do_GET(self):  # noqa: N802 (http.server's name)
        path = self.path.split("?", 1)[0]
        try:
            if path in ("/", "/index.html"):
                return self._static("index.html")
            if path.startswith("/static/"):
                return self._static(path[len("/static/") :])
            if path == "/api/info":
                return self._json(200, self.store.info())
            match = _GAME.match(path)
            if match and match.group(2) is None:
                return self._json(200, self.store.view(match.group(1)))
            if match and match.group(2) == "/hint":
                return self._json(200, self.store.hint(match.group(1)))
            raise RequestError(404, f"no such page: {path}")
        except RequestError as error:
            self._error(error.status, error.reason)

    def do_POST(self):  # noqa: N802
        path = self.path.split("?", 1)[0]
        try:
            body = self._body()
            if path == "/api/games":
                return self._json(201, self.store.new_game(body))
            match = _GAME.match(path)
            if match and match.group(2) == "/move":
                return self._json(200, self.store.move(match.group(1), body))
            raise RequestError(404, f"no such route: POST {path}")
        except RequestError as error:
            self._error(error.status, error.reason)

    def _static(self, name: str) -> None:
        path = (STATIC / name).resolve()
        if STATIC not in path.parents or not path.is_file():
            raise RequestError(404, f"no such file: {name}")
        content_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        if content_type.startswith("text/") or content_type.endswith("javascript"):
            content_type += "; charset=utf-8"
        self._send(200, path.read_bytes(), content_type)


def make_server(
    store: GameStore, host: str = "127.0.0.1", port: int = 8000, *, quiet: bool = True
) -> http.server.ThreadingHTTPServer:
    """A server for `store` bound to (host, port) (port 0: any free one); not started."""
    handler = type("Handler", (_Handler,), {"store": store, "quiet": quiet})
    server = http.server.ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def serve_in_background(server: http.server.ThreadingHTTPServer) -> threading.Thread:
    """Runs `server` in a daemon thread (tests, notebooks); `server.shutdown()` stops it."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return thread
