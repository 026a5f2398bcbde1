"""WhisperAsr with the real bundled Whisper base on the shipped sample turns."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from models_fixture import whisper_model_dir

from pipeline.asr import WhisperAsr
from pipeline.audio_in import SAMPLE_RATE, load_wav

pytestmark = pytest.mark.integration

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
TRANSCRIPTS: dict[str, str] = json.loads((SAMPLES / "transcripts.json").read_text())
MAX_WER = 0.15  # at most one word in 7 wrong: the samples were checked to be exact


@pytest.fixture(scope="module")
def asr() -> Iterator[WhisperAsr]:
    model = WhisperAsr(whisper_model_dir())
    started = time.monotonic()
    model.load()
    print(f"\n[asr] load + warm-up {1000 * (time.monotonic() - started):.0f} ms")
    yield model


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]", " ", text.lower()).split()


def word_error_rate(reference: list[str], hypothesis: list[str]) -> float:
    """Levenshtein distance over words / reference length."""
    row = list(range(len(hypothesis) + 1))
    for i, ref in enumerate(reference, 1):
        prev, row[0] = row[0], i
        for j, hyp in enumerate(hypothesis, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ref != hyp))
    return row[-1] / max(1, len(reference))


def test_word_error_rate_helper() -> None:
    assert word_error_rate(["a", "b", "c"], ["a", "b", "c"]) == 0
    assert word_error_rate(["a", "b", "c"], ["a", "x", "c"]) == pytest.approx(1 / 3)
    assert word_error_rate(["a", "b"], []) == 1


@pytest.mark.parametrize("name", sorted(TRANSCRIPTS))
def test_transcribes_shipped_sample(asr: WhisperAsr, name: str) -> None:
    audio = load_wav(SAMPLES / name)
    started = time.monotonic()
    text = asr.transcribe(audio)
    ms = 1000 * (time.monotonic() - started)
    print(f"\n[asr] {name}: {ms:.0f} ms for {audio.size / SAMPLE_RATE:.2f} s -> {text!r}")
    assert text == text.strip()
    assert word_error_rate(words(TRANSCRIPTS[name]), words(text)) <= MAX_WER, text


def test_empty_audio_is_empty_text(asr: WhisperAsr) -> None:
    assert asr.transcribe(np.zeros(0, dtype=np.float32)) == ""


def test_load_is_idempotent(asr: WhisperAsr) -> None:
    model = asr._model
    asr.load()
    assert asr.loaded and asr._model is model
