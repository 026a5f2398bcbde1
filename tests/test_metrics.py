"""Metrics come from the event log alone."""

from pathlib import Path

from pipeline.events import Event, EventName, EventRecorder
from pipeline.metrics import percentile, summarize, turn_metrics


def log(*items: tuple[float, str, dict]) -> list[Event]:
    return [Event(1, t, name, data) for t, name, data in items]


STREAMED = log(
    (0.0, "turn.start", {}), (0.0, "asr.start", {}), (1.2, "asr.end", {"text": "hi"}),
    (1.21, "llm.request", {}), (1.25, "llm.first_chunk", {}), (1.26, "llm.first_token", {}),
    (1.40, "splitter.sentence", {"index": 0, "text": "Hello there."}),
    (1.40, "tts.start", {"index": 0}), (1.60, "tts.end", {"index": 0, "audio_s": 1.0}),
    (1.61, "playback.start", {"index": 0}),
    (1.70, "splitter.sentence", {"index": 1, "text": "How are you?"}),
    (1.71, "llm.end", {"finish_reason": "stop",
                       "timings": {"prompt_n": 5, "cache_n": 40, "prompt_ms": 12.5}}),
    (1.71, "tts.start", {"index": 1}), (1.9, "tts.end", {"index": 1, "audio_s": 1.0}),
    (3.61, "playback.end", {}),
)


def test_streamed_metrics_from_events() -> None:
    m = turn_metrics(STREAMED, "streamed").to_dict()
    assert m["asr_ms"] == 1200.0
    assert m["ttft_ms"] == 50.0
    assert m["first_sentence_ms"] == 190.0
    assert m["tts_first_ms"] == 200.0
    assert m["first_audio_ms"] == 1610.0
    assert m["turn_ms"] == 3610.0
    assert m["overhead_ms"] == 20.0  # 1610 - 1200 - 190 - 200
    assert (m["prompt_n"], m["cache_n"], m["prefill_ms"]) == (5, 40, 12.5)
    assert m["reply_sentences"] == 2 and m["reply_chars"] == len("Hello there.How are you?")
    assert m["interrupted"] is False and "bargein_to_silence_ms" not in m


def test_a_mended_whisper_loop_is_in_the_metrics() -> None:
    assert turn_metrics(STREAMED, "streamed").asr_loop is None
    looped = [Event(e.turn, e.t, e.name, {**e.data, "redone": "cut"})
              if e.name == EventName.ASR_END else e for e in STREAMED]
    m = turn_metrics(looped, "streamed")
    assert m.asr_loop == "cut" and m.to_dict()["asr_loop"] == "cut"


def test_serial_overhead_counts_the_whole_reply_and_all_tts() -> None:
    events = [e for e in STREAMED if e.name != "playback.start"]
    events.append(Event(1, 1.95, "playback.start", {"index": 0}))
    m = turn_metrics(events, "serial").to_dict()
    # 1950 - 1200 - (1710 - 1210) - (200 + 190)
    assert m["overhead_ms"] == 1950 - 1200 - 500 - 390


def test_bargein_latencies() -> None:
    events = [*STREAMED[:10], *log((2.0, "bargein.detected", {}), (2.01, "playback.stopped", {}),
                                   (2.012, "llm.closed", {"reason": "bargein"}),
                                   (2.05, "server.slot_idle", {}))]
    m = turn_metrics(events, "streamed").to_dict()
    assert m["interrupted"] is True
    assert m["bargein_to_silence_ms"] == 10.0
    assert m["bargein_to_llm_closed_ms"] == 12.0
    assert m["bargein_to_slot_idle_ms"] == 50.0
    assert m["turn_ms"] == 2010.0


def test_missing_stages_give_none_not_errors() -> None:
    m = turn_metrics(log((0.0, "turn.start", {}), (0.1, "turn.error", {"message": "x"})),
                     "streamed").to_dict()
    assert m["first_audio_ms"] is None and m["overhead_ms"] is None


def test_percentile_and_summary() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([7.0], 95) == 7.0
    s = summarize([{"a": 1, "run": 1, "mode": "x", "flag": True}, {"a": 3, "run": 2}])
    assert s == {"a": {"p50": 2.0, "p95": 2.9, "mean": 2.0, "n": 2}}


def test_recorder_rejects_unknown_stage_and_notifies_listeners() -> None:
    seen: list[str] = []
    rec = EventRecorder(3, listeners=[lambda e: seen.append(e.name)])
    rec.emit("asr.start")
    assert seen == ["asr.start"] and rec.first("asr.start") is not None
    assert rec.events[0].to_dict()["stage"] == "asr"
    try:
        rec.emit("bogus.thing")
    except ValueError:
        pass
    else:
        raise AssertionError("unknown stage accepted")


def test_bargein_after_the_stream_was_already_closed_has_no_close_latency() -> None:
    events = [*STREAMED[:10], *log((1.9, "llm.closed", {"reason": "max_sentences"}),
                                   (2.0, "bargein.detected", {}),
                                   (2.01, "playback.stopped", {}))]
    m = turn_metrics(events, "streamed").to_dict()
    assert m["bargein_to_llm_closed_ms"] is None
    assert m["bargein_to_silence_ms"] == 10.0


def test_every_event_name_is_in_the_contract() -> None:
    contract = (Path(__file__).parent.parent / "docs" / "contracts.md").read_text()
    assert all(f"| `{name}` |" in contract for name in EventName)


def test_prometheus_counts_mended_whisper_loops() -> None:
    from pipeline.turn import TurnResult
    from services.prom import ServiceMetrics

    metrics = ServiceMetrics()
    looped = [Event(e.turn, e.t, e.name, {**e.data, "redone": "fitted"})
              if e.name == EventName.ASR_END else e for e in STREAMED]
    for n, events in enumerate((looped, STREAMED), start=1):
        result = TurnResult(n, "streamed", events=list(events))
        result.metrics = turn_metrics(events, "streamed")  # as the runner sets it
        metrics.record_turn(result, "ws", n)
    text = metrics.render().decode()
    assert 'voice_llm_asr_loops_total{mended="fitted"} 1.0' in text
    assert 'mended="cut"' not in text
