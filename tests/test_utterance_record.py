"""``talk --record``: every utterance on disk, numbered, readable by replay."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.audio_in import SAMPLE_RATE, load_wav
from pipeline.utterance_record import UtteranceRecorder


def voice(seconds: float, level: float = 0.3) -> np.ndarray:
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    return (level * np.sin(2 * np.pi * 180 * t)).astype(np.float32)


def test_utterances_are_written_in_order_and_read_back(tmp_path: Path) -> None:
    rec = UtteranceRecorder(tmp_path / "turns")
    first, second = rec.save(voice(1.0)), rec.save(voice(0.5))
    assert [first.name, second.name] == ["utterance-001.wav", "utterance-002.wav"]
    back = load_wav(first)
    assert back.size == SAMPLE_RATE
    assert np.max(np.abs(back - voice(1.0))) < 1e-3  # 16-bit, nothing else lost


def test_a_second_talk_into_the_same_folder_goes_on_numbering(tmp_path: Path) -> None:
    UtteranceRecorder(tmp_path).save(voice(0.2))
    (tmp_path / "notes.txt").write_text("not an utterance")
    again = UtteranceRecorder(tmp_path)
    assert again.save(voice(0.2)).name == "utterance-002.wav"
    assert (tmp_path / "utterance-001.wav").exists()


def test_the_summary_counts_this_session_only(tmp_path: Path) -> None:
    UtteranceRecorder(tmp_path).save(voice(0.2))
    again = UtteranceRecorder(tmp_path)
    assert again.summary() == f"no utterances recorded in {tmp_path}"
    again.save(voice(0.2))
    assert again.summary() == f"1 utterance recorded in {tmp_path} (utterance-002.wav)"
    again.save(voice(0.2))
    assert again.summary() == (f"2 utterances recorded in {tmp_path} "
                               "(utterance-002.wav … utterance-003.wav)")


def test_a_clipped_utterance_is_written_clipped_not_wrapped(tmp_path: Path) -> None:
    path = UtteranceRecorder(tmp_path).save(voice(0.1, level=3.0))
    back = load_wav(path)
    assert back.max() > 0.99 and back.min() < -0.99  # at full scale, not wrapped around
    assert np.all(np.sign(back[1:40]) == np.sign(voice(0.1)[1:40]))
