"""A per-client request budget for ``serve``'s session and turn endpoints (``--rate-limit``).

Sliding window: a client may make at most ``per_minute`` counted requests in any 60 s.
Over it the request is refused with 429 and ``Retry-After`` = the seconds until its oldest
counted request leaves the window, so a client that waits that long always gets through.
A refused request is not counted. A client is its API key when it sent one, else its
remote address (docs/api.md). Memory is bounded by ``per_minute`` timestamps per client,
and clients idle for a whole window are forgotten.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import deque
from collections.abc import Callable

WINDOW_S = 60.0
DEFAULT_PER_MINUTE = 120
_SWEEP_EVERY = 256  # checks between sweeps of idle clients


class RateLimiter:
    def __init__(self, per_minute: int, *, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        if per_minute < 1:
            raise ValueError("a rate limit needs at least one request per minute")
        self.per_minute = per_minute
        self.clock = clock
        self.clients: dict[str, deque[float]] = {}
        self._checks = 0

    def check(self, client: str) -> float | None:
        """Count one request of ``client``; None when allowed, else the seconds to wait."""
        now = self.clock()
        self._checks += 1
        if self._checks % _SWEEP_EVERY == 0:
            self._sweep(now)
        times = self.clients.setdefault(client, deque())
        while times and now - times[0] >= WINDOW_S:
            times.popleft()
        if len(times) >= self.per_minute:
            return max(0.0, times[0] + WINDOW_S - now)
        times.append(now)
        return None

    def _sweep(self, now: float) -> None:
        for client in [c for c, t in self.clients.items() if not t or now - t[-1] >= WINDOW_S]:
            del self.clients[client]


def client_id(authorization: str, remote: str | None) -> str:
    """The API key when one was sent (hashed: never kept in memory as is), else the
    remote address."""
    if authorization.startswith("Bearer ") and len(authorization) > 7:
        return "key:" + hashlib.sha256(authorization[7:].encode()).hexdigest()[:16]
    return f"addr:{remote or 'unknown'}"


def retry_after_header(wait_s: float) -> str:
    return str(max(1, math.ceil(wait_s)))
