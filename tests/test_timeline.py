"""The per-turn numbers under talk's and replay's turns (``services.timeline``)."""

from __future__ import annotations

from pipeline.metrics import TurnMetrics
from services.timeline import pack, summary_lines


def summary_line(m: TurnMetrics) -> str:
    return " · ".join(summary_lines(m))


def test_a_barge_in_names_what_it_closed() -> None:
    line = summary_line(TurnMetrics("streamed", asr_ms=400, ttft_ms=200, interrupted=True,
                                    bargein_to_silence_ms=3, bargein_to_llm_closed_ms=1,
                                    bargein_to_slot_idle_ms=40))
    assert "barge-in: silence 3 / closed 1 / slot idle 40 ms" in line


def test_a_cut_before_the_llm_request_says_so_instead_of_dashes() -> None:
    """The voice cut the turn while Whisper ran: no stream was open, no slot to watch."""
    line = summary_line(TurnMetrics("streamed", asr_ms=400, interrupted=True,
                                    bargein_to_silence_ms=0))
    assert "barge-in: silence 0 ms, before the LLM request" in line
    assert "closed -" not in line and "slot idle -" not in line


def test_a_mended_whisper_loop_shows_beside_the_asr_time() -> None:
    line = summary_line(TurnMetrics("streamed", asr_ms=585, asr_loop="cut"))
    assert "asr 585 (looped, cut)" in line
    line = summary_line(TurnMetrics("streamed", asr_ms=3000, asr_loop="full"))
    assert "asr 3000 (looped, 30 s window)" in line
    assert "looped" not in summary_line(TurnMetrics("streamed", asr_ms=400))


def test_an_uninterrupted_turn_has_no_barge_in_part() -> None:
    assert "barge-in" not in summary_line(TurnMetrics("streamed", asr_ms=400, ttft_ms=200))


def test_the_endpoint_note_names_the_last_decision_and_a_learned_wait() -> None:
    from pipeline.events import Event, EventName
    from services.timeline import endpoint_note

    def decided(**data: object) -> Event:
        return Event(1, 0.1, EventName.ENDPOINT, dict(data))

    assert endpoint_note([]) == ""
    first = decided(wait_ms=1100, reason="continuing_word", complete_ms=500, learned=False)
    last = decided(wait_ms=950, reason="sentence", complete_ms=950, learned=True)
    assert endpoint_note([first, last]) == "endpoint policy 950 ms (sentence, from your pauses)"
    # A learned wait that did not decide (the words were unsure) is not claimed.
    unsure = decided(wait_ms=1000, reason="asr_unsure", complete_ms=950, learned=True)
    assert endpoint_note([unsure]) == "endpoint policy 1000 ms (asr unsure)"


def test_the_numbers_fit_an_80_column_terminal_even_when_every_part_is_there() -> None:
    busy = TurnMetrics("streamed", asr_ms=1500, ttft_ms=1200, first_sentence_ms=1800,
                       tts_first_ms=900, overhead_ms=120, cache_n=1000, prompt_n=1200,
                       first_audio_ms=2800, first_audio_from_speech_end_ms=3400,
                       speculation_confirmed_ms=3, interrupted=True, bargein_to_silence_ms=30,
                       bargein_to_llm_closed_ms=10, bargein_to_slot_idle_ms=400)
    lines = summary_lines(busy, "speculative, endpoint 1224 ms, Whisper 180 ms early",
                          "endpoint policy 1000 ms (sentence, from your pauses)")
    assert all(len(line) <= 78 for line in lines), lines
    assert lines[0] == ("first audio 3400 ms from your last sound (speculative), "
                        "2800 ms from t = 0")
    text = " · ".join(lines)
    for part in ("asr 1500", "cache 1000/1200 tok", "Whisper 180 ms early",
                 "from your pauses", "slot idle 400 ms"):
        assert part in text
    assert len(summary_lines(busy)) < len(lines)  # notes add lines, "" notes none
    assert summary_lines(busy, "", "") == summary_lines(busy)


def test_pack_starts_a_line_where_the_next_part_would_pass_the_width() -> None:
    assert pack(["aaaa", "bb", "cc"], width=9) == ["aaaa · bb", "cc"]
    assert pack(["a" * 12, "b"], width=9) == ["a" * 12, "b"]
    assert pack([], width=9) == []
