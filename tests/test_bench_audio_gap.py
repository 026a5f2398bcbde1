"""How the mouth-to-ear benchmarks read the gap off one recording of the speaker
(scripts/bench_live.py's ``question_then_reply`` / ``measure_gaps``, and
scripts/bench_page_audio.py's ``gap_ms`` and report), on synthetic recordings."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
from script_module import load_script

bench_live = load_script("bench_live")
page_audio = load_script("bench_page_audio")
RATE = 16000


def write(path: Path, pcm: np.ndarray) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes((np.clip(pcm, -1, 1) * 32767).astype(np.int16).tobytes())
    return path


def tone(s: float) -> np.ndarray:
    t = np.arange(int(s * RATE)) / RATE
    return (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def quiet(s: float) -> np.ndarray:
    return np.zeros(int(s * RATE), np.float32)


def question(tmp_path: Path) -> Path:
    """1.0 s of voice with silence around it: its voiced span is 1.0 s."""
    return write(tmp_path / "q.wav", np.concatenate([quiet(0.2), tone(1.0), quiet(0.3)]))


def test_the_gap_is_the_silence_between_the_question_and_the_reply(tmp_path: Path) -> None:
    # the recorder started 0.5 s before the question; the reply comes 0.73 s after it
    rec = write(tmp_path / "rec.wav", np.concatenate(
        [quiet(0.5), tone(1.0), quiet(0.73), tone(0.8), quiet(0.4)]))
    assert page_audio.gap_ms(rec, question(tmp_path)) == 730.0


def test_no_reply_on_the_recording_is_no_gap(tmp_path: Path) -> None:
    rec = write(tmp_path / "rec.wav", np.concatenate([quiet(0.5), tone(1.0), quiet(1.0)]))
    assert page_audio.gap_ms(rec, question(tmp_path)) is None
    empty = write(tmp_path / "empty.wav", quiet(1.0))
    assert page_audio.gap_ms(empty, question(tmp_path)) is None


def test_a_long_recording_skips_each_reply_before_the_next_question(tmp_path: Path) -> None:
    """talk's one recording: the second question is found after the first reply, whose
    played length comes from the events (its pauses between sentences are skipped)."""
    q = question(tmp_path)
    rec = write(tmp_path / "rec.wav", np.concatenate(
        [quiet(0.5), tone(1.0), quiet(0.6), tone(0.5), quiet(0.6), tone(0.5),  # reply 1
         quiet(1.0), tone(1.0), quiet(0.9), tone(0.5), quiet(0.3)]))
    events = []
    for turn, start in ((1, 10.0), (2, 20.0)):
        events += [{"turn": turn, "stage": "turn", "event": "end", "t": start + 3},
                   {"turn": turn, "stage": "playback", "event": "start", "t": start},
                   {"turn": turn, "stage": "playback", "event": "end", "t": start + 1.6}]
    assert bench_live.measure_gaps(rec, [q, q], events) == [600.0, 900.0]
    unanswered = write(tmp_path / "unanswered.wav", np.concatenate(
        [quiet(0.5), tone(1.0), quiet(0.6), tone(0.5), quiet(0.6), tone(0.5),  # reply 1
         quiet(1.0), tone(1.0), quiet(0.9)]))  # the second question, no reply
    assert bench_live.measure_gaps(unanswered, [q, q], events) == [600.0, None]


def test_the_report_sets_the_audio_beside_the_pipelines_clocks() -> None:
    def turn(audio: float | None, pipeline: float) -> dict[str, object]:
        return {"mouth_to_ear_ms": audio, "last_end": {"trailingMs": 200},
                "metrics": {"first_audio_from_speech_end_ms": pipeline,
                            "first_audio_ms": pipeline - 200}}

    turns = {"on": [turn(800, 600), turn(900, 650)], "off": [turn(1600, 1400), turn(None, 1)]}
    assert page_audio.browser_ms(turns["on"][0]) == 200
    assert page_audio.browser_ms(turns["off"][1]) is None
    text = page_audio.markdown(turns)
    assert "| mouth to ear (audio) | 850.0 (895.0) | 1600.0 (1600.0) |" in text
    assert "| browser + devices (audio less pipeline) | 225.0 (247.5) | 200.0 (200.0) |" in text
    assert "on/off = 0.53" in text and "no reply found on the recording 1" in text


def test_the_counts_say_how_often_whisper_looped_and_how_it_was_mended() -> None:
    def asr_end(turn: int, **data: object) -> dict[str, object]:
        return {"turn": turn, "stage": "asr", "event": "end", "text": "q", **data}

    events = [asr_end(1), asr_end(2, redone="cut"), asr_end(3, redone="fitted")]
    c = bench_live.speculation_counts(events)
    assert (c["asr_loops"], c["asr_loops_cut"]) == (2, 1)
    text = bench_live.table([], {"speculation on": c, "speculation off":
                                 bench_live.speculation_counts([asr_end(1)])})
    assert "speculation on 2 (1 cut at the repeat), speculation off 0 (0 cut" in text
    assert "Whisper looped" not in bench_live.table([], {"speculation off": {}})


def test_turns_never_heard_answer_no_question() -> None:
    """An abandoned speculation and a turn cut before a word of it played (the rest of a
    paused question went on) take turn numbers but answer nothing: question k is the k-th
    answered turn."""
    def turn(n: int, *names: str) -> list[dict[str, object]]:
        return [{"turn": n, "stage": name.split(".")[0], "event": name.split(".")[1],
                 "t": 0.0} for name in ("turn.start", *names, "turn.end")]

    events = (turn(1, "playback.start", "playback.end")
              + turn(2, "speculation.start", "speculation.cancelled")
              + turn(3, "speculation.start", "speculation.confirmed", "playback.start")
              + turn(4, "bargein.detected")  # cut while it was prepared
              + turn(5, "playback.start", "bargein.detected", "playback.stopped")
              + turn(6, "playback.start", "playback.end"))
    assert bench_live.answered(events) == [1, 3, 5, 6]


def test_a_false_endpoint_is_a_first_part_answered_without_the_rest() -> None:
    def heard(n: int, text: str, **more: object) -> list[dict[str, object]]:
        return [{"turn": n, "stage": "turn", "event": "start", "t": 0.0},
                {"turn": n, "stage": "asr", "event": "end", "t": 0.5, "text": text, **more},
                {"turn": n, "stage": "playback", "event": "start", "t": 1.0},
                {"turn": n, "stage": "turn", "event": "end", "t": 2.0}]

    assert bench_live.false_endpoints(heard(1, "What should I do if my...")) == 1
    # the rest heard, misheard ("plant"/"plan" for "plants"): not a false endpoint
    assert bench_live.false_endpoints(heard(1, "What should I do if my plant is so yellow?")) \
        == 0
    assert bench_live.false_endpoints(heard(1, "What should I do if my plan is to turn?")) \
        == 0


def test_the_rest_of_a_question_sent_with_its_first_part_is_not_a_piece() -> None:
    """A paused question's rest (1.4 s of audio) answered alone is a piece; sent with the
    words of the first part's cut turn (``rejoined``), it was asked the whole question."""
    def rest(**more: object) -> list[dict[str, object]]:
        return [{"turn": 2, "stage": "asr", "event": "start", "t": 0.0, "audio_s": 1.4},
                {"turn": 2, "stage": "asr", "event": "end", "t": 0.5,
                 "text": "History of bicycles?", **more},
                {"turn": 2, "stage": "playback", "event": "start", "t": 1.0},
                {"turn": 2, "stage": "turn", "event": "end", "t": 2.0}]

    assert bench_live.answered_in_pieces(rest(), samples=0) == 1
    joined = rest(rejoined={"text": "Can you tell me about the", "turn": 1})
    assert bench_live.answered_in_pieces(joined, samples=0) == 0
    assert bench_live.false_endpoints(joined) == 0


def test_paused_questions_pause_as_long_as_asked(tmp_path: Path) -> None:
    """``--pause-ms``: the silence inside the paused question is the one asked for (espeak-ng
    trims its own silence, so the longest quiet run inside the voice is the pause)."""
    for pause_ms in (600, 900):
        path = bench_live.make_paused(1, tmp_path / str(pause_ms), pause_ms)[0]
        with wave.open(str(path)) as w:
            pcm = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32)
        loud = np.flatnonzero(np.abs(pcm) > 0.01 * 32767)
        longest_ms = np.max(np.diff(loud)) * 1000 / RATE
        assert abs(longest_ms - pause_ms) < 60, (pause_ms, longest_ms)


def test_a_report_again_measures_the_paused_questions_the_run_spoke(tmp_path: Path) -> None:
    """``--report-only`` must not make new paused questions (another ``--pause-ms`` would
    move every paused question's end): it takes those in the run's folder, or says why not."""
    import pytest

    (tmp_path / "paused").mkdir()
    made = [write(tmp_path / "paused" / f"paused_{i:02d}.wav", tone(0.1)) for i in (2, 1, 3)]
    assert bench_live.spoken_paused(tmp_path, 2) == sorted(made)[:2]
    with pytest.raises(SystemExit, match="holds 3 paused questions, --paused says 4"):
        bench_live.spoken_paused(tmp_path, 4)
    voiced = write(tmp_path / "q.wav", np.concatenate([quiet(0.2), tone(1.0)]))
    assert bench_live.loud_frames(voiced).sum() == 100  # 1.0 s of 10 ms frames
