"""A loopback TCP proxy in front of a server, which a test can cut: a real dropped connection.

The dashboard's live feed must survive a stream that dies under it (a proxy timing out, a laptop changing
networks, an API replica restarting). Aborting the request inside the browser would test only the page's
own error path; this proxy makes the network itself fail: `drop()` closes every open connection in both
directions and refuses new ones (accepted, then closed at once) until `resume()`, so the page sees the same
resets and refusals it would see in production, and its reconnect reaches the real server.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

CHUNK = 65_536


class TcpProxy:
    """Forwards `127.0.0.1:<port>` to `target_host:target_port`, one thread pair per connection."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._guard = threading.Lock()
        self._open: set[socket.socket] = set()
        self._refusing = False
        self._closed = False
        self.accepted = 0
        self.refused = 0
        threading.Thread(target=self._accept, name="tcp-proxy-accept", daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._guard:
                refusing = self._refusing
                if refusing:
                    self.refused += 1
                else:
                    self.accepted += 1
            if refusing:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self._target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._guard:
                self._open.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(CHUNK)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                self._forget(sock)

    def _forget(self, sock: socket.socket) -> None:
        with self._guard:
            self._open.discard(sock)
        _close(sock)

    def drop(self) -> None:
        """Cut every open connection (both ways, mid-response) and refuse new ones until `resume()`."""
        with self._guard:
            self._refusing = True
            victims = list(self._open)
            self._open.clear()
        for sock in victims:
            _close(sock)  # shutdown first: it wakes the pump blocked in recv on this socket

    def resume(self) -> None:
        with self._guard:
            self._refusing = False

    def close(self) -> None:
        self._closed = True
        _close(self._listener)
        self.drop()


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


@contextlib.contextmanager
def tcp_proxy(base_url: str) -> Iterator[TcpProxy]:
    """A proxy in front of `http://host:port`, closed at the end."""
    host_port = base_url.split("://", 1)[1].rstrip("/")
    host, _, port = host_port.rpartition(":")
    proxy = TcpProxy(host, int(port))
    try:
        yield proxy
    finally:
        proxy.close()
