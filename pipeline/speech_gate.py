"""The speech gate: is there a question in this utterance at all?

Silence, noise, clicks and hums must end the turn as "heard no speech" instead of reaching
the LLM: Whisper says "you" to 3 s of digital silence, and the short encoder window of
``pipeline.asr`` makes it readier still to hear words in noise. Two independent signals,
each cheap:

1. **Silero VAD** (faster-whisper's asset) over the whole utterance, *before* Whisper. Too
   little voiced time and Whisper is not run at all, so a silent turn costs a few
   milliseconds instead of a transcription.
2. **Whisper's own confidence**, *after* decoding: the no-speech probability of the first
   decoding step and the average log-probability of the text. A transcript Whisper itself
   doubts is dropped.

The thresholds below were checked with ``scripts/bench_asr.py gate`` on a set of generated
non-speech clips (``scripts/make_gate_clips.py``: noise of three colours and four levels,
silence, clicks, knocks, tones, music-like sounds, breaths, coughs) and speech clips (the
samples, held-out questions, one-word turns, speech at -30/-45 dB and in noise at 10/0 dB
SNR); docs/results.md has the table. Pure decisions (``GateConfig``, ``SpeechEvidence``)
are separate from the model (``SpeechGate``) so the rules are unit-tested without
onnxruntime.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.audio_in import SAMPLE_RATE

log = logging.getLogger(__name__)

WINDOW = 512  # Silero's window at 16 kHz (32 ms)
WINDOW_MS = WINDOW * 1000 / SAMPLE_RATE

# Speech probabilities for consecutive 512-sample windows of a whole utterance.
VadModel = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class GateConfig:
    # Silero's own default decision threshold per window.
    vad_threshold: float = 0.5
    # Voiced time below this is a click, a cough or a noise burst, not a question (the
    # same floor as the microphone's segmenter). Measured: every non-speech clip 0 ms,
    # the shortest one-word turn ("Why?") 352 ms.
    min_voiced_ms: float = 200.0
    # Whisper's usual rule (faster-whisper's defaults): no-speech probability above this...
    no_speech_threshold: float = 0.6
    # ...and an average log-probability below this: Whisper doubts its own words.
    logprob_threshold: float = -1.0


@dataclass(frozen=True)
class SpeechEvidence:
    """What Silero heard in an utterance."""

    voiced_ms: float  # total time of windows at or above the threshold
    longest_ms: float  # longest run of consecutive voiced windows
    peak: float  # highest speech probability of any window

    @classmethod
    def from_probabilities(cls, probs: np.ndarray, threshold: float) -> SpeechEvidence:
        voiced = np.asarray(probs, dtype=np.float32).reshape(-1) >= threshold
        longest = run = 0
        for v in voiced:
            run = run + 1 if v else 0
            longest = max(longest, run)
        peak = float(np.max(probs)) if np.size(probs) else 0.0
        return cls(voiced_ms=float(voiced.sum()) * WINDOW_MS, longest_ms=longest * WINDOW_MS,
                   peak=peak)


@dataclass(frozen=True)
class GateVerdict:
    speech: bool
    reason: str  # why not, in a few words ("" when speech)


def vad_verdict(evidence: SpeechEvidence, config: GateConfig) -> GateVerdict:
    """Before Whisper: enough voiced time to be worth transcribing?"""
    if evidence.voiced_ms < config.min_voiced_ms:
        return GateVerdict(False, f"VAD: {evidence.voiced_ms:.0f} ms voiced "
                                  f"(< {config.min_voiced_ms:.0f} ms)")
    return GateVerdict(True, "")


def whisper_verdict(text: str, no_speech_prob: float, avg_logprob: float,
                    config: GateConfig) -> GateVerdict:
    """After Whisper: is the transcript something Whisper itself believes?"""
    if not any(ch.isalnum() for ch in text):
        return GateVerdict(False, "no words in the transcript")
    if no_speech_prob > config.no_speech_threshold and avg_logprob < config.logprob_threshold:
        return GateVerdict(False, f"Whisper: no-speech {no_speech_prob:.2f}, "
                                  f"log-prob {avg_logprob:.2f}")
    return GateVerdict(True, "")


class SpeechGate:
    """Silero over a whole utterance + the rules above. Blocking; cheap (a few ms per s)."""

    def __init__(self, config: GateConfig | None = None, vad: VadModel | None = None) -> None:
        self.config = config or GateConfig()
        self._vad = vad

    def _model(self) -> VadModel:
        if self._vad is None:
            from faster_whisper.vad import get_vad_model  # onnxruntime: import when used

            model: Any = get_vad_model()
            self._vad = model
        assert self._vad is not None
        return self._vad

    def load(self) -> None:
        self._model()

    def evidence(self, audio: np.ndarray) -> SpeechEvidence:
        samples = np.asarray(audio, dtype=np.float32).reshape(-1)
        if samples.size == 0:
            return SpeechEvidence(0.0, 0.0, 0.0)
        # Whole windows only (the model's contract); the tail is padded with silence.
        padded = np.pad(samples, (0, (-samples.size) % WINDOW))
        probs = np.asarray(self._model()(padded)).reshape(-1)
        return SpeechEvidence.from_probabilities(probs, self.config.vad_threshold)

    def before_asr(self, audio: np.ndarray) -> tuple[GateVerdict, SpeechEvidence]:
        evidence = self.evidence(audio)
        return vad_verdict(evidence, self.config), evidence

    def after_asr(self, text: str, no_speech_prob: float, avg_logprob: float) -> GateVerdict:
        return whisper_verdict(text, no_speech_prob, avg_logprob, self.config)
