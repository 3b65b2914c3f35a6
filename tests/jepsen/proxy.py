"""A TCP proxy the checker controls: each broker reaches ZooKeeper through its own proxy, so that a
broker can be cut off from ZooKeeper (and only from ZooKeeper) and healed again.

``partition()`` closes the connections through the proxy and refuses new ones (accepted, then
closed at once), ``heal()`` lets connections through again. Everything stays on 127.0.0.1.
"""

from __future__ import annotations

import socket
import threading


class Proxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1", bind_host: str = "127.0.0.1",
                 port: int = 0) -> None:
        self.target = (target_host, target_port)
        self.host = bind_host  # a broker in its own network namespace reaches the root side of its veth
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((bind_host, port))  # 0: any free port
        self.listener.listen(64)
        self.port: int = self.listener.getsockname()[1]
        self.cut = False
        self.closed = False
        self.lock = threading.Lock()
        self.connections: set[socket.socket] = set()
        threading.Thread(target=self._accept, daemon=True, name=f"proxy-{self.port}").start()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.cut:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.connections |= {client, upstream}
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            self._drop(sock)

    def _drop(self, sock: socket.socket) -> None:
        with self.lock:
            self.connections.discard(sock)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()

    def partition(self) -> None:
        self.cut = True
        with self.lock:
            connections = list(self.connections)
        for sock in connections:
            self._drop(sock)

    def heal(self) -> None:
        self.cut = False

    def close(self) -> None:
        self.closed = True
        self.partition()
        self.listener.close()
