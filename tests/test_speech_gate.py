"""The speech gate's rules (pure), and Silero's verdict on real audio (no Whisper needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipeline.speech_gate import (
    WINDOW_MS,
    GateConfig,
    SpeechEvidence,
    SpeechGate,
    vad_verdict,
    whisper_verdict,
)

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
CONFIG = GateConfig()


def test_evidence_counts_voiced_time_and_the_longest_run() -> None:
    probs = np.array([0.1, 0.9, 0.9, 0.2, 0.8, 0.9, 0.95, 0.1])
    ev = SpeechEvidence.from_probabilities(probs, 0.5)
    assert ev.voiced_ms == pytest.approx(5 * WINDOW_MS)
    assert ev.longest_ms == pytest.approx(3 * WINDOW_MS)
    assert ev.peak == pytest.approx(0.95)
    empty = SpeechEvidence.from_probabilities(np.zeros(0), 0.5)
    assert (empty.voiced_ms, empty.longest_ms, empty.peak) == (0, 0, 0)


def test_vad_verdict_needs_a_minimum_of_voiced_time() -> None:
    short = SpeechEvidence(CONFIG.min_voiced_ms - WINDOW_MS, 0, 0.9)
    enough = SpeechEvidence(CONFIG.min_voiced_ms, CONFIG.min_voiced_ms, 0.9)
    assert not vad_verdict(short, CONFIG).speech
    assert "VAD" in vad_verdict(short, CONFIG).reason
    assert vad_verdict(enough, CONFIG).speech and vad_verdict(enough, CONFIG).reason == ""


@pytest.mark.parametrize(("text", "no_speech", "logprob", "speech"), [
    ("Why is the sky blue?", 0.02, -0.25, True),
    ("Why is the sky blue?", 0.95, -0.25, True),  # sure of its words: keep
    ("you", CONFIG.no_speech_threshold + 0.1, CONFIG.logprob_threshold - 0.1, False),
    ("Quiet to stay awake", 0.2, -1.8, True),  # a bad guess at speech is still speech
    ("...", 0.0, -0.1, False),  # punctuation only
    ("", 0.0, 0.0, False),
])
def test_whisper_verdict(text: str, no_speech: float, logprob: float, speech: bool) -> None:
    verdict = whisper_verdict(text, no_speech, logprob, CONFIG)
    assert verdict.speech is speech
    assert (verdict.reason == "") is speech


def test_gate_pads_audio_to_whole_windows_for_the_model() -> None:
    seen: list[int] = []

    def vad(audio: np.ndarray) -> np.ndarray:
        seen.append(audio.size)
        return np.full(audio.size // 512, 0.9)

    gate = SpeechGate(vad=vad)
    verdict, evidence = gate.before_asr(np.zeros(1000, dtype=np.float32))
    assert seen == [1024] and evidence.voiced_ms == pytest.approx(2 * WINDOW_MS)
    assert not verdict.speech  # 64 ms voiced is not a question
    assert gate.evidence(np.zeros(0, dtype=np.float32)).voiced_ms == 0


@pytest.fixture(scope="module")
def silero() -> SpeechGate:
    pytest.importorskip("faster_whisper")
    gate = SpeechGate()
    gate.load()
    return gate


def test_silero_hears_the_samples_and_not_silence_or_white_noise(silero: SpeechGate) -> None:
    from pipeline.audio_in import load_wav

    for wav in sorted(SAMPLES.glob("*.wav")):
        verdict, evidence = silero.before_asr(load_wav(wav))
        assert verdict.speech, (wav.name, evidence)
    rng = np.random.default_rng(3)
    assert not silero.before_asr(np.zeros(3 * 16000, dtype=np.float32))[0].speech
    noise = (rng.standard_normal(3 * 16000) * 0.05).astype(np.float32)
    assert not silero.before_asr(noise)[0].speech
