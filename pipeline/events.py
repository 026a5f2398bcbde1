"""Timing events: the one place where a turn's timeline is recorded.

Every stage reports what happened through an ``EventRecorder``; metrics are derived from
the recorded list afterwards (``pipeline.metrics``), never computed ad hoc by a stage.
Times are monotonic seconds since the turn start (t = 0 is the end of the user's audio).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

STAGES = ("asr", "llm", "splitter", "tts", "playback", "bargein", "server", "turn")


@dataclass(frozen=True)
class Event:
    turn: int
    t: float
    name: str  # "<stage>.<event>", e.g. "llm.first_token"
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def stage(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def event(self) -> str:
        return self.name.split(".", 1)[1]

    def to_dict(self) -> dict[str, Any]:
        return {"turn": self.turn, "t": round(self.t, 6), "stage": self.stage,
                "event": self.event, **self.data}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)


Listener = Callable[[Event], None]


class EventRecorder:
    """Collects one turn's events; listeners (JSONL writer, UI, WebSocket) see each one."""

    def __init__(self, turn: int, t0: float | None = None,
                 listeners: list[Listener] | None = None) -> None:
        self.turn = turn
        self.t0 = time.monotonic() if t0 is None else t0
        self.events: list[Event] = []
        self.listeners: list[Listener] = list(listeners or [])

    def now(self) -> float:
        return time.monotonic() - self.t0

    def at(self, monotonic: float) -> float:
        """Turn-relative time of an absolute ``time.monotonic()`` reading."""
        return monotonic - self.t0

    def emit(self, name: str, *, at: float | None = None, **data: Any) -> Event:
        """Record ``name``; ``at`` is an absolute monotonic time when the moment was
        measured elsewhere (e.g. the LLM client's own chunk timestamps)."""
        if name.split(".", 1)[0] not in STAGES or "." not in name:
            raise ValueError(f"unknown event name {name!r}")
        t = self.now() if at is None else self.at(at)
        ev = Event(self.turn, t, name, data)
        self.events.append(ev)
        for listener in self.listeners:
            listener(ev)
        return ev

    def first(self, name: str) -> Event | None:
        return next((e for e in self.events if e.name == name), None)

    def last(self, name: str) -> Event | None:
        return next((e for e in reversed(self.events) if e.name == name), None)

    def all(self, name: str) -> list[Event]:
        return [e for e in self.events if e.name == name]
