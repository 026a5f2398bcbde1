#!/usr/bin/env python3
"""Write the speech gate's test clips: things that are not a question, and things that are.

Non-speech (must never reach the LLM): digital silence, a faint noise floor, white / pink /
brown noise at three levels, clicks, a 50 Hz hum, tones, a chord, a melody, a sweep,
breath-like noise bursts, coughs, rain, knocks, beeps, DTMF, a drum beat, a whistle,
and speech played backwards (a voice without words). Speech (must pass): the shipped
samples, held-out questions synthesized here (Piper and espeak-ng voices, with their
texts), short one-word turns, the samples at low level, and the samples in white and pink
noise at 10 and 0 dB SNR.

Everything is generated with numpy (seeded) or synthesized offline; the same command
writes the same non-speech clips. ``manifest.json`` maps each file to
``{"speech": bool, "category": str, "text": str}`` (text only for speech).

    .venv/bin/python scripts/make_gate_clips.py [--out out/gate_clips]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import wave
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from make_samples import Sample, synthesize_native, to_sample_wav  # noqa: E402

from pipeline.audio_in import SAMPLE_RATE, load_wav  # noqa: E402

SECONDS = 3.0
N = int(SECONDS * SAMPLE_RATE)

# Held-out questions: not in samples/, 2-6 s, several voices. Their texts are the reference
# for the WER of both windows (scripts/bench_asr.py window).
HELD_OUT = (
    Sample("h01_boil_egg.wav", "How long should I boil an egg?", "piper"),
    Sample("h02_moon_phases.wav", "Why does the moon change its shape every night?", "piper",
           1.1),
    Sample("h03_dinner_ideas.wav", "Can you suggest a quick dinner for two people?", "piper"),
    Sample("h04_rain_smell.wav", "What makes the smell after it rains?", "piper", 1.2),
    Sample("h05_houseplants.wav", "Which houseplants are easy to keep alive?", "piper"),
    Sample("h06_interview.wav", "How do I prepare for a job interview next week?", "piper",
           1.1),
    Sample("h07_coffee.wav", "Is it bad to drink coffee in the evening?", "en-us+f3", 0.85),
    Sample("h08_stars.wav", "How far away is the nearest star?", "en-gb+m3", 0.85),
    Sample("h09_budget.wav", "What is a simple way to make a monthly budget?", "en-us+m2",
           0.85),
    Sample("h10_running.wav", "How should a beginner start running?", "en-us+f3", 0.85),
    Sample("h11_guitar.wav", "What is the easiest way to tune a guitar?", "en-us+m2", 0.85),
    Sample("h12_bread.wav", "Why does bread go stale so fast?", "piper", 1.0),
)
SHORT = (
    Sample("s01_why.wav", "Why?", "piper"),
    Sample("s02_yes.wav", "Yes.", "piper"),
    Sample("s03_stop.wav", "Stop.", "en-us+m2", 0.85),
    Sample("s04_thanks.wav", "Thank you.", "piper"),
)


def db(level_db: float) -> float:
    return float(10 ** (level_db / 20))


def colored_noise(rng: np.random.Generator, color: str, n: int = N) -> np.ndarray:
    """Unit-RMS white, pink (1/f) or brown (1/f^2) noise, shaped in the frequency domain."""
    spectrum = np.fft.rfft(rng.standard_normal(n))
    f = np.fft.rfftfreq(n, 1 / SAMPLE_RATE)
    f[0] = f[1]
    spectrum *= {"white": 1.0, "pink": 1 / np.sqrt(f), "brown": 1 / f}[color]
    x = np.fft.irfft(spectrum, n)
    return x / np.sqrt(np.mean(x**2))


def rms_to(x: np.ndarray, level_db: float) -> np.ndarray:
    return x / max(float(np.sqrt(np.mean(x**2))), 1e-12) * db(level_db)


def tone(hz: float, seconds: float = SECONDS, amp: float = 0.3) -> np.ndarray:
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    fade = np.minimum(1, np.minimum(t, t[-1] - t) / 0.02)
    return amp * np.sin(2 * np.pi * hz * t) * fade


def bandpass(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    spectrum = np.fft.rfft(x)
    f = np.fft.rfftfreq(x.size, 1 / SAMPLE_RATE)
    spectrum[(f < lo) | (f > hi)] = 0
    return np.fft.irfft(spectrum, x.size)


def non_speech(rng: np.random.Generator) -> dict[str, tuple[str, np.ndarray]]:
    clips: dict[str, tuple[str, np.ndarray]] = {
        "silence_digital": ("silence", np.zeros(N)),
        "silence_floor": ("silence", rms_to(rng.standard_normal(N), -70)),
    }
    for color in ("white", "pink", "brown"):
        for level in (-50, -35, -20):
            clips[f"noise_{color}_{-level}db"] = ("noise", rms_to(colored_noise(rng, color),
                                                                   level))
    clicks = np.zeros(N)
    for at in rng.integers(0, N - 40, 6):
        clicks[at:at + 40] += rng.choice([-0.6, 0.6]) * np.exp(-np.arange(40) / 6)
    clips["clicks_sparse"] = ("clicks", clicks)
    typing = np.zeros(N)
    for at in np.arange(0.2, SECONDS - 0.1, 0.17) * SAMPLE_RATE:
        i = int(at + rng.integers(-400, 400))
        typing[i:i + 200] += bandpass(rng.standard_normal(200), 1500, 6000)[:200] * 0.3 * \
            np.exp(-np.arange(200) / 30)
    clips["clicks_typing"] = ("clicks", typing + rms_to(rng.standard_normal(N), -60))
    pop = np.zeros(N)
    pop[N // 2:N // 2 + 800] = 0.8 * np.exp(-np.arange(800) / 120)
    clips["clicks_pop"] = ("clicks", pop)
    hum = sum(tone(50 * k, amp=0.1 / k) for k in (1, 2, 3, 5))
    clips["hum_50hz"] = ("tones", np.asarray(hum))
    clips["tone_440"] = ("tones", tone(440))
    clips["tone_chord"] = ("tones", (tone(261.6) + tone(329.6) + tone(392.0)) / 3)
    notes = [262, 294, 330, 349, 392, 440, 494, 523, 494, 440, 392, 349]
    melody = np.concatenate([tone(hz, SECONDS / len(notes)) + 0.3 * tone(2 * hz, SECONDS /
                             len(notes)) for hz in notes])
    clips["tone_melody"] = ("tones", melody / 2)
    t = np.arange(N) / SAMPLE_RATE
    clips["tone_sweep"] = ("tones", 0.3 * np.sin(2 * np.pi * (100 * t + 1500 * t**2 / 3)))
    for i, (lo, hi) in enumerate(((400, 2500), (800, 4000), (200, 1500))):
        breath = np.zeros(N)
        for start in (0.3, 1.6):
            a, b = int(start * SAMPLE_RATE), int((start + 0.8) * SAMPLE_RATE)
            env = np.sin(np.linspace(0, np.pi, b - a)) ** 2
            breath[a:b] = bandpass(rng.standard_normal(b - a), lo, hi) * env
        clips[f"breath_{i + 1}"] = ("breaths", rms_to(breath, -30))
    fan = bandpass(colored_noise(rng, "brown"), 20, 800) + 0.2 * np.asarray(hum)
    clips["fan"] = ("noise", rms_to(fan, -30))
    for color in ("white", "pink"):
        clips[f"noise_{color}_10db"] = ("noise", rms_to(colored_noise(rng, color), -10))
    rain = rms_to(colored_noise(rng, "pink"), -40)
    for at in rng.integers(0, N - 100, 300):
        rain[at:at + 100] += rng.uniform(0.02, 0.1) * bandpass(rng.standard_normal(100),
                                                                2000, 7000)
    clips["rain"] = ("noise", rain)
    knocks = np.zeros(N)
    for start in (0.5, 0.75, 1.0, 2.0, 2.25):
        i = int(start * SAMPLE_RATE)
        knocks[i:i + 1600] += tone(120, 0.1, 0.7) * np.exp(-np.arange(1600) / 250)
    clips["knocks"] = ("clicks", knocks)
    beeps = np.zeros(N)
    for start in (0.3, 1.3, 2.3):
        i = int(start * SAMPLE_RATE)
        beeps[i:i + 3200] = 0.2 * np.sign(tone(1000, 0.2))
    clips["beeps"] = ("tones", beeps)
    dtmf = np.concatenate([tone(lo, 0.25) + tone(hi, 0.25) if k % 2 == 0 else np.zeros(2000)
                           for k, (lo, hi) in enumerate([(697, 1209), (0, 0), (770, 1336),
                                                         (0, 0), (852, 1477), (0, 0),
                                                         (941, 1336)] * 2)])
    clips["dtmf"] = ("tones", np.pad(dtmf, (0, max(0, N - dtmf.size)))[:N] / 2)
    beat = np.zeros(N)
    for k, start in enumerate(np.arange(0, SECONDS, 0.25)):
        i = int(start * SAMPLE_RATE)
        n = min(2400, N - i)
        if k % 2 == 0:  # kick drum: a falling low sine
            f = 60 + 90 * np.exp(-np.arange(n) / 300)
            beat[i:i + n] += 0.6 * np.sin(2 * np.pi * np.cumsum(f) / SAMPLE_RATE) * \
                np.exp(-np.arange(n) / 900)
        else:  # hi-hat: a short bright noise burst
            beat[i:i + 400] += 0.15 * bandpass(rng.standard_normal(400), 6000, 8000)
    bass = np.concatenate([tone(hz, 0.5, 0.2) for hz in (55, 55, 73, 65, 55, 49)])
    clips["music_beat"] = ("tones", beat + bass[:N])
    t = np.arange(N) / SAMPLE_RATE
    vibrato = 1200 + 40 * np.sin(2 * np.pi * 5 * t)
    clips["whistle"] = ("tones", 0.3 * np.sin(2 * np.pi * np.cumsum(vibrato) / SAMPLE_RATE))
    for i, (lo, hi) in enumerate(((300, 3500), (150, 2500))):
        cough = np.zeros(N)
        for start in (0.8, 1.3):
            a = int(start * SAMPLE_RATE)
            env = np.exp(-np.arange(4000) / 900) * (1 - np.exp(-np.arange(4000) / 40))
            cough[a:a + 4000] += bandpass(rng.standard_normal(4000), lo, hi) * env
        clips[f"cough_{i + 1}"] = ("coughs", rms_to(cough, -20))
    return clips


def write(path: Path, x: np.ndarray) -> None:
    pcm = np.clip(np.round(np.asarray(x) * 32767), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(pcm.tobytes())


def with_noise(speech: np.ndarray, noise: np.ndarray, snr_db: float) -> np.ndarray:
    voiced = speech[np.abs(speech) > 0.01]
    speech_rms = float(np.sqrt(np.mean(voiced**2))) if voiced.size else 0.1
    noise = noise[: speech.size] / np.sqrt(np.mean(noise[: speech.size] ** 2))
    mixed = speech + noise * speech_rms / db(snr_db)
    return mixed * min(1.0, 0.9 / float(np.abs(mixed).max()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "gate_clips")
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(2026)
    manifest: dict[str, dict[str, object]] = {}
    for name, (category, x) in non_speech(rng).items():
        write(out / f"{name}.wav", x)
        manifest[f"{name}.wav"] = {"speech": False, "category": category, "text": ""}
    with tempfile.TemporaryDirectory() as tmp:
        for sample in (*HELD_OUT, *SHORT):
            native = Path(tmp) / sample.name
            synthesize_native(sample, native)
            to_sample_wav(native, out / sample.name)
            category = "held-out question" if sample in HELD_OUT else "one-word turn"
            manifest[sample.name] = {"speech": True, "category": category,
                                     "text": sample.text}
    transcripts = json.loads((ROOT / "samples" / "transcripts.json").read_text())
    for name, text in sorted(transcripts.items()):
        speech = load_wav(ROOT / "samples" / name).astype(np.float64)
        stem = Path(name).stem
        variants = {
            "sample": ("sample", speech),
            "quiet30": ("speech at -30 dB", speech * db(-30) / 0.8),
            "quiet45": ("speech at -45 dB", speech * db(-45) / 0.8),
        }
        for color in ("white", "pink"):
            for snr in (10, 0):
                noise = colored_noise(rng, color, speech.size)
                variants[f"{color}{snr}"] = (f"speech in noise, {snr} dB SNR",
                                             with_noise(speech, noise, snr))
        for suffix, (category, x) in variants.items():
            file = f"{stem}_{suffix}.wav"
            write(out / file, x)
            manifest[file] = {"speech": True, "category": category, "text": text}
        if stem[:2] in ("01", "04", "05"):
            # A voice's sound without words: the hardest case for a gate; no question in it.
            file = f"{stem}_reversed.wav"
            write(out / file, speech[::-1])
            manifest[file] = {"speech": False, "category": "reversed speech", "text": ""}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    kinds = [v["speech"] for v in manifest.values()]
    print(f"wrote {len(manifest)} clips to {out} ({sum(kinds)} speech, "
          f"{len(kinds) - sum(kinds)} non-speech)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
