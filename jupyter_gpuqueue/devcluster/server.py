"""The kubelet endpoint of the node stand-in: an HTTPS server answering what the API server
proxies to a kubelet.

Routes (HTTP/1.0, close-delimited bodies):

* ``GET /containerLogs/{namespace}/{pod}/{container}`` -> 200 ``text/plain`` with the
  container's output. Query: ``tailLines`` (last N lines), ``limitBytes`` (at most N bytes, from
  the start of what would be sent), ``follow=true`` (stream until the process ends),
  ``timestamps``/``sinceSeconds``/``previous`` accepted and ignored. A container that has not
  started -> 400 ``container "c" in pod "p" is waiting to start: REASON`` (kubelet's words,
  which the API server relays with the same code); unknown Pod -> 404.
* ``GET /healthz`` -> 200 ``ok``. Anything else -> 404.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable
from urllib.parse import parse_qs, unquote, urlsplit


def _tail_bytes(data: bytes, lines: int) -> bytes:
    if lines <= 0:
        return b""
    parts = data.splitlines(keepends=True)
    return b"".join(parts[-lines:])


class KubeletServer:
    """Serves container logs of the workers that ``lookup(namespace, pod)`` returns
    (:class:`.podrunner.PodWorker` or None) on 127.0.0.1 at a free port (``port``)."""

    def __init__(self, ssl_context: ssl.SSLContext, lookup: Callable):
        self.ssl_context = ssl_context
        self.lookup = lookup
        self.requests = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    def start(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def do_GET(self):  # noqa: N802
                owner.requests += 1
                try:
                    owner._get(self)
                except (BrokenPipeError, ConnectionResetError, ssl.SSLError, socket.timeout):
                    pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def get_request(self):
                sock, addr = super().get_request()
                return owner.ssl_context.wrap_socket(sock, server_side=True,
                                                     do_handshake_on_connect=False), addr

        self._httpd = Server(("127.0.0.1", 0), Handler)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="kubelet-https",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    # -- handlers -----------------------------------------------------------------------------------
    @staticmethod
    def _reply(h: BaseHTTPRequestHandler, code: int, body: bytes,
               ctype: str = "text/plain; charset=utf-8") -> None:
        h.send_response(code)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _get(self, h: BaseHTTPRequestHandler) -> None:
        u = urlsplit(h.path)
        parts = [unquote(p) for p in u.path.split("/") if p]
        q = {k: v[-1] for k, v in parse_qs(u.query).items()}
        if parts == ["healthz"]:
            return self._reply(h, 200, b"ok")
        if len(parts) != 4 or parts[0] != "containerLogs":
            return self._reply(h, 404, b"404 page not found\n")
        _, ns, pod, container = parts
        w = self.lookup(ns, pod)
        if w is None:
            return self._reply(h, 404, f'pod "{pod}" in namespace "{ns}" not found'.encode())
        if container not in w.container_names:
            return self._reply(h, 400, f'container "{container}" not found in pod "{pod}"'
                               .encode())
        msg = w.waiting_message()
        if msg:
            return self._reply(h, 400, msg.encode())
        try:
            tail = int(q["tailLines"]) if "tailLines" in q else None
            limit = int(q["limitBytes"]) if "limitBytes" in q else None
        except ValueError:
            return self._reply(h, 400, b"invalid tailLines or limitBytes")
        first = container == w.container_names[0]
        data = b""
        if first:
            try:
                data = w.log_path.read_bytes()
            except FileNotFoundError:
                data = b""
        if tail is not None:
            data = _tail_bytes(data, tail)
        follow = q.get("follow") in ("true", "1")
        if not follow or not first:
            if limit is not None:
                data = data[:limit]
            return self._reply(h, 200, data)
        # follow: stream what is there, then what gets appended, until the process ends
        h.send_response(200)
        h.send_header("Content-Type", "text/plain; charset=utf-8")
        h.end_headers()
        sent = 0
        pos = w.log_path.stat().st_size if w.log_path.exists() else 0
        for chunk in (data,):
            if limit is not None:
                chunk = chunk[: max(0, limit - sent)]
            h.wfile.write(chunk)
            sent += len(chunk)
        while limit is None or sent < limit:
            ended = w.finished.is_set() or w.gone
            try:
                with open(w.log_path, "rb") as f:
                    f.seek(pos)
                    chunk = f.read()
            except FileNotFoundError:
                chunk = b""
            pos += len(chunk)
            if limit is not None:
                chunk = chunk[: limit - sent]
            if chunk:
                h.wfile.write(chunk)
                h.wfile.flush()
                sent += len(chunk)
            if ended:
                break
            time.sleep(0.1)
