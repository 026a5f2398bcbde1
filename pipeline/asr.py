"""Speech recognition: faster-whisper on a local CTranslate2 model folder.

Blocking by design: the turn runner calls ``transcribe`` through ``asyncio.to_thread``.
The model folder is found by the caller (``services.models`` assembles the bundled Whisper
base); this module never looks anything up on a hub.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from faster_whisper import WhisperModel

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000  # what Whisper expects; pipeline.audio_in.load_wav delivers it
_WARMUP_SECONDS = 1.0


class WhisperAsr:
    """One Whisper model, loaded once, transcribing whole utterances."""

    def __init__(self, model_dir: Path, *, language: str | None = "en", threads: int = 2,
                 beam_size: int = 1, compute_type: str = "int8") -> None:
        self.model_dir = Path(model_dir)
        self.language = language
        self.threads = threads
        self.beam_size = beam_size
        self.compute_type = compute_type
        self._model: WhisperModel | None = None

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self) -> None:
        """Load the model (once) and run a warm-up so the first real turn is not slower."""
        if self._model is not None:
            return
        from faster_whisper import WhisperModel

        started = time.monotonic()
        # local_files_only: a folder path never downloads, but be explicit on a closed net.
        self._model = WhisperModel(str(self.model_dir), device="cpu",
                                   compute_type=self.compute_type, cpu_threads=self.threads,
                                   local_files_only=True)
        loaded = time.monotonic()
        # The first call pays for allocating the encoder buffers; do it before "ready".
        self.transcribe(np.zeros(int(SAMPLE_RATE * _WARMUP_SECONDS), dtype=np.float32))
        log.info("whisper loaded from %s in %.0f ms (+%.0f ms warm-up)", self.model_dir,
                 (loaded - started) * 1000, (time.monotonic() - loaded) * 1000)

    def transcribe(self, audio: np.ndarray) -> str:
        """Text of one utterance (float32 mono 16 kHz); blocking, run it in a thread."""
        if audio.size == 0:
            return ""
        if self._model is None:
            self.load()
        assert self._model is not None
        segments, _info = self._model.transcribe(
            np.asarray(audio, dtype=np.float32),
            language=self.language,
            beam_size=self.beam_size,
            # The utterance was already cut by the caller (VAD or a WAV file): a second VAD
            # pass only costs time.
            vad_filter=False,
            without_timestamps=True,
            # Each turn stands alone; conditioning on the previous turn's text invites
            # repetition loops for no accuracy gain on short questions.
            condition_on_previous_text=False,
            # One decode, no temperature fallback: a fallback re-runs the decoder up to five
            # times on unclear audio, multiplying the ~1.2 s that ASR already costs.
            temperature=0.0,
        )
        # `segments` is lazy: decoding happens while we iterate.
        return " ".join(s.text.strip() for s in segments).strip()
