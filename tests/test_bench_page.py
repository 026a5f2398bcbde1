"""scripts/bench_page.py's counting of paused questions, from the messages the page got
(pure: no browser, no models)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from script_module import load_script

bench_page = load_script("bench_page")
SPAN_S = 3.1  # "Can you tell me about the" (1.2 s) + 600 ms + "history of bicycles?" (1.3 s)


def event(turn: int, name: str, **data: Any) -> dict[str, Any]:
    stage, ev = name.split(".", 1)
    return {"type": "event", "input_id": "c1",
            "event": {"turn": turn, "t": 0.0, "stage": stage, "event": ev, **data}}


def turn(n: int, audio_s: float, speech_end_ms: float | None, *names: str,
         state: str | None = None, transcript: str = "",
         early_ms: float | None = None) -> list[dict[str, Any]]:
    """One turn's events and its turn.result (``state``: its speculation state)."""
    live = {} if speech_end_ms is None else {"speech_end_ms": speech_end_ms}
    early = {} if early_ms is None else {"early_ms": early_ms}
    msgs = [event(n, "turn.start", mode="parallel", **live),
            event(n, "asr.start", audio_s=audio_s, **early)]
    msgs += [event(n, name, **({"confirmed": True} if name == "server.slot_idle" else {}))
             for name in names]
    msgs.append({"type": "turn.result", "turn": n, "transcript": transcript, "error": None,
                 "interrupted": False, "metrics": {}, "speculation": {"state": state}})
    return msgs


def test_covered_audio_is_the_turns_audio_less_its_silence_after_the_voice() -> None:
    log = turn(1, 1.8, 200, "speculation.start")
    assert bench_page.covered_s(log, 1) == 1.6
    assert bench_page.covered_s(turn(2, 3.0, None), 2) == 3.0  # push-to-talk: no wait
    assert bench_page.covered_s(log, 7) is None  # no asr.start for that turn
    # Whisper started at the gap, 100 ms before the 200 ms pause: its audio ends 100 ms
    # after the voice, not 200
    gap = turn(3, 1.7, 200, "speculation.start", early_ms=100)
    assert bench_page.covered_s(gap, 3) == 1.6


def test_a_turn_on_the_first_words_does_not_cover_the_question() -> None:
    # pre-roll 0.25 s + "Can you tell me about the" 1.2 s: far short of the 3.1 s span
    assert bench_page.covers_question(1.45, SPAN_S) is False
    assert bench_page.covers_question(3.3, SPAN_S) is True  # pre-roll + the whole span
    assert bench_page.covers_question(2.9, SPAN_S) is True  # the page's VAD ends earlier
    assert bench_page.covers_question(None, SPAN_S) is None


def test_a_cancelled_speculation_then_the_whole_question_is_no_false_endpoint() -> None:
    log = [{"type": "hello", "speculate": True},
           *turn(1, 1.65, 200, "speculation.start", "llm.request", "speculation.cancelled",
                 "server.slot_idle", state="cancelled", transcript="Can you tell me about the"),
           {"type": "hold", "input_id": "c1", "pause": 1},
           {"type": "endpoint", "input_id": "c1", "pause": 1, "wait_ms": 1100,
            "reason": "continuing_word"},
           {"type": "ready", "input_id": "c1", "pause": 1, "reason": "cancelled"},
           *turn(2, 3.55, 200, "speculation.start", "speculation.confirmed",
                 state="confirmed", transcript="Can you tell me about the history of bicycles?"),
           {"type": "hold", "input_id": "c1", "pause": 2},
           {"type": "ready", "input_id": "c1", "pause": 2, "reason": "audio"}]
    q = bench_page.paused_counts(log, SPAN_S)
    assert not q["false_endpoint"]
    assert [a["turn"] for a in q["answered"]] == [2] and q["answered"][0]["whole"]
    assert (q["started"], q["confirmed"], q["cancelled"], q["cancelled_idle"]) == (2, 1, 1, 1)
    assert q["cancelled_unasked"] == 0 and q["dropped"] == 0
    assert q["holds"] == 2 and q["readies"] == {"audio": 1, "cancelled": 1}
    assert q["endpoints"] == [[1, 1100, "continuing_word"]]


def test_an_answer_at_the_pause_is_one_false_endpoint_however_many_turns() -> None:
    # Without speculation's hold the page ends at the pause and answers the first words;
    # the rest is a second utterance, answered too: one question, one false endpoint.
    first = turn(1, 2.05, 600, transcript="Can you tell me about the?")
    rest = turn(2, 2.25, 700, transcript="History of bicycles?")
    q = bench_page.paused_counts(first + rest, SPAN_S)
    assert q["false_endpoint"] and [a["whole"] for a in q["answered"]] == [False, False]
    whole = bench_page.paused_counts(turn(1, 4.05, 700), SPAN_S)
    assert not whole["false_endpoint"]
    total = bench_page.paused_summary([q, whole])
    assert total["questions"] == 2 and total["false_endpoints"] == 1
    assert total["answered_turns"] == 3 and total["started"] == 0


def test_a_speculation_cancelled_before_its_llm_request_needs_no_slot_check() -> None:
    log = [*turn(1, 1.6, 200, "speculation.start", "speculation.cancelled", state="cancelled"),
           *turn(2, 3.5, 200, "speculation.start", "speculation.confirmed", state="confirmed")]
    q = bench_page.paused_counts(log, SPAN_S)
    assert (q["cancelled"], q["cancelled_idle"], q["cancelled_unasked"]) == (1, 0, 1)
    assert bench_page.paused_summary([q])["readies"] == {}


def test_the_report_puts_the_counts_beside_the_timing_table() -> None:
    q = bench_page.paused_counts(turn(1, 2.05, 600), SPAN_S)
    on = bench_page.paused_counts(
        [*turn(1, 3.5, 200, "speculation.start", "speculation.confirmed", state="confirmed"),
         {"type": "hold", "pause": 1}, {"type": "ready", "pause": 1, "reason": "audio"}], SPAN_S)
    report = {"paused": {"conditions": {"on": bench_page.paused_summary([on]),
                                        "off": bench_page.paused_summary([q])}}}
    text = bench_page.paused_markdown(report)
    assert "| false endpoints (a turn answered on part of the question) | 0 | 1 |" in text
    assert "| ready (reason) | 1 (audio 1) | 0 |" in text
    assert bench_page.paused_markdown({"conditions": {}}) == ""


def timing(p50: float) -> dict[str, Any]:
    """A condition's summary as bench_page.summary makes it, every timing at ``p50``."""
    s = {"p50": p50, "p95": p50 + 100}
    return {"from_last_sound_ms": s, "endpoint_wait_ms": s, "first_audio_ms": s,
            "asr_ms": s, "turns": 12, "errors": 0, "confirmed": 12, "started": 14,
            "cancelled": 2, "ended_at_server_endpoint": 12}


def test_the_gap_share_is_a_third_column_and_two_more_ratios() -> None:
    names = [c[0] for c in bench_page.CONDITIONS + bench_page.GAP_SHARE]
    assert names == ["on", "off", "on, no gap"]
    report = {"conditions": {"on": timing(600), "off": timing(1000),
                             "on, no gap": timing(700)}}
    text = bench_page.markdown(report)
    assert "| speculation on | speculation off | speculation on, no gap |" in text
    assert "| from the last sound | 600 (700) | 1000 (1100) | 700 (800) |" in text
    assert "on/off = 0.60; on / on, no gap = 0.86" in text and "on, no gap / off = 0.70" in text
    # without the third condition, the report is the two columns it always was
    two = bench_page.markdown({"conditions": {"on": timing(600), "off": timing(1000)}})
    assert "no gap" not in two and "| from the last sound | 600 (700) | 1000 (1100) |" in two


def timed(file: str, round_: int, ms: float, wait_ms: int) -> dict[str, Any]:
    return {"file": file, "round": round_, "metrics": {"first_audio_from_speech_end_ms": ms},
            "speculation": {"wait_ms": wait_ms}}


def test_the_gap_gain_pairs_turns_the_policy_judged_alike() -> None:
    on = [timed("a", 1, 600, 500), timed("b", 1, 1000, 1000), timed("c", 1, 650, 500)]
    no_gap = [timed("a", 1, 700, 500), timed("b", 1, 750, 500), timed("c", 1, 690, 500)]
    gain = bench_page.paired_gain({"on": on, "on, no gap": no_gap}, "on", "on, no gap")
    # "b" is left out: a 1000 ms verdict in one condition, 500 in the other
    assert gain == {"pairs": 2, "of": 3, "median_ms": -70}
    assert bench_page.paired_gain({"on": on}, "on", "on, no gap") is None
    report = {"conditions": {"on": timing(600), "off": timing(1000),
                             "on, no gap": timing(700)}, "gap_gain": gain}
    assert "(2 of 3): on less on, no gap -70 ms (median)" in bench_page.markdown(report)


def test_report_only_writes_page_md_again_with_the_paired_gain(tmp_path: Path) -> None:
    on = [timed("a", 1, 600, 500)]
    report = {"conditions": {"on": timing(600), "off": timing(1000),
                             "on, no gap": timing(700)},
              "turns": {"on": on, "off": [], "on, no gap": [timed("a", 1, 650, 500)]}}
    (tmp_path / "page.json").write_text(json.dumps(report))
    script = Path(__file__).resolve().parent.parent / "scripts" / "bench_page.py"
    run = subprocess.run([sys.executable, str(script), "--report-only", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "on less on, no gap -50 ms (median)" in (tmp_path / "page.md").read_text()
    missing = subprocess.run([sys.executable, str(script), "--report-only",
                              str(tmp_path / "nope")], capture_output=True, text=True,
                             timeout=120)
    assert missing.returncode == 2 and "no " in missing.stderr
