"""A compact terminal timeline of one turn: one row of bars per stage, shared time axis."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pipeline.endpoint import FINISHED
from pipeline.events import Event, EventName, first, indexed_spans, times

if TYPE_CHECKING:
    from pipeline.metrics import TurnMetrics
    from pipeline.turn import TurnResult

Span = tuple[float, float]


def stage_spans(events: Sequence[Event]) -> dict[str, list[Span]]:
    """Busy intervals per stage (seconds since turn start), for bars and plots."""
    return {"asr": _span(events, EventName.ASR_START, EventName.ASR_END),
            # a hang-up ends the LLM's work before the (synthesised) llm.end
            "llm": _span(events, EventName.LLM_REQUEST, EventName.LLM_CLOSED,
                         EventName.LLM_END),
            "tts": indexed_spans(events, EventName.TTS_START, EventName.TTS_END),
            "playback": _span(events, EventName.PLAYBACK_START, EventName.PLAYBACK_END,
                              EventName.PLAYBACK_STOPPED)}


def _span(events: Sequence[Event], start: EventName, *ends: EventName) -> list[Span]:
    """[(start, the first of ``ends`` that happened)], or [] if either is missing."""
    a = first(events, start)
    found = [e for e in (first(events, end) for end in ends) if e is not None]
    return [(a.t, found[0].t)] if a is not None and found else []


def rejoined_of(events: Sequence[Event]) -> dict[str, Any] | None:
    """``asr.end``'s ``rejoined: {text, turn}``: the words of a turn whose reply was cut
    before it could be kept, at the start of this turn's message (pipeline/rejoin.py)."""
    return next((e.data["rejoined"] for e in events
                 if e.name == EventName.ASR_END and "rejoined" in e.data), None)


def rejoined_note(events: Sequence[Event]) -> str:
    """"  [with turn 3's words, cut off]" after the user's line when this turn's message
    begins with the words of a turn whose reply was cut before it could be kept
    (``rejoined_of``); "" otherwise."""
    rejoined = rejoined_of(events)
    return "" if rejoined is None else f"  [with turn {rejoined['turn']}'s words, cut off]"


def endpoint_note(events: Sequence[Event]) -> str:
    """"endpoint policy 950 ms (sentence, from your pauses)": the last endpoint decision of
    a speculative turn (``speculation.endpoint``); "" for a turn without one."""
    decided = [e for e in events if e.name == EventName.ENDPOINT]
    if not decided:
        return ""
    d = decided[-1].data
    why = str(d.get("reason", "")).replace("_", " ")
    if d.get("learned") and d.get("reason") in FINISHED:
        why += ", from your pauses"  # pipeline/pauses.py raised the wait
    return f"endpoint policy {d.get('wait_ms')} ms ({why})"


def assistant_said(result: TurnResult) -> str:
    """What the user heard of the reply, for the ``assistant:`` line: the reply, what was
    played of a cut one, or that it was cut before a word of it was played (the user went
    on after the end was taken)."""
    if not result.interrupted:
        return result.reply.strip()
    heard = result.heard.strip()
    return f"{heard}  [interrupted]" if heard else "[cut before a word of it was played]"


def marks(events: Sequence[Event]) -> dict[str, list[float]]:
    return {
        "first token": times(events, EventName.LLM_FIRST_TOKEN)[:1],
        "sentence": times(events, EventName.SENTENCE),
        "barge-in": times(events, EventName.BARGEIN),
    }


def work_end(spans: dict[str, list[Span]]) -> float | None:
    """When the last model work (ASR, LLM, TTS) ended. Playback of a long reply lasts tens
    of seconds but the story is in the first second or two, so time axes end a little
    after this and say where playback goes on."""
    return max((b for stage, row in spans.items() if stage != "playback" for _, b in row),
               default=None)


def render(events: Sequence[Event], metrics: TurnMetrics, width: int = 60) -> list[str]:
    spans = stage_spans(events)
    marked = marks(events)
    end = max([work_end(spans) or 0.0, *(t for ts in marked.values() for t in ts),
               0.05]) * 1.25
    scale = width / end

    def col(t: float) -> int:
        return min(width - 1, max(0, int(t * scale)))

    lines = []
    for stage, row in spans.items():
        cells = [" "] * width
        for a, b in row:
            for i in range(col(a), max(col(a) + 1, col(b))):
                cells[i] = "█"
            if b > end:
                cells[-1] = "▶"
        if stage == "llm":
            for t in marked["sentence"]:
                cells[col(t)] = "▲"
        if stage == "playback":
            for t in marked["barge-in"]:
                cells[col(t)] = "✕"
        total = sum(b - a for a, b in row) * 1000
        lines.append(f"  {stage:<8} {''.join(cells)} {total:6.0f} ms")
    lines.append(f"  {'':<8} 0 s{'':{width - 9}}{end:5.2f} s")
    lines += [f"  {line}" for line in summary_lines(metrics, endpoint_note(events))]
    return lines


def ms_or_dash(v: float | None) -> str:
    """A figure in whole milliseconds, or "-" when it was not measured."""
    return "-" if v is None else f"{v:.0f}"


def summary_lines(m: TurnMetrics, *notes: str, width: int = 78) -> list[str]:
    """The turn's numbers as a few lines no wider than ``width`` (an 80-column terminal less
    the indent): when the reply was heard, where the time went, then ``notes`` (how the end
    of speech was taken; empty ones left out) and a barge-in's hang-up when there was one."""
    f = ms_or_dash
    heard = f"first audio {f(m.first_audio_ms)} ms"
    if m.first_audio_from_speech_end_ms is not None:
        heard = (f"first audio {f(m.first_audio_from_speech_end_ms)} ms from your last "
                 f"sound{' (speculative)' if m.speculation_confirmed_ms is not None else ''}"
                 f", {f(m.first_audio_ms)} ms from t = 0")
    loop = {"cut": " (looped, cut)", "fitted": " (looped, decoded again)",
            "full": " (looped, 30 s window)"}.get(m.asr_loop or "", "")
    parts = [heard, f"asr {f(m.asr_ms)}{loop}", f"ttft {f(m.ttft_ms)}",
             f"1st sentence {f(m.first_sentence_ms)}", f"tts1 {f(m.tts_first_ms)}",
             f"overhead {f(m.overhead_ms)}",
             "cache n/a" if m.cache_n is None else f"cache {m.cache_n}/{m.prompt_n} tok",
             *(n for n in notes if n)]
    if m.interrupted and m.bargein_to_llm_closed_ms is None and m.ttft_ms is None:
        # Cut while Whisper ran (or before the request): no stream was open to close.
        parts.append(f"barge-in: silence {f(m.bargein_to_silence_ms)} ms, "
                     "before the LLM request")
    elif m.interrupted:
        parts.append(f"barge-in: silence {f(m.bargein_to_silence_ms)} / closed "
                     f"{f(m.bargein_to_llm_closed_ms)} / slot idle "
                     f"{f(m.bargein_to_slot_idle_ms)} ms")
    return pack(parts, width)


def pack(parts: Sequence[str], width: int) -> list[str]:
    """``parts`` joined with " · ", a new line wherever the next one would pass ``width``
    (a part wider than that gets a line of its own)."""
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + 3 + len(part) <= width:
            lines[-1] += f" · {part}"
        else:
            lines.append(part)
    return lines
