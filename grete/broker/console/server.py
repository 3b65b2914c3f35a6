"""``GET /`` on ``console.listener``: the console page, rendered on the broker's own loop (so it reads
the broker's state from the thread that owns it), HTTP/1.1 with keep-alive, nothing else served.

The node imports this module by name and only when ``console.listener`` is set: Jinja2 and the
page's modules cost a broker without a console nothing.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from datetime import UTC, datetime
from urllib.parse import urlsplit

from markupsafe import Markup

from grete.broker.broker import Broker
from grete.broker.config import ConfigError
from grete.broker.console.auth import REALM, BasicAuth, console_auth
from grete.broker.console.charts import svg_chart
from grete.broker.console.page import Page, render
from grete.broker.console.samples import SERIES, SampleRing
from grete.broker.console.view import cluster_view, groups_view, log_dirs_view

log = logging.getLogger(__name__)

MAX_HEAD = 16384
REQUEST_LINE = re.compile(rb"([A-Z]+) (\S+) HTTP/1\.([01])\r\n")
# The page's own inline style and script; nothing from elsewhere, no framing.
SECURITY_HEADERS = (b"Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nX-Frame-Options: DENY\r\n"
                    b"Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'; "
                    b"script-src 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'\r\n")


def parse_console_listener(value: str) -> tuple[str, int] | None:
    """``HOST:PORT`` or ``http://HOST:PORT`` -> (host, port), host 127.0.0.1 when none is given;
    empty -> None (no console)."""
    if not value:
        return None
    parts = urlsplit(value if "://" in value else f"http://{value}")
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or port is None or parts.path not in ("", "/") or parts.query or parts.username:
        raise ConfigError(f"Invalid console.listener '{value}': expected HOST:PORT or http://HOST:PORT")
    return parts.hostname or "127.0.0.1", port


async def render_page(broker: Broker, ring: SampleRing) -> str:
    """The page as it is now; a sample for the charts is taken first (a viewer is looking)."""
    now = time.monotonic()
    ring.take(broker.metrics, now)
    charts = [(title, Markup(svg_chart(title, ring.lines(name, now)))) for name, title in SERIES]
    page = Page(cluster_view(broker), await groups_view(broker), log_dirs_view(broker), charts,
                datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"))
    return render(page)


class ConsoleServer:
    def __init__(self, broker: Broker, host: str, port: int, auth: BasicAuth | None) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self.auth = auth
        self.ring = SampleRing()
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, reuse_address=True,
                                                  limit=MAX_HEAD)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("console on http://%s:%d/ (%s)", self.host, self.port,
                 "HTTP Basic" if self.auth is not None else "no authentication")

    def close(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        client_host = peer[0] if isinstance(peer, tuple) else ""
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                keep_alive = await self._answer(head, client_host, writer)
                await writer.drain()
                if not keep_alive:
                    break
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _answer(self, head: bytes, client_host: str, writer: asyncio.StreamWriter) -> bool:
        """Writes the answer to one request; whether the connection stays open."""
        match = REQUEST_LINE.match(head)
        if match is None:
            _respond(writer, b"400 Bad Request", b"bad request\n", close=True)
            return False
        method, path, minor = match.groups()
        headers = _headers(head[match.end():])
        keep_alive = minor == b"1" and headers.get("connection", "").lower() != "close"
        verdict = self.auth.check(headers.get("authorization"), client_host) if self.auth is not None else None
        if method not in (b"GET", b"HEAD"):
            _respond(writer, b"405 Method Not Allowed", b"GET only\n", close=not keep_alive, extra=b"Allow: GET, HEAD\r\n")
        elif verdict is not None and verdict.status == 401:
            _respond(writer, b"401 Unauthorized", b"Unauthorized\n", close=not keep_alive,
                     extra=f"WWW-Authenticate: {REALM}\r\n".encode())
        elif verdict is not None and verdict.status == 403:
            _respond(writer, b"403 Forbidden", b"DESCRIBE on the cluster is needed\n", close=not keep_alive)
        elif path.split(b"?", 1)[0] != b"/":
            _respond(writer, b"404 Not Found", b"not found\n", close=not keep_alive, head_only=method == b"HEAD")
        else:
            try:
                body = (await render_page(self.broker, self.ring)).encode()
            except Exception:
                log.exception("console page failed")
                _respond(writer, b"500 Internal Server Error", b"the page failed; see the broker's log\n", close=True)
                return False
            _respond(writer, b"200 OK", body, close=not keep_alive, head_only=method == b"HEAD",
                     ctype=b"text/html; charset=utf-8")
        return keep_alive


def _headers(block: bytes) -> dict[str, str]:
    out = {}
    for line in block.decode("latin-1").split("\r\n"):
        name, sep, value = line.partition(":")
        if sep:
            out[name.strip().lower()] = value.strip()
    return out


def _respond(writer: asyncio.StreamWriter, status: bytes, body: bytes, *, close: bool, head_only: bool = False,
             extra: bytes = b"", ctype: bytes = b"text/plain; charset=utf-8") -> None:
    writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: " + ctype + b"\r\nContent-Length: "
                 + str(len(body)).encode() + b"\r\n" + SECURITY_HEADERS + extra
                 + (b"Connection: close\r\n" if close else b"") + b"\r\n" + (b"" if head_only else body))


async def start_console(broker: Broker) -> ConsoleServer | None:
    """The console of ``console.listener``, listening; None when the key is empty. ConfigError for a
    bad listener or a secured broker without a way to authenticate (``console.authentication``)."""
    where = parse_console_listener(broker.config.get_str("console.listener"))
    if where is None:
        return None
    server = ConsoleServer(broker, *where, console_auth(broker))
    await server.start()
    return server
