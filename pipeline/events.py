"""Timing events: the one place where a turn's timeline is recorded.

Every stage reports what happened through an ``EventRecorder``; metrics are derived from
the recorded list afterwards (``pipeline.metrics``), never computed ad hoc by a stage.
Times are monotonic seconds since the turn start (t = 0 is the end of the user's audio).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class EventName(StrEnum):
    """The closed vocabulary of timing events, ``<stage>.<event>`` (docs/contracts.md has
    each one's data). Members are strings, so the JSON and the page see the same names."""

    TURN_START = "turn.start"
    ASR_START = "asr.start"
    ASR_END = "asr.end"
    LLM_REQUEST = "llm.request"
    LLM_FIRST_CHUNK = "llm.first_chunk"
    LLM_FIRST_TOKEN = "llm.first_token"
    SENTENCE = "splitter.sentence"
    LLM_END = "llm.end"
    LLM_CLOSED = "llm.closed"
    CONTEXT_TRIMMED = "llm.context_trimmed"
    SILENT_RETRY = "llm.silent_retry"
    LLM_CAPABILITIES = "llm.capabilities"  # what the server offers (pipeline/llm_caps.py)
    TTS_START = "tts.start"
    TTS_END = "tts.end"
    TTS_ERROR = "tts.error"
    PLAYBACK_START = "playback.start"
    PLAYBACK_END = "playback.end"
    BARGEIN = "bargein.detected"
    PLAYBACK_STOPPED = "playback.stopped"
    SLOT_IDLE = "server.slot_idle"
    TURN_ERROR = "turn.error"
    TURN_END = "turn.end"
    # Live turn-taking (pipeline/live.py): a turn started at a pause, before the endpoint.
    SPECULATION_START = "speculation.start"
    ENDPOINT = "speculation.endpoint"
    SPECULATION_CONFIRMED = "speculation.confirmed"
    SPECULATION_CANCELLED = "speculation.cancelled"

    @property
    def stage(self) -> str:
        return self.value.split(".", 1)[0]


@dataclass(frozen=True)
class Event:
    turn: int
    t: float
    name: EventName
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

    def emit(self, name: EventName, *, at: float | None = None, **data: Any) -> Event:
        """Record ``name``; ``at`` is an absolute monotonic time when the moment was
        measured elsewhere (e.g. the LLM client's own chunk timestamps)."""
        try:
            name = EventName(name)
        except ValueError:
            raise ValueError(f"unknown event name {name!r}") from None
        t = self.now() if at is None else self.at(at)
        ev = Event(self.turn, t, name, data)
        self.events.append(ev)
        for listener in self.listeners:
            listener(ev)
        return ev

    def first(self, name: EventName) -> Event | None:
        return first(self.events, name)


# -- reading a turn's log (metrics, timelines) -------------------------------------------
def first(events: Sequence[Event], name: EventName, **match: Any) -> Event | None:
    """The first ``name`` event whose data has the ``match`` values."""
    return next((e for e in events if _is(e, name, match)), None)


def last(events: Sequence[Event], name: EventName, **match: Any) -> Event | None:
    return next((e for e in reversed(events) if _is(e, name, match)), None)


def times(events: Sequence[Event], name: EventName) -> list[float]:
    return [e.t for e in events if e.name == name]


def indexed_spans(events: Sequence[Event], start: EventName,
                  end: EventName) -> list[tuple[float, float]]:
    """(start, end) times of per-sentence work, paired by ``index`` (TTS), in end order."""
    starts = {e.data.get("index"): e.t for e in events if e.name == start}
    return [(starts[e.data.get("index")], e.t) for e in events
            if e.name == end and e.data.get("index") in starts]


def _is(e: Event, name: EventName, match: dict[str, Any]) -> bool:
    return e.name == name and all(e.data.get(k) == v for k, v in match.items())
