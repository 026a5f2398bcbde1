"""Per-turn metrics (``TurnMetrics``), derived from the event log only (docs/contracts.md).

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
from dataclasses import asdict, dataclass
from typing import Any

from pipeline.events import Event, EventName, first, indexed_spans, last
from pipeline.llm_caps import unknowable_of


@dataclass(frozen=True)
class TurnMetrics:
    """One turn's numbers (docs/contracts.md); ``None`` where a stage did not happen."""

    mode: str
    asr_ms: float | None = None
    # Whisper looped on this turn and was mended: "cut", "fitted" or "full" (asr.end's
    # ``redone``, pipeline/asr.py); None when it did not loop.
    asr_loop: str | None = None
    ttft_ms: float | None = None
    prefill_ms: float | None = None  # the server's prompt_ms
    prompt_n: int | None = None
    cache_n: int | None = None
    # OpenAI's usage on the stream's last chunk (stream_options.include_usage), any server.
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens
    first_sentence_ms: float | None = None
    tts_first_ms: float | None = None
    first_audio_ms: float | None = None
    turn_ms: float | None = None
    overhead_ms: float | None = None
    reply_sentences: int = 0
    reply_chars: int = 0
    interrupted: bool = False
    # A speculative turn (live turn-taking): when its endpoint was confirmed. Ready audio
    # waits for that, so the wait is the endpoint's, not overhead.
    speculation_confirmed_ms: float | None = None
    # Live turns: the user's last voiced sample was this long before t = 0 (the endpoint
    # wait, or the pause of a speculative turn), and first audio counted from there.
    speech_end_ms: float | None = None
    first_audio_from_speech_end_ms: float | None = None
    bargein_to_silence_ms: float | None = None
    bargein_to_llm_closed_ms: float | None = None
    bargein_to_slot_idle_ms: float | None = None
    # Metrics this LLM server cannot give at all (llm.capabilities): None above, and
    # "n/a (not reported by this server)" in reports, never 0.
    not_reported: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (turn.end, replay/compare records, the web): barge-in latencies
        only in interrupted turns."""
        d = asdict(self)
        d["not_reported"] = list(self.not_reported)
        if not self.interrupted:
            for key in _BARGEIN_KEYS:
                del d[key]
        return d


_BARGEIN_KEYS = ("bargein_to_silence_ms", "bargein_to_llm_closed_ms",
                 "bargein_to_slot_idle_ms")


def _t(events: Sequence[Event], name: EventName, **match: Any) -> float | None:
    e = first(events, name, **match)
    return None if e is None else e.t


def _t_last(events: Sequence[Event], name: EventName) -> float | None:
    e = last(events, name)
    return None if e is None else e.t


def _asr_loop(events: Sequence[Event]) -> str | None:
    end = first(events, EventName.ASR_END)
    redone = end.data.get("redone") if end is not None else None
    return str(redone) if redone else None


def _ms(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round((b - a) * 1000.0, 1)


def _tts_total_ms(events: Sequence[Event]) -> float | None:
    spans = indexed_spans(events, EventName.TTS_START, EventName.TTS_END)
    return round(sum(b - a for a, b in spans) * 1000.0, 1) if spans else None


def turn_metrics(events: Sequence[Event], mode: str) -> TurnMetrics:
    request = _t(events, EventName.LLM_REQUEST)
    end = first(events, EventName.LLM_END)
    timings: dict[str, Any] = dict(end.data.get("timings") or {}) if end else {}
    usage: dict[str, Any] = dict(end.data.get("usage") or {}) if end else {}
    caps = first(events, EventName.LLM_CAPABILITIES)
    sentences = [e for e in events if e.name == EventName.SENTENCE]
    asr_ms = _ms(_t(events, EventName.ASR_START), _t(events, EventName.ASR_END))
    first_sentence_ms = _ms(request, sentences[0].t if sentences else None)
    tts_first_ms = _ms(_t(events, EventName.TTS_START, index=0),
                       _t(events, EventName.TTS_END, index=0))
    first_audio_ms = _ms(0.0, _t(events, EventName.PLAYBACK_START))
    played_to = (_t_last(events, EventName.PLAYBACK_END)
                 or _t_last(events, EventName.PLAYBACK_STOPPED))
    detected = _t(events, EventName.BARGEIN)
    confirmed_ms = _ms(0.0, _t(events, EventName.SPECULATION_CONFIRMED))
    start = first(events, EventName.TURN_START)
    speech_end = start.data.get("speech_end_ms") if start is not None else None
    if mode == "serial":  # the whole reply and all of its speech are on the critical path
        llm_ms, tts_ms = _ms(request, _t(events, EventName.LLM_END)), _tts_total_ms(events)
    else:
        llm_ms, tts_ms = first_sentence_ms, tts_first_ms
    return TurnMetrics(
        mode=mode, asr_ms=asr_ms, asr_loop=_asr_loop(events),
        ttft_ms=_ms(request, _t(events, EventName.LLM_FIRST_TOKEN)),
        prefill_ms=round(timings["prompt_ms"], 1) if "prompt_ms" in timings else None,
        prompt_n=timings.get("prompt_n"), cache_n=timings.get("cache_n"),
        prompt_tokens=_count(usage.get("prompt_tokens")),
        completion_tokens=_count(usage.get("completion_tokens")),
        cached_tokens=_cached(usage),
        first_sentence_ms=first_sentence_ms, tts_first_ms=tts_first_ms,
        first_audio_ms=first_audio_ms, turn_ms=_ms(0.0, played_to),
        overhead_ms=_overhead_ms(first_audio_ms, asr_ms, llm_ms, tts_ms, request,
                                 confirmed_ms),
        reply_sentences=len(sentences),
        reply_chars=sum(len(e.data.get("text", "")) for e in sentences),
        interrupted=detected is not None, speculation_confirmed_ms=confirmed_ms,
        speech_end_ms=speech_end,
        first_audio_from_speech_end_ms=(None if speech_end is None or first_audio_ms is None
                                        else round(speech_end + first_audio_ms, 1)),
        bargein_to_silence_ms=_ms(detected, _t(events, EventName.PLAYBACK_STOPPED)),
        # Only a hang-up caused by the barge-in counts: a stream already closed by
        # max_sentences had nothing left to close (None, not a negative time).
        bargein_to_llm_closed_ms=_ms(detected,
                                     _t(events, EventName.LLM_CLOSED, reason="bargein")),
        # Only a slot seen idle counts (a server without /slots never confirms it).
        bargein_to_slot_idle_ms=_ms(detected, _slot_idle_t(events)),
        not_reported=tuple(unknowable_of(caps.data if caps is not None else None)))


def _slot_idle_t(events: Sequence[Event]) -> float | None:
    e = next((e for e in events if e.name == EventName.SLOT_IDLE
              and e.data.get("confirmed") is not False), None)
    return None if e is None else e.t


def _cached(usage: dict[str, Any]) -> int | None:
    details = usage.get("prompt_tokens_details")
    return _count(details.get("cached_tokens")) if isinstance(details, dict) else None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _overhead_ms(first_audio_ms: float | None, asr_ms: float | None, llm_ms: float | None,
                 tts_ms: float | None, request: float | None,
                 confirmed_ms: float | None = None) -> float | None:
    if (first_audio_ms is None or asr_ms is None or request is None or llm_ms is None
            or tts_ms is None):
        return None
    critical = max(asr_ms + llm_ms + tts_ms, confirmed_ms or 0.0)
    return round(first_audio_ms - critical, 1)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of a non-empty sequence."""
    s = sorted(values)
    if len(s) == 1:
        return s[0]
    k = (len(s) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def pct(values: Sequence[float], q: float) -> float | None:
    """The benchmark tables' figure: the q-quantile (q in 0..1), interpolated as
    ``percentile``, to 0.1; None when there is nothing to summarize."""
    return round(percentile(values, q * 100), 1) if values else None


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
