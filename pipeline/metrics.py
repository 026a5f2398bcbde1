"""Per-turn metrics, derived from the event log only (names in docs/contracts.md).

Times in the log are seconds since the end of the user's audio; metrics are ms.
``first_sentence_ms`` runs from the LLM request to the first released sentence, so the
critical path to first audio in streamed mode is exactly
asr_ms + (request - asr end) + first_sentence_ms + tts_first_ms + (hand-off to the sink),
and ``overhead_ms`` is first_audio_ms minus the model work on that path: what the
pipeline itself adds. In serial mode the path holds the whole reply and all of its TTS.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from pipeline.events import Event

METRIC_NAMES = (
    "mode", "asr_ms", "ttft_ms", "prefill_ms", "prompt_n", "cache_n", "first_sentence_ms",
    "tts_first_ms", "first_audio_ms", "turn_ms", "overhead_ms", "reply_sentences",
    "reply_chars", "interrupted",
)


def _t(events: Sequence[Event], name: str, last: bool = False, **match: Any) -> float | None:
    found = [e for e in events if e.name == name
             and all(e.data.get(k) == v for k, v in match.items())]
    if not found:
        return None
    return (found[-1] if last else found[0]).t


def _ms(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round((b - a) * 1000.0, 1)


def _tts_total_ms(events: Sequence[Event]) -> float | None:
    starts = {e.data["index"]: e.t for e in events if e.name == "tts.start"}
    ends = {e.data["index"]: e.t for e in events if e.name == "tts.end"}
    spans = [ends[i] - starts[i] for i in ends if i in starts]
    return round(sum(spans) * 1000.0, 1) if spans else None


def turn_metrics(events: Sequence[Event], mode: str) -> dict[str, Any]:
    request = _t(events, "llm.request")
    end = next((e for e in events if e.name == "llm.end"), None)
    timings: dict[str, Any] = dict(end.data.get("timings") or {}) if end else {}
    sentences = [e for e in events if e.name == "splitter.sentence"]
    m: dict[str, Any] = {
        "mode": mode,
        "asr_ms": _ms(_t(events, "asr.start"), _t(events, "asr.end")),
        "ttft_ms": _ms(request, _t(events, "llm.first_token")),
        "prefill_ms": round(timings["prompt_ms"], 1) if "prompt_ms" in timings else None,
        "prompt_n": timings.get("prompt_n"),
        "cache_n": timings.get("cache_n"),
        "first_sentence_ms": _ms(request, sentences[0].t if sentences else None),
        "tts_first_ms": _ms(_t(events, "tts.start", index=0), _t(events, "tts.end", index=0)),
        "first_audio_ms": _ms(0.0, _t(events, "playback.start")),
        "turn_ms": _ms(0.0, _t(events, "playback.end", last=True)
                       or _t(events, "playback.stopped", last=True)),
        "reply_sentences": len(sentences),
        "reply_chars": sum(len(e.data.get("text", "")) for e in sentences),
        "interrupted": any(e.name == "bargein.detected" for e in events),
    }
    m["overhead_ms"] = _overhead_ms(events, m, mode, request)
    m.update(_bargein_metrics(events))
    return m


def _overhead_ms(events: Sequence[Event], m: dict[str, Any], mode: str,
                 request: float | None) -> float | None:
    if m["first_audio_ms"] is None or m["asr_ms"] is None or request is None:
        return None
    if mode == "serial":
        llm_ms = _ms(request, _t(events, "llm.end"))
        tts_ms = _tts_total_ms(events)
    else:
        llm_ms, tts_ms = m["first_sentence_ms"], m["tts_first_ms"]
    if llm_ms is None or tts_ms is None:
        return None
    return round(float(m["first_audio_ms"]) - float(m["asr_ms"]) - llm_ms - tts_ms, 1)


def _bargein_metrics(events: Sequence[Event]) -> dict[str, Any]:
    detected = _t(events, "bargein.detected")
    if detected is None:
        return {}
    return {
        "bargein_to_silence_ms": _ms(detected, _t(events, "playback.stopped")),
        # Only a hang-up caused by the barge-in counts: a stream already closed by
        # max_sentences had nothing left to close (None, not a negative time).
        "bargein_to_llm_closed_ms": _ms(detected, _t(events, "llm.closed", reason="bargein")),
        "bargein_to_slot_idle_ms": _ms(detected, _t(events, "server.slot_idle")),
    }


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of a non-empty sequence."""
    s = sorted(values)
    if len(s) == 1:
        return s[0]
    k = (len(s) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summarize(turns: Iterable[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """p50/p95/mean of every numeric metric over a set of turns."""
    columns: dict[str, list[float]] = {}
    for turn in turns:
        for key, value in turn.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                columns.setdefault(key, []).append(float(value))
    return {key: {"p50": round(percentile(v, 50), 1), "p95": round(percentile(v, 95), 1),
                  "mean": round(statistics.fmean(v), 1), "n": len(v)}
            for key, v in columns.items() if key != "run"}
