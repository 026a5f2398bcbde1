"""``serve``'s Prometheus metrics (``GET /metrics``), with the standard client library.

One ``CollectorRegistry`` per app (not the global one), so tests and several apps in one
process never collide. Latencies are histograms in seconds (the Prometheus convention); the
per-turn numbers come from ``TurnMetrics``, the same ones the turn's JSON carries. Cache
reuse is two counters (tokens reused / evaluated on turns 2+): their rate ratio is the
reuse ratio over any window, which a gauge of the last turn could not give.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from pipeline.events import EventName

if TYPE_CHECKING:
    from pipeline.turn import TurnResult

# First audio on this machine sits at 0.5-3 s; barge-in paths at 1-100 ms.
LATENCY_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
FAST_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)
QUEUE_BUCKETS = (0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)

CONTENT_TYPE = CONTENT_TYPE_LATEST

# TurnMetrics key -> histogram name (seconds)
_LATENCIES = {"first_audio_ms": "first_audio", "ttft_ms": "ttft", "asr_ms": "asr",
              "tts_first_ms": "tts_first"}
_BARGEIN = {"bargein_to_silence_ms": "silence", "bargein_to_llm_closed_ms": "llm_closed",
            "bargein_to_slot_idle_ms": "slot_idle"}


class ServiceMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.turns = Counter("voice_llm_turns", "turns by interface, mode and outcome",
                             ["interface", "mode", "outcome"], registry=r)
        self.errors = Counter("voice_llm_errors", "errors by kind", ["kind"], registry=r)
        self.latency = {
            key: Histogram(f"voice_llm_{name}_seconds", f"per-turn {key[:-3]}",
                           ["interface"], buckets=LATENCY_BUCKETS, registry=r)
            for key, name in _LATENCIES.items()}
        self.bargein = Histogram("voice_llm_bargein_seconds",
                                 "barge-in to silence / LLM closed / slot idle", ["to"],
                                 buckets=FAST_BUCKETS, registry=r)
        self.bargeins = Counter("voice_llm_bargeins", "interrupted turns", ["interface"],
                                registry=r)
        self.slot_idle_unconfirmed = Counter(
            "voice_llm_slot_idle_unconfirmed", "barge-ins whose slot did not show idle",
            registry=r)
        self.queue_wait = Histogram("voice_llm_queue_wait_seconds",
                                    "time a turn waited for an LLM slot",
                                    buckets=QUEUE_BUCKETS, registry=r)
        self.prompt_tokens = Counter("voice_llm_prompt_tokens",
                                     "prompt tokens on turns 2+: cached (KV reused) or "
                                     "evaluated", ["kind"], registry=r)
        self.sessions = Gauge("voice_llm_sessions", "open conversations", ["interface"],
                              registry=r)
        self.queued = Gauge("voice_llm_sessions_queued", "turns waiting for an LLM slot",
                            registry=r)
        self.slots_in_use = Gauge("voice_llm_slots_in_use", "LLM slots held by "
                                  "conversations", registry=r)
        self.slots_total = Gauge("voice_llm_slots", "LLM slots serve hands out", registry=r)
        self.speculations = Counter(
            "voice_llm_speculations", "speculative turns the page started at a pause, by "
            "outcome: confirmed (it was the answer), cancelled (speech resumed), dropped "
            "(failed or too late)", ["outcome"], registry=r)
        self.asr_loops = Counter(
            "voice_llm_asr_loops", "turns whose Whisper decode looped, by how it was "
            "mended: cut (where the repeat began), fitted (decoded again with more "
            "silence), full (30 s window)", ["mended"], registry=r)
        self.llm_restarts = Counter("voice_llm_llm_restarts", "managed llama-server "
                                    "restarts after it died (services/supervisor.py)",
                                    registry=r)

    def watch(self, *, sessions: Callable[[str], int], queued: Callable[[], int],
              slots_in_use: Callable[[], int], slots_total: int) -> None:
        """Gauges read from the live state at scrape time (never stale)."""
        for interface in ("api", "ws"):
            self.sessions.labels(interface).set_function(
                lambda i=interface: sessions(i))  # type: ignore[misc]
        self.queued.set_function(queued)
        self.slots_in_use.set_function(slots_in_use)
        self.slots_total.set(slots_total)

    def record_turn(self, result: TurnResult, interface: str, turn_index: int) -> None:
        """One finished turn; ``turn_index`` counts from 1 within its conversation."""
        m = result.metrics.to_dict()
        outcome = ("error" if result.error else "interrupted" if result.interrupted
                   else "ok")
        self.turns.labels(interface, result.mode, outcome).inc()
        if result.error:
            self.errors.labels("turn").inc()
        for key in _LATENCIES:
            if isinstance(value := m.get(key), int | float):
                self.latency[key].labels(interface).observe(value / 1000)
        if loop := result.metrics.asr_loop:
            self.asr_loops.labels(loop).inc()
        if result.interrupted:
            self.bargeins.labels(interface).inc()
            for key, to in _BARGEIN.items():
                if isinstance(value := m.get(key), int | float):
                    self.bargein.labels(to).observe(value / 1000)
            if any(e.name == EventName.SLOT_IDLE and not e.data.get("confirmed")
                   for e in result.events):
                self.slot_idle_unconfirmed.inc()
        cache_n, prompt_n = m.get("cache_n"), m.get("prompt_n")
        if turn_index >= 2 and isinstance(cache_n, int) and isinstance(prompt_n, int):
            self.prompt_tokens.labels("cached").inc(cache_n)
            self.prompt_tokens.labels("evaluated").inc(prompt_n)

    def error(self, kind: str) -> None:
        self.errors.labels(kind).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
