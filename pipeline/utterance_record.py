"""Every utterance the microphone heard, on disk (``talk --record DIR``).

What the user said is kept whatever became of it: answered, cut, ignored as too short over
the reply, or lost to a server that died. Each is a 16 kHz mono WAV numbered in the order
it was said (``utterance-001.wav`` …), as the segmenter handed it over: pre-roll included,
trailing silence not. ``voice-llm replay --live DIR/*.wav`` speaks them again in real time,
so a live conversation becomes a repeatable one, and what Whisper made of a turn can be
looked at again.
"""

from __future__ import annotations

import logging
import re
import wave
from pathlib import Path

import numpy as np

from pipeline.audio_in import SAMPLE_RATE

log = logging.getLogger(__name__)

_NAME = re.compile(r"utterance-(\d+)\.wav$")


class UtteranceRecorder:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        # A second talk into the same folder goes on after the first one's files.
        taken = [int(m.group(1)) for p in folder.iterdir() if (m := _NAME.match(p.name))]
        self.count = max(taken, default=0)
        self.first = self.count + 1  # this session's first number
        self.saved = 0  # utterances written by this session

    def summary(self) -> str:
        """One line for the end of a session: what it wrote, and where."""
        if not self.saved:
            return f"no utterances recorded in {self.folder}"
        span = f"utterance-{self.first:03d}.wav"
        if self.saved > 1:
            span += f" … utterance-{self.count:03d}.wav"
        return f"{self.saved} utterance{'s' * (self.saved > 1)} recorded in {self.folder} ({span})"

    def save(self, audio: np.ndarray) -> Path:
        """Write one utterance (float32, 16 kHz); blocking, a few ms for a question."""
        self.count += 1
        self.saved += 1
        path = self.folder / f"utterance-{self.count:03d}.wav"
        pcm = np.clip(np.asarray(audio, dtype=np.float32).ravel(), -1.0, 1.0)
        with wave.open(str(path), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(SAMPLE_RATE)
            w.writeframes((pcm * 32767).astype("<i2").tobytes())
        log.info("recorded %s (%.2f s)", path, pcm.size / SAMPLE_RATE)
        return path
