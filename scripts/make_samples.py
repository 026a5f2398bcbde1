#!/usr/bin/env python3
"""Regenerate samples/*.wav and samples/transcripts.json: the recorded user turns.

Each question is synthesized offline (Piper's bundled voice, or espeak-ng for a different
voice), decoded to 16 kHz mono with PyAV (the same path as load_wav), peak-normalized,
padded with 0.3 s of silence at both ends and written as 16-bit PCM. Then Whisper base
transcribes every file and the script fails if one no longer matches its text.

    .venv/bin/python scripts/make_samples.py [--out samples] [--no-verify]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.audio_in import SAMPLE_RATE, load_wav  # noqa: E402

PAD_SECONDS = 0.3
PEAK = 0.8  # leaves headroom; also keeps espeak and Piper at similar loudness


@dataclass(frozen=True)
class Sample:
    name: str
    text: str
    voice: str  # "piper" or an espeak-ng voice such as "en-us+f3"
    speed: float = 1.0  # Piper length_scale, or espeak words-per-minute / 175


SAMPLES = (
    Sample("01_sleep_tips.wav", "What are three tips for sleeping better?", "piper"),
    Sample("02_bicycle_history.wav", "Tell me about the history of the bicycle.", "piper",
           1.1),
    Sample("03_sky_blue.wav", "Why is the sky blue?", "piper", 1.2),
    Sample("04_cup_of_tea.wav", "How do I make a good cup of tea?", "en-us+f3", 0.85),
    Sample("05_hiking_trip.wav", "What should I pack for a weekend hiking trip?",
           "en-gb+m3", 0.85),
    Sample("06_learn_language.wav", "How can I learn a new language quickly?", "en-us+m2",
           0.85),
)


def synthesize_native(sample: Sample, dest: Path) -> None:
    """Write the question at the engine's own rate and format into ``dest``."""
    if sample.voice == "piper":
        _piper(sample, dest)
    else:
        wpm = str(round(175 * sample.speed))
        subprocess.run(["espeak-ng", "-v", sample.voice, "-s", wpm, "-w", str(dest),
                        sample.text], check=True)


def _piper(sample: Sample, dest: Path) -> None:
    from piper import PiperVoice, SynthesisConfig

    from services.models import piper_voice

    onnx, config = piper_voice()
    voice = PiperVoice.load(onnx, config)
    with wave.open(str(dest), "wb") as w:
        voice.synthesize_wav(sample.text, w, SynthesisConfig(length_scale=sample.speed))


def to_sample_wav(native: Path, dest: Path) -> float:
    """16 kHz mono int16 with silence padding; returns the duration in seconds."""
    audio = load_wav(native)  # PyAV decode + resample
    audio = audio * (PEAK / max(float(np.abs(audio).max()), 1e-6))
    pad = np.zeros(int(PAD_SECONDS * SAMPLE_RATE), dtype=np.float32)
    audio = np.concatenate([pad, audio, pad])
    pcm = np.clip(np.round(audio * 32767), -32768, 32767).astype("<i2")
    with wave.open(str(dest), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(pcm.tobytes())
    return pcm.size / SAMPLE_RATE


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]", " ", text.lower()).split()


def verify(out: Path) -> bool:
    from pipeline.asr import WhisperAsr
    from services.models import whisper_model_dir

    asr = WhisperAsr(whisper_model_dir())
    asr.load()
    ok = True
    for sample in SAMPLES:
        started = time.monotonic()
        heard = asr.transcribe(load_wav(out / sample.name))
        ms = (time.monotonic() - started) * 1000
        match = words(heard) == words(sample.text)
        ok &= match
        print(f"  {'ok ' if match else 'BAD'} {sample.name}: {heard!r} ({ms:.0f} ms)")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "samples")
    parser.add_argument("--no-verify", action="store_true", help="skip the Whisper check")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for sample in SAMPLES:
            native = Path(tmp) / sample.name
            synthesize_native(sample, native)
            seconds = to_sample_wav(native, args.out / sample.name)
            print(f"wrote {args.out / sample.name} ({seconds:.2f} s, {sample.voice})")
    transcripts = {s.name: s.text for s in SAMPLES}
    (args.out / "transcripts.json").write_text(json.dumps(transcripts, indent=2) + "\n")
    if args.no_verify:
        return 0
    print("verifying with Whisper base:")
    return 0 if verify(args.out) else 1


if __name__ == "__main__":
    sys.exit(main())
