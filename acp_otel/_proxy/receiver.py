"""The proxy's loopback OTLP/HTTP receiver for the agent's own telemetry.

``POST /v1/traces``, ``/v1/metrics`` and ``/v1/logs``; protobuf or JSON bodies (``Content-Type``), plain, gzip or
deflate (``Content-Encoding``), with a ``Content-Length`` or chunked. Every decoded request goes to ``sink(signal,
message)``, which must not block (the forwarder queues it); the answer is an empty export response (full
success) in the request's encoding, even when the sink dropped the request: an agent that retries would only
make things worse, and the loss is the proxy's to report. A body that cannot be decoded gets 400 (413 when too
large), counted, and said in the proxy's exit line (:meth:`Receiver.problems`); another path 404. gRPC is not
served: the agents' own switches select OTLP/HTTP.

The listening socket is bound by the caller (before the agent is spawned, so that its address can be put in the
agent's environment); the server runs in a thread of its own, each connection in another.
"""

from __future__ import annotations

import http.server
import logging
import socket
import threading
from collections.abc import Callable
from typing import Any

from .otlp_codec import MAX_BODY_BYTES, BadRequest, decode, decompress, is_json, response, signal_of

_log = logging.getLogger("acp_otel")

Sink = Callable[[str, Any], None]
MAX_REASON = 160
"""Characters of a refusal's reason said in the exit line (a decoder's message can quote the body)."""


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the agents' exporters reuse their connection
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("acp_otel proxy: receiver: " + format, *args)

    def do_POST(self) -> None:
        signal = signal_of(self.path)
        if signal is None:
            self._answer(404, b"", "text/plain")
            return
        json_body = is_json(self.headers.get("Content-Type"))
        try:
            body = decompress(self._body(), self.headers.get("Content-Encoding"))
            message = decode(signal, body, json_body)
        except BadRequest as exc:
            self.server.rejected += 1
            if not self.server.first_refusal:
                self.server.first_refusal = f"{signal}: {str(exc)[:MAX_REASON]}"
            self._answer(413 if exc.too_large else 400, str(exc).encode("utf-8", "replace"), "text/plain")
            return
        try:
            self.server.sink(signal, message)
        except Exception:
            _log.debug("acp_otel proxy: receiver: the sink failed", exc_info=True)
        payload, content_type = response(signal, json_body)
        self._answer(200, payload, content_type)

    def _answer(self, status: int, payload: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        if status >= 400:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(payload)

    def _body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            return self._chunked()
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise BadRequest("bad Content-Length") from None
        if length < 0 or length > MAX_BODY_BYTES:
            raise BadRequest("body too large", too_large=length > 0)
        return self.rfile.read(length)

    def _chunked(self) -> bytes:
        parts: list[bytes] = []
        size = 0
        while True:
            line = self.rfile.readline(1024)
            try:
                length = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise BadRequest("bad chunk size") from None
            if length == 0:
                while self.rfile.readline(8192) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            size += length
            if size > MAX_BODY_BYTES:
                raise BadRequest("body too large", too_large=True)
            parts.append(self.rfile.read(length))
            self.rfile.readline(8)  # the CRLF after the chunk


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    sink: Sink
    rejected: int
    first_refusal: str


class Receiver:
    """Serves OTLP/HTTP on ``listener`` (bound and listening) in a thread until :meth:`close`."""

    def __init__(self, listener: socket.socket, sink: Sink) -> None:
        server = _Server(listener.getsockname()[:2], _Handler, bind_and_activate=False)
        server.socket.close()
        server.socket = listener
        server.server_address = listener.getsockname()[:2]
        server.sink = sink
        server.rejected = 0
        server.first_refusal = ""
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="acp-otel-receiver", daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def rejected(self) -> int:
        """Requests answered 400 or 413."""
        return self._server.rejected

    def problems(self) -> list[str]:
        """The requests refused, as one sentence of the proxy's exit line (none refused: nothing)."""
        refused = self._server.rejected
        if not refused:
            return []
        what = "export request" if refused == 1 else "export requests"
        return [f"{refused} of the agent's {what} refused by the proxy's receiver ({self._server.first_refusal})"]

    def close(self) -> None:
        """Stop accepting; requests being read finish in their own threads."""
        self._server.shutdown()
        self._server.server_close()
