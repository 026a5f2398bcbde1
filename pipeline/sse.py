"""Server-Sent Events parsing: bytes in, completed ``data`` payloads out.

Pure and synchronous (no I/O, no event loop) so it can be tested byte by byte. It follows
the WHATWG event-stream rules that matter for llama-server:

- a line ends with ``\\r\\n``, ``\\n`` or ``\\r``; an event ends at an empty line;
- ``data:`` lines of one event are joined with ``\\n`` (one leading space is dropped);
- lines starting with ``:`` are comments -- llama-server sends ``:`` as a keep-alive ping,
  and counting it as data would corrupt the stream;
- other fields (``event``, ``id``, ``retry``) carry nothing the pipeline uses: ignored;
- reads may split anywhere, even inside a ``\\r\\n`` pair or a multi-byte character.
"""

from __future__ import annotations

import re

# Any of the three SSE line terminators. A lone "\r" at the very end of the buffer may be the
# first half of "\r\n" split across two reads; ``SseParser`` remembers that case.
_LINE_END = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"


class SseParser:
    """Incremental SSE parser. ``feed`` returns the data of every event completed so far."""

    def __init__(self) -> None:
        self._buffer = b""
        self._data_lines: list[str] = []
        self._skip_lf = False  # the previous read ended in "\r": a leading "\n" is its pair
        self._at_start = True  # a UTF-8 BOM may open the stream (SSE spec says drop it)

    def feed(self, data: bytes) -> list[str]:
        """Consume ``data``; return the payloads of the events it completed, in order."""
        data = self._strip_prefixes(data)
        self._buffer += data
        payloads: list[str] = []
        start = 0
        for match in _LINE_END.finditer(self._buffer):
            payload = self._take_line(self._buffer[start:match.start()])
            if payload is not None:
                payloads.append(payload)
            start = match.end()
        self._skip_lf = start == len(self._buffer) and self._buffer.endswith(b"\r")
        self._buffer = self._buffer[start:]
        return payloads

    @property
    def pending(self) -> bool:
        """True while an event has started but not been terminated by an empty line."""
        return bool(self._buffer or self._data_lines)

    def _strip_prefixes(self, data: bytes) -> bytes:
        if self._skip_lf and data:
            self._skip_lf = False
            if data.startswith(b"\n"):
                data = data[1:]
        if self._at_start:
            # Wait until 3 bytes are known before deciding about the BOM.
            head = self._buffer + data
            if len(head) < len(_BOM) and _BOM.startswith(head):
                return data
            self._at_start = False
            if head.startswith(_BOM):
                self._buffer = b""
                return head[len(_BOM):]
        return data

    def _take_line(self, raw: bytes) -> str | None:
        """Apply one complete line; return an event payload when the line ends an event."""
        if not raw:
            return self._dispatch()
        line = raw.decode("utf-8", errors="replace")
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data_lines.append(value)
        return None

    def _dispatch(self) -> str | None:
        if not self._data_lines:
            return None  # blank line with no data (e.g. after a ping): no event
        payload = "\n".join(self._data_lines)
        self._data_lines = []
        return payload
