"""talk's per-turn summary line (``services.timeline.summary_line``)."""

from __future__ import annotations

from pipeline.metrics import TurnMetrics
from services.timeline import summary_line


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
