"""What the Wyoming clients share: one TCP connection as blocking event reads and writes.

Blocking on purpose: the ASR and TTS engines are called from worker threads
(``asyncio.to_thread``), the same as the in-process Whisper and Piper, so the turn runner
treats both kinds alike. A barge-in stops a read from another thread by shutting the
socket down (``Connection.shutdown``).
"""

from __future__ import annotations

import socket
from typing import BinaryIO, cast

from wyoming.event import Event, read_event, write_event


class WyomingError(Exception):
    """A Wyoming server failed or said something unexpected (message is one line)."""


class Connection:
    """One TCP connection to ``engine`` (``wyoming://host:port``), closed on exit."""

    def __init__(self, host: str, port: int, timeout: float, engine: str) -> None:
        self.host, self.port, self.timeout, self.engine = host, port, timeout, engine
        self.sock: socket.socket | None = None
        self._reader: BinaryIO | None = None
        self._writer: BinaryIO | None = None

    def __enter__(self) -> Connection:
        try:
            self.sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        except OSError as e:
            raise WyomingError(f"{self.engine}: cannot connect ({e.strerror or e}); is the "
                               "Wyoming server running there?") from e
        # Small events (audio-stop, synthesize) must not wait for Nagle's 40 ms timer.
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._reader = cast(BinaryIO, self.sock.makefile("rb"))
        self._writer = cast(BinaryIO, self.sock.makefile("wb"))
        return self

    def __exit__(self, *exc: object) -> None:
        for f in (self._reader, self._writer):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass  # a shut-down socket may refuse the final flush
        if self.sock is not None:
            self.sock.close()

    def write(self, *events: Event) -> None:
        assert self._writer is not None, "use the connection as a context manager"
        try:
            for event in events:
                write_event(event, self._writer)
            self._writer.flush()
        except OSError as e:
            raise WyomingError(f"{self.engine}: connection lost while sending ({e})") from e

    def read(self) -> Event:
        """The next event; WyomingError when the server closed the connection or is quiet
        for longer than the timeout."""
        assert self._reader is not None, "use the connection as a context manager"
        try:
            event = read_event(self._reader)
        except TimeoutError as e:
            raise WyomingError(f"{self.engine}: no answer within {self.timeout:.0f} s") from e
        except OSError as e:
            raise WyomingError(f"{self.engine}: connection lost ({e})") from e
        if event is None:
            raise WyomingError(f"{self.engine}: the server closed the connection "
                               "mid-answer")
        return event

    def shutdown(self) -> None:
        """From another thread: make a blocked ``read`` return now (barge-in)."""
        if self.sock is not None:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed


def describe(host: str, port: int, timeout: float, engine: str) -> Event:
    """The server's ``info`` event (the answer to ``describe``)."""
    from wyoming.info import Describe, Info

    with Connection(host, port, timeout, engine) as conn:
        conn.write(Describe().event())
        event = conn.read()
    if not Info.is_type(event.type):
        raise WyomingError(f"{engine}: answered describe with {event.type!r}")
    return event
