"""WhisperAsr's fitted window, decode cap, fallback and gate routing, without a model.

The model's two paths (``_fitted``, ``_full``) are replaced by recorders; what is tested is
which path an utterance takes and what comes back. The real Whisper is in test_asr.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipeline.asr import (
    DEFAULT_PAD_S,
    FULL_WINDOW_FRAMES,
    LOOP_END_MIN_PROB,
    MAX_DECODE_TOKENS,
    RETRY_PADS,
    SAMPLE_RATE,
    LoopEnd,
    Transcript,
    WhisperAsr,
    compression_ratio,
    decode_cap,
    fit_features,
    fitted_frames,
    loop_start,
    repeated_phrase,
)
from pipeline.speech_gate import GateConfig, SpeechGate


def seconds(s: float) -> np.ndarray:
    return np.full(int(s * SAMPLE_RATE), 0.1, dtype=np.float32)


def test_fitted_frames_cover_audio_plus_padding_and_are_even() -> None:
    assert fitted_frames(3 * SAMPLE_RATE, 2.0) == 500
    assert fitted_frames(3 * SAMPLE_RATE, 0.0) == 300
    odd = fitted_frames(SAMPLE_RATE + 160, 0.0)  # 101 frames of audio
    assert odd == 102 and odd % 2 == 0
    assert fitted_frames(1, 0.0) == 2


def test_decode_cap_grows_with_audio_and_stays_bounded() -> None:
    assert decode_cap(0) == decode_cap(SAMPLE_RATE // 2)  # the floor for one-word turns
    assert decode_cap(10 * SAMPLE_RATE) > decode_cap(3 * SAMPLE_RATE)
    assert decode_cap(3600 * SAMPLE_RATE) <= MAX_DECODE_TOKENS // 2
    # A fast 3 s question (~12 words, ~16 tokens) fits with room to spare.
    assert decode_cap(3 * SAMPLE_RATE) >= 24


def test_fit_features_pads_with_zeros_or_cuts() -> None:
    feats = np.ones((80, 7), dtype=np.float32)
    padded = fit_features(feats, 10)
    assert padded.shape == (80, 10) and padded.dtype == np.float32
    assert padded[:, :7].min() == 1 and padded[:, 7:].max() == 0
    cut = fit_features(np.arange(80 * 12, dtype=np.float64).reshape(80, 12), 4)
    assert cut.shape == (80, 4) and cut.flags["C_CONTIGUOUS"] and cut.dtype == np.float32


def test_compression_ratio_flags_loops_not_questions() -> None:
    assert compression_ratio("What should I pack for a weekend hiking trip?") < 2.4
    assert compression_ratio("Why is the sky blue? " * 12) > 2.4


def test_repeated_phrase_catches_short_loops_gzip_misses() -> None:
    loop = "How far away is the nearest star? How far away is the nearest star? How"
    assert compression_ratio(loop) < 2.4  # why the second detector exists
    assert repeated_phrase(loop) == "how far away is"
    assert repeated_phrase("What should I pack for a weekend hiking trip?") == ""
    assert repeated_phrase("Yes, yes, yes.") == ""  # a few repeated words are not a loop


BREAD_LOOP = Transcript("Why does bread go stale so fast? Why does bread go stale so",
                        "fitted", tokens=14)
BREAD = Transcript("Why does bread go stale so fast?", "fitted", tokens=8)


def test_a_looped_decode_is_redone_with_more_silence_before_the_30s_window() -> None:
    asr = RecordingAsr(fitted=[BREAD_LOOP, BREAD], gate=False)
    result = asr.recognize(seconds(3))
    assert asr.calls == [("fitted", fitted_frames(3 * SAMPLE_RATE, DEFAULT_PAD_S)),
                         ("fitted", fitted_frames(3 * SAMPLE_RATE, RETRY_PADS[0]))]
    assert result.text == "Why does bread go stale so fast?"
    assert result.window == "fitted" and "twice" in result.fell_back


def test_each_retry_pad_is_tried_in_turn() -> None:
    asr = RecordingAsr(fitted=[BREAD_LOOP, BREAD_LOOP, BREAD], gate=False)
    result = asr.recognize(seconds(3))
    assert asr.calls == [("fitted", fitted_frames(3 * SAMPLE_RATE, pad))
                         for pad in (DEFAULT_PAD_S, *RETRY_PADS)]
    assert result.text == BREAD.text and result.window == "fitted"


def test_loop_start_finds_where_the_tokens_begin_to_repeat_from_the_first() -> None:
    assert loop_start([1, 2, 3, 4, 1, 2, 3, 4, 1, 2]) == 4  # the last repeat stops short
    assert loop_start([7, 8, 7, 8, 7]) == 2
    assert loop_start([1, 2, 3, 1, 2, 3]) == 3
    assert loop_start([1, 2, 3, 4, 5]) is None
    assert loop_start([9, 1, 2, 1, 2, 1, 2]) is None  # repeats, but not from the start
    assert loop_start([1, 2, 3, 1]) is None  # one token is no repeat
    assert loop_start([]) is None


def bread_loop(end_prob: float, kept: str = BREAD.text) -> Transcript:
    """The bread loop as ``_fitted`` reports it: 8 tokens, then the repeat."""
    return Transcript(BREAD_LOOP.text, "fitted", tokens=14, avg_logprob=-0.4,
                      loop_end=LoopEnd(8, kept, end_prob, -0.2, 0.9))


def test_a_loop_whisper_could_have_ended_is_cut_there_without_a_second_decode() -> None:
    asr = RecordingAsr(fitted=[bread_loop(0.3)], gate=False)
    result = asr.recognize(seconds(3))
    assert asr.calls == [("fitted", fitted_frames(3 * SAMPLE_RATE, DEFAULT_PAD_S))]
    assert (result.text, result.tokens, result.window) == (BREAD.text, 8, "fitted")
    assert result.redone == "cut" and "twice" in result.fell_back
    # the confidence the endpoint reads is that of the words kept, not of the loop
    assert (result.avg_logprob, result.last_word_prob) == (-0.2, 0.9)


def test_a_loop_whisper_would_not_have_ended_is_decoded_again() -> None:
    asr = RecordingAsr(fitted=[bread_loop(LOOP_END_MIN_PROB / 2), BREAD], gate=False)
    result = asr.recognize(seconds(3))
    assert [c[1] for c in asr.calls] == [fitted_frames(3 * SAMPLE_RATE, pad)
                                         for pad in (DEFAULT_PAD_S, RETRY_PADS[0])]
    assert result.text == BREAD.text and result.redone == "fitted"


def test_a_cut_that_still_loops_is_decoded_again() -> None:
    still = bread_loop(0.5, kept="Why does bread go stale? Why does bread go stale?")
    asr = RecordingAsr(fitted=[still, BREAD], gate=False)
    result = asr.recognize(seconds(3))
    assert len(asr.calls) == 2 and result.redone == "fitted"


def test_a_question_that_loops_every_time_is_redone_on_the_full_window() -> None:
    asr = RecordingAsr(fitted=BREAD_LOOP, gate=False)
    result = asr.recognize(seconds(3))
    assert [c[0] for c in asr.calls] == ["fitted"] * (1 + len(RETRY_PADS)) + ["full"]
    assert result.window == "full" and "twice" in result.fell_back


def test_no_retry_with_more_silence_when_it_would_reach_30s() -> None:
    # Fits with 3 s of silence and with the first retry's, not with the second's.
    long_s = FULL_WINDOW_FRAMES / 100 - RETRY_PADS[1] + 0.5
    asr = RecordingAsr(fitted=BREAD_LOOP, gate=False)
    asr.recognize(seconds(long_s))
    assert [c[0] for c in asr.calls] == ["fitted", "fitted", "full"]
    asr = RecordingAsr(fitted=BREAD_LOOP, gate=False)
    asr.recognize(seconds(FULL_WINDOW_FRAMES / 100 - RETRY_PADS[0] + 0.5))
    assert [c[0] for c in asr.calls] == ["fitted", "full"]


class RecordingAsr(WhisperAsr):
    """WhisperAsr whose two decoding paths are scripted and recorded."""

    def __init__(self, fitted: Transcript | list[Transcript] | None = None,
                 full: Transcript | None = None, **kwargs: object) -> None:
        super().__init__(Path("/nonexistent"), **kwargs)  # type: ignore[arg-type]
        self._model = object()  # type: ignore[assignment]  # "loaded": no load() call
        self.calls: list[tuple[str, int]] = []
        # One result for every fitted decode, or one per decode in turn.
        self.fitted_results = fitted if isinstance(fitted, list) else [
            fitted or Transcript("Why is the sky blue?", "fitted", tokens=6,
                                 no_speech_prob=0.01, avg_logprob=-0.2)]
        self.full_result = full or Transcript("Why is the sky blue?", "full", tokens=6,
                                              no_speech_prob=0.01, avg_logprob=-0.2)

    def _fitted(self, samples: np.ndarray, frames: int) -> Transcript:
        self.calls.append(("fitted", frames))
        return self.fitted_results[min(len(self.calls), len(self.fitted_results)) - 1]

    def _full(self, samples: np.ndarray) -> Transcript:
        self.calls.append(("full", samples.size))
        return self.full_result


def test_short_utterance_uses_the_fitted_window() -> None:
    asr = RecordingAsr(gate=False)
    assert asr.transcribe(seconds(3)) == "Why is the sky blue?"
    assert asr.calls == [("fitted", fitted_frames(3 * SAMPLE_RATE, DEFAULT_PAD_S))]


def test_long_utterance_falls_back_to_the_30s_window() -> None:
    asr = RecordingAsr(gate=False)
    long_s = FULL_WINDOW_FRAMES / 100 - DEFAULT_PAD_S + 0.5  # fitted would reach 30 s
    result = asr.recognize(seconds(long_s))
    assert [c[0] for c in asr.calls] == ["full"] and result.window == "full"


def test_window_full_option_keeps_the_old_path() -> None:
    asr = RecordingAsr(gate=False, window="full")
    asr.transcribe(seconds(3))
    assert [c[0] for c in asr.calls] == ["full"]
    asr.recognize(seconds(3), window="fitted")  # per call, for side-by-side benches
    assert [c[0] for c in asr.calls] == ["full", "fitted"]


def test_unknown_window_is_refused() -> None:
    with pytest.raises(ValueError, match="window"):
        WhisperAsr(Path("/x"), window="tiny")  # type: ignore[arg-type]


def test_a_fitted_decode_that_hits_the_cap_is_redone_on_the_full_window() -> None:
    loop = Transcript("sky " * 40, "fitted", tokens=decode_cap(3 * SAMPLE_RATE))
    asr = RecordingAsr(fitted=loop, gate=False)
    result = asr.recognize(seconds(3))
    assert [c[0] for c in asr.calls] == ["fitted"] * (1 + len(RETRY_PADS)) + ["full"]
    assert result.window == "full" and "cap" in result.fell_back
    assert result.text == "Why is the sky blue?"


def test_repetitive_fitted_text_is_redone_on_the_full_window() -> None:
    loop = Transcript("Why is the sky blue? " * 6, "fitted", tokens=20)
    asr = RecordingAsr(fitted=loop, gate=False)
    assert "repetitive" in asr.recognize(seconds(3)).fell_back


def test_empty_audio_is_empty_text_without_a_decode() -> None:
    asr = RecordingAsr()
    assert asr.transcribe(np.zeros(0, dtype=np.float32)) == ""
    assert asr.calls == []


def constant_vad(prob: float) -> SpeechGate:
    return SpeechGate(GateConfig(), vad=lambda audio: np.full(audio.size // 512, prob))


def test_gate_stops_non_speech_before_whisper() -> None:
    asr = RecordingAsr(gate=constant_vad(0.05))
    result = asr.recognize(seconds(3))
    assert result.text == "" and result.window == "gated" and asr.calls == []
    assert result.gate is not None and "VAD" in result.gate.reason


def test_gate_drops_a_transcript_whisper_doubts() -> None:
    doubt = Transcript("you", "fitted", tokens=1, no_speech_prob=0.9, avg_logprob=-1.6)
    asr = RecordingAsr(fitted=doubt, gate=constant_vad(0.9))
    result = asr.recognize(seconds(3))
    assert result.text == "" and result.raw_text == "you"
    assert asr.calls and result.gate is not None and not result.gate.speech


def test_gate_passes_speech_and_can_be_bypassed() -> None:
    asr = RecordingAsr(gate=constant_vad(0.9))
    assert asr.transcribe(seconds(3)) == "Why is the sky blue?"
    silent = RecordingAsr(gate=constant_vad(0.0))
    assert silent.recognize(seconds(3), gated=False).text == "Why is the sky blue?"
