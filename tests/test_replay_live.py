"""``replay --live``: recorded turns spoken in real time through the live path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pipeline.audio_in import SAMPLE_RATE
from pipeline.recorded_mic import NOISE_FLOOR, RecordedMic

ROOT = Path(__file__).resolve().parent.parent


async def test_recorded_mic_speaks_in_real_time_then_a_quiet_room() -> None:
    mic = RecordedMic()
    tone = np.full(SAMPLE_RATE // 10, 0.5, dtype=np.float32)  # 100 ms
    done = mic.say(tone)
    blocks = []
    started = time.monotonic()
    async for block in mic:
        blocks.append(block.samples)
        if len(blocks) == 10:  # 200 ms
            break
    elapsed = time.monotonic() - started
    assert done.is_set()
    audio = np.concatenate(blocks)
    assert np.all(audio[:tone.size] == 0.5)  # the utterance, sample for sample
    rest = audio[tone.size:]
    assert 0 < np.abs(rest).max() < 10 * NOISE_FLOOR  # then room noise, not zeros
    assert elapsed >= 0.18  # delivered at the pace it was "recorded", not at once


@pytest.mark.integration
def test_replay_live_takes_speculative_turns(llama_server, tmp_path: Path) -> None:
    out = tmp_path / "live.json"
    done = subprocess.run(
        [sys.executable, "-m", "services.cli", "replay", "--live",
         str(ROOT / "samples" / "03_sky_blue.wav"), str(ROOT / "samples" / "04_cup_of_tea.wav"),
         "--llm-url", llama_server.url, "--max-sentences", "1", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "VOICE_LLM_STATE": str(tmp_path / "state")})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    data = json.loads(out.read_text())
    turns = data["turns"]
    assert [t["error"] for t in turns] == [None, None]
    assert "sky" in turns[0]["transcript"].lower() and "tea" in turns[1]["transcript"].lower()
    for t in turns:
        # started at the pause, confirmed at the endpoint, counted from the real speech end
        assert t["speculation_confirmed_ms"] is not None
        assert 0 < t["speech_end_ms"] < 600
        assert t["first_audio_from_speech_end_ms"] > t["first_audio_ms"]
    assert len(data["history"]["history"]) == 4
    assert "speculation: {'started': 2, 'confirmed': 2, 'cancelled': 0" in done.stdout
    assert "from your last sound" in done.stdout


@pytest.mark.integration
def test_replay_live_keeps_the_words_before_a_false_endpoint(llama_server,
                                                            tmp_path: Path) -> None:
    """A request with a long pause in it: a short fixed end takes the pause for the end and
    the first part is answered; the rest barges in before enough of the reply was heard to
    keep it - or, on a slow host, before any of it was played (Whisper still running: the
    cut turn waits for its words). The turn of the rest must still be asked (and keep) the
    whole request."""
    import shutil
    import wave

    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (scripts/setup)")
    sys.path.insert(0, str(ROOT / "scripts"))
    from bench_endpoint import speak  # espeak-ng at 16 kHz, trimmed to its voice

    head = speak("Please remind me to call my sister.", "en-us", 165, tmp_path)
    rest = speak("After lunch tomorrow, at about two o'clock in the afternoon.", "en-us", 150,
                 tmp_path)
    lead = np.zeros(SAMPLE_RATE // 5, np.float32)
    # About when the first reply starts playing (300 ms end + Whisper + the first sentence
    # and its voice): the rest is still being said when it does, and barges in ~0.3 s in.
    pause = np.zeros(SAMPLE_RATE * 9 // 10, np.float32)
    wav = tmp_path / "paused.wav"
    with wave.open(str(wav), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        pcm = np.concatenate([lead, head, pause, rest, lead])
        w.writeframes((np.clip(pcm, -1, 1) * 32767).astype(np.int16).tobytes())

    out = tmp_path / "live.json"
    done = subprocess.run(
        [sys.executable, "-m", "services.cli", "replay", "--live", str(wav),
         "--no-speculate", "--end-silence-ms", "300", "--llm-url", llama_server.url,
         "--max-sentences", "1", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "VOICE_LLM_STATE": str(tmp_path / "state")})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    data = json.loads(out.read_text())
    turns = data["turns"]
    assert len(turns) == 2, done.stdout  # the first part answered, then the rest
    first, last = turns
    assert "sister" in first["transcript"].lower() and "lunch" not in first["transcript"].lower()
    assert "not kept" in done.stdout, done.stdout  # cut before enough of it was heard
    # The last turn was asked the whole request, and the history holds it.
    said = last["transcript"].lower()
    assert "sister" in said and "lunch" in said, done.stdout
    assert last["error"] is None
    history = data["history"]["history"]
    assert len(history) == 2 and history[0]["role"] == "user"
    assert "sister" in history[0]["content"].lower() and "lunch" in history[0]["content"].lower()
    assert "[with turn 1's words, cut off]" in done.stdout
