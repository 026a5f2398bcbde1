"""Experiment: barge-in means hanging up.

close: read a long reply for ``at`` seconds, then close the connection. llama-server cancels
       the task (its log says "cancel task, id_task = N") and frees the slot within about a
       token; we time that from ``/slots`` and confirm it from the log.
hold:  the same reply, but at ``at`` we stop reading and keep the socket open. The server
       cannot tell, generates to the end and holds the CPU that the next turn and TTS need;
       we time how long the slot stays busy and count the tokens made for nobody.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from pathlib import Path
from typing import Any

from pipeline.llm_client import (
    ChatOptions,
    ChatStream,
    Finished,
    LlmError,
    StreamEvent,
    TokenDelta,
)
from services.lab.context import Lab
from services.lab.measure import chat, rounded

DEFAULT_AT = 0.5
DEFAULT_MAX_TOKENS = 512
SYSTEM = "You are a storyteller who writes long, detailed stories."
QUESTION = ("Tell me a long story about a lighthouse keeper during a winter storm, "
            "with many paragraphs and lots of detail.")
_CANCEL = re.compile(r"cancel task, id_task = (\d+)")
LOG_WAIT_S = 2.0  # the log line is written by the server thread; give it a moment to flush


async def run(lab: Lab, at: float = DEFAULT_AT,
              max_tokens: int = DEFAULT_MAX_TOKENS) -> dict[str, Any]:
    options = ChatOptions(max_tokens=max_tokens, cache_prompt=False, temperature=0.0,
                          seed=lab.seed)
    await lab.wait_slots_idle()  # start from an idle slot, or the timings mean nothing
    lab.tracker.start(f"barge-in: hang up at {at:g} s", 1)
    close = await _close(lab, options, at)
    lab.tracker.advance()
    await lab.wait_slots_idle()
    lab.tracker.start(f"barge-in: stop reading at {at:g} s; the server runs on to "
                      f"{max_tokens} tokens", 1)
    hold = await _hold(lab, options, at)
    lab.tracker.advance()
    notes = close.pop("notes") + hold.pop("notes")
    return {"at_s": at, "max_tokens": max_tokens, "close": close, "hold": hold, "notes": notes}


class _Reader:
    """Reads a stream until a wall-clock deadline, counting tokens on the way.

    The user interrupts at a moment in time, not after some event, so reading stops at the
    deadline even if no chunk is due then. The read that is in flight at the deadline is kept
    (not cancelled: cancelling it before the headers arrive would abort the POST itself);
    for "hold" it simply stays pending and nothing more is read.
    """

    def __init__(self, lab: Lab, stream: ChatStream) -> None:
        self.lab, self.stream = lab, stream
        self.iterator = aiter(stream)
        self.tokens = 0
        self.first_token_at: float | None = None
        self.finished: Finished | None = None
        self.id_task: int | None = None
        self._pending: asyncio.Task[StreamEvent | None] | None = None

    async def read_until(self, deadline: float) -> None:
        while self.finished is None:
            if self._pending is None:
                self._pending = asyncio.create_task(self._next(), name="lab-read")
            done, _ = await asyncio.wait({self._pending},
                                         timeout=max(0.0, deadline - time.monotonic()))
            if not done:
                return  # the deadline: stop reading
            task, self._pending = self._pending, None
            event = task.result()
            if event is None:
                return
            await self._on(event)

    async def drain(self) -> None:
        while self.finished is None:
            task, self._pending = self._pending, None
            event = await task if task is not None else await self._next()
            if event is None:
                return
            await self._on(event)

    async def discard(self) -> None:
        """Forget the read in flight (the connection is closed, so it ends at once)."""
        if self._pending is not None:
            self._pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, LlmError):
                await self._pending
            self._pending = None

    async def _next(self) -> StreamEvent | None:
        try:
            return await anext(self.iterator)
        except StopAsyncIteration:
            return None

    async def _on(self, event: StreamEvent) -> None:
        if isinstance(event, TokenDelta):
            self.tokens += 1
            if self.first_token_at is None:
                self.first_token_at = event.t
                self.id_task = await self._busy_task_id()
        elif isinstance(event, Finished):
            self.finished = event

    async def _busy_task_id(self) -> int | None:
        for slot in await self.lab.slots():
            if slot.get("is_processing") and slot.get("id_task") is not None:
                return int(slot["id_task"])
        return None

    def since_request_ms(self, t: float | None) -> float | None:
        return None if t is None else rounded((t - self.stream.request_at) * 1000.0)


async def _close(lab: Lab, options: ChatOptions, at: float) -> dict[str, Any]:
    notes: list[str] = []
    log_offset = _log_size(lab.server.log_path)
    async with lab.client.stream_chat(chat(SYSTEM, QUESTION), options) as stream:
        reader = _Reader(lab, stream)
        await reader.read_until(time.monotonic() + at)
    await reader.discard()
    # Leaving the block closed the TCP connection; closed_at is when that happened.
    closed_at = stream.closed_at or time.monotonic()
    idle_at = await lab.wait_slots_idle()
    if reader.finished is not None:
        notes.append("close: the reply ended before --at; nothing was left to cancel")
    cancel_logged, logged_id = await _find_cancel(lab.server.log_path, log_offset,
                                                  reader.id_task)
    if cancel_logged is None:
        notes.append("close: cancel_logged is null: the lab did not start this llama-server "
                     "and has no log to read (pass --server-log PATH)")
    return {
        "closed_at_ms": reader.since_request_ms(closed_at),
        "slot_idle_after_ms": rounded((idle_at - closed_at) * 1000.0),
        "slot_idle_ms": reader.since_request_ms(idle_at),
        "cancel_logged": cancel_logged,
        "id_task": reader.id_task if reader.id_task is not None else logged_id,
        "ttft_ms": reader.since_request_ms(reader.first_token_at),
        "received_tokens": reader.tokens,
        "notes": notes,
    }


async def _hold(lab: Lab, options: ChatOptions, at: float) -> dict[str, Any]:
    notes: list[str] = []
    async with lab.client.stream_chat(chat(SYSTEM, QUESTION), options) as stream:
        reader = _Reader(lab, stream)
        await reader.read_until(time.monotonic() + at)
        stopped_at = time.monotonic()
        received = reader.tokens
        # Not reading, socket open: the server sees nothing wrong and keeps generating.
        # On a loaded 2-core box decode can fall to a few tokens/s: allow ~1 s per token.
        idle_at = await lab.wait_slots_idle(limit_s=60.0 + (options.max_tokens or 0))
        try:
            await reader.drain()  # only now, to learn how many tokens it made in all
        except LlmError as e:
            notes.append(f"hold: could not drain the held stream: {e}")
    timings = reader.finished.timings if reader.finished is not None else None
    predicted_n = (timings or {}).get("predicted_n")
    return {
        "stopped_reading_ms": reader.since_request_ms(stopped_at),
        "slot_busy_ms": rounded((idle_at - stopped_at) * 1000.0),
        "slot_idle_ms": reader.since_request_ms(idle_at),
        "predicted_n": predicted_n,
        "received_before_stop": received,
        "wasted_tokens": predicted_n - received if predicted_n is not None else None,
        "finish_reason": reader.finished.finish_reason if reader.finished else None,
        "notes": notes,
    }


def _log_size(path: Path | None) -> int | None:
    try:
        return path.stat().st_size if path is not None else None
    except OSError:
        return None


async def _find_cancel(path: Path | None, offset: int | None,
                       id_task: int | None) -> tuple[bool | None, int | None]:
    """Look for the server's cancel line written after ``offset``. (None, None) when there is
    no log to read: say so rather than guess."""
    if path is None or offset is None:
        return None, None
    deadline = time.monotonic() + LOG_WAIT_S
    while True:
        try:
            with path.open("rb") as f:
                f.seek(offset)
                new = f.read().decode("utf-8", "replace")
        except OSError:
            return None, None
        ids = [int(m) for m in _CANCEL.findall(new)]
        if ids and (id_task is None or id_task in ids):
            return True, id_task if id_task is not None else ids[-1]
        if time.monotonic() > deadline:
            return False, None
        await asyncio.sleep(0.05)
