"""A TCP proxy a test can cut, to partition a client from a server it reaches through it.

:meth:`TcpProxy.cut` closes every connection and refuses new ones (the client sees its
calls fail, as across a partition); :meth:`TcpProxy.heal` lets connections through again.
:meth:`TcpProxy.lose_reply_to` delivers the next request that holds some bytes and drops
its connection when the reply comes back: the server did the request, the client never
hears (a member that fails between applying a write and answering it).
"""

from __future__ import annotations

import contextlib
import socket
import threading

__all__ = ["TcpProxy"]


class TcpProxy:
    """Forward ``127.0.0.1:<port>`` to ``target`` (host, port), one thread per direction."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.open = True
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        #: The bytes of the request whose reply is to be lost, until it has been.
        self.losing: bytes | None = None
        #: How many replies were lost so far.
        self.lost = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.open:
                client.close()
                continue
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.sockets += [client, server]
            doomed = threading.Event()  # this connection's next reply is to be lost
            for a, b, request in ((client, server, True), (server, client, False)):
                threading.Thread(
                    target=self._pipe, args=(a, b, request, doomed), daemon=True
                ).start()

    def lose_reply_to(self, request: bytes) -> None:
        """Lose the reply to the next request that holds ``request`` (see the module)."""
        self.losing = request

    def _pipe(
        self, source: socket.socket, sink: socket.socket, request: bool, doomed: threading.Event
    ) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if request and self.losing is not None and self.losing in data:
                    self.losing = None
                    doomed.set()
                elif not request and doomed.is_set():
                    self.lost += 1
                    break  # the reply is dropped with the connection
                sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Drop every connection and refuse new ones."""
        self.open = False
        with self.lock:
            sockets, self.sockets = self.sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def heal(self) -> None:
        """Let connections through again."""
        self.open = True

    def close(self) -> None:
        """Cut, and stop listening."""
        self.cut()
        self.listener.close()
