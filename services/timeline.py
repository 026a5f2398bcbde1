"""A compact terminal timeline of one turn: one row of bars per stage, shared time axis."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipeline.events import Event

Span = tuple[float, float]


def stage_spans(events: Sequence[Event]) -> dict[str, list[Span]]:
    """Busy intervals per stage (seconds since turn start), for bars and plots."""
    def first(name: str) -> float | None:
        return next((e.t for e in events if e.name == name), None)

    spans: dict[str, list[Span]] = {"asr": [], "llm": [], "tts": [], "playback": []}
    if (a := first("asr.start")) is not None and (b := first("asr.end")) is not None:
        spans["asr"].append((a, b))
    llm_end = first("llm.closed") or first("llm.end")
    if (r := first("llm.request")) is not None and llm_end is not None:
        spans["llm"].append((r, llm_end))
    starts = {e.data.get("index"): e.t for e in events if e.name == "tts.start"}
    for e in events:
        if e.name == "tts.end" and e.data.get("index") in starts:
            spans["tts"].append((starts[e.data["index"]], e.t))
    p_end = first("playback.end") or first("playback.stopped")
    if (p := first("playback.start")) is not None and p_end is not None:
        spans["playback"].append((p, p_end))
    return spans


def marks(events: Sequence[Event]) -> dict[str, list[float]]:
    return {
        "first token": [e.t for e in events if e.name == "llm.first_token"][:1],
        "sentence": [e.t for e in events if e.name == "splitter.sentence"],
        "barge-in": [e.t for e in events if e.name == "bargein.detected"],
    }


def work_end(spans: dict[str, list[Span]]) -> float | None:
    """When the last model work (ASR, LLM, TTS) ended. Playback of a long reply lasts tens
    of seconds but the story is in the first second or two, so time axes end a little
    after this and say where playback goes on."""
    return max((b for stage, row in spans.items() if stage != "playback" for _, b in row),
               default=None)


def render(events: Sequence[Event], metrics: dict[str, Any], width: int = 60) -> list[str]:
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
    lines.append("  " + summary_line(metrics))
    return lines


def summary_line(m: dict[str, Any]) -> str:
    def f(key: str) -> str:
        v = m.get(key)
        return "-" if v is None else f"{v:.0f}"

    parts = [f"first audio {f('first_audio_ms')} ms", f"asr {f('asr_ms')}",
             f"ttft {f('ttft_ms')}", f"1st sentence {f('first_sentence_ms')}",
             f"tts1 {f('tts_first_ms')}", f"overhead {f('overhead_ms')}",
             f"cache {m.get('cache_n', '-')}/{m.get('prompt_n', '-')} tok"]
    if m.get("interrupted"):
        parts.append(f"barge-in: silence {f('bargein_to_silence_ms')} / closed "
                     f"{f('bargein_to_llm_closed_ms')} / slot idle "
                     f"{f('bargein_to_slot_idle_ms')} ms")
    return " · ".join(parts)
