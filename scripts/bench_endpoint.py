#!/usr/bin/env python3
"""False endpoints vs endpoint wait: the endpoint policy against fixed silences.

A corpus of spoken questions is made with espeak-ng (voices other than the reply's Piper
voice): half of them paused mid-sentence for 300-900 ms at a place where the sentence
cannot end ("Can you tell me about the ... history of bicycles?"), half said in one go.
Each is run through the real pieces of live turn-taking, block by block as a microphone
would deliver it: the Silero segmenter with 200 ms pause events, the real Whisper on the
words so far at every pause, and the endpoint policy setting the end. Compared in the same
run with fixed end silences (no policy).

- false endpoint: the utterance was ended before its last word (the assistant would have
  answered a half question);
- endpoint wait: silence after the real last word until the end was decided (what every
  turn pays before it can be heard).

Usage: scripts/bench_endpoint.py [--out out/endpoint]   (about a minute; real Whisper)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.audio_in import SAMPLE_RATE, load_wav  # noqa: E402
from pipeline.endpoint import EndpointPolicy  # noqa: E402
from pipeline.mic import (  # noqa: E402
    SegmenterConfig,
    SileroStream,
    SpeechPause,
    UtteranceEnd,
    UtteranceSegmenter,
)

# (first part, second part): the first part cannot end a sentence.
PAUSED = [
    ("Can you tell me about the", "history of bicycles?"),
    ("What is the best way to", "learn Spanish quickly?"),
    ("I want to bake a cake and", "I need a simple recipe."),
    ("My flight leaves at", "seven thirty in the morning."),
    ("How many", "planets are in the solar system?"),
    ("I was thinking about", "going hiking this weekend."),
    ("Could you explain why the", "ocean is salty?"),
    ("The meeting is on", "Thursday at three."),
    ("What should I do if my", "plants turn yellow?"),
    ("Remind me to buy milk,", "eggs and bread."),
    ("Is it true that", "cats sleep most of the day?"),
    ("Tell me a story about a", "dragon who could not fly."),
    ("I need about", "twenty minutes to get ready."),
    ("Why do leaves change colour in", "autumn?"),
    ("My favourite kind of music is", "jazz from the fifties."),
    ("Which is healthier, rice or", "pasta?"),
]
WHOLE = [
    "Why is the sky blue?", "How do I make a good cup of tea?",
    "What is the capital of Australia?", "Tell me a fun fact about octopuses.",
    "How far away is the moon?", "Can you recommend a good book?",
    "What time is it in Tokyo?", "How do airplanes stay in the air?",
]
VOICES = ["en-us", "en-gb", "en-us+f3", "en-gb+m3"]
PAUSES_MS = [300, 450, 600, 750, 900]
LEAD_S, TAIL_S = 0.4, 2.0


def speak(text: str, voice: str, workdir: Path) -> np.ndarray:
    path = workdir / "say.wav"
    subprocess.run(["espeak-ng", "-v", voice, "-s", "165", "-w", str(path), text], check=True,
                   capture_output=True)
    audio = load_wav(path)
    loud = np.flatnonzero(np.abs(audio) > 0.01)
    return audio[loud[0]:loud[-1] + 1]


def noise(seconds: float, rng: np.random.Generator) -> np.ndarray:
    return (rng.standard_normal(int(seconds * SAMPLE_RATE)) * 0.001).astype(np.float32)


@dataclass
class Utterance:
    name: str
    audio: np.ndarray
    speech_end: int  # the real last voiced sample
    pause_ms: int | None  # the mid-sentence pause, None for "said in one go"


def make_corpus(workdir: Path) -> list[Utterance]:
    rng = np.random.default_rng(11)
    out = []
    for i, (a, b) in enumerate(PAUSED):
        voice, pause = VOICES[i % len(VOICES)], PAUSES_MS[i % len(PAUSES_MS)]
        first, second = speak(a, voice, workdir), speak(b, voice, workdir)
        audio = np.concatenate([noise(LEAD_S, rng), first, noise(pause / 1000, rng), second])
        out.append(Utterance(f"paused-{i:02d}", np.concatenate([audio, noise(TAIL_S, rng)]),
                             audio.size, pause))
    for i, text in enumerate(WHOLE):
        spoken = np.concatenate([noise(LEAD_S, rng), speak(text, VOICES[i % len(VOICES)],
                                                            workdir)])
        out.append(Utterance(f"whole-{i:02d}", np.concatenate([spoken, noise(TAIL_S, rng)]),
                             spoken.size, None))
    return out


def run_one(u: Utterance, vad: SileroStream, asr: object | None,
            policy: EndpointPolicy | None, end_silence_ms: int,
            use_confidence: bool = True) -> dict[str, object]:
    seg = UtteranceSegmenter(vad, SegmenterConfig(end_silence_ms=end_silence_ms,
                                                  pause_ms=200 if policy else None))
    vad.reset()
    block = SAMPLE_RATE // 50
    ends: list[UtteranceEnd] = []
    judged: list[str] = []
    for i in range(0, u.audio.size, block):
        for ev in seg.feed(u.audio[i:i + block]):
            if isinstance(ev, SpeechPause) and policy is not None and asr is not None:
                heard = asr.recognize(ev.audio)  # type: ignore[attr-defined]
                decision = policy.decide(heard.text, heard.avg_logprob if use_confidence
                                         else None)
                judged.append(f"{heard.text!r} ({heard.avg_logprob:.2f})->{decision.wait_ms}")
                seg.end_after(decision.wait_ms)
            elif isinstance(ev, UtteranceEnd):
                ends.append(ev)
    ends += [e for e in seg.flush() if isinstance(e, UtteranceEnd)]
    margin = int(0.1 * SAMPLE_RATE)  # the segmenter's end may sit a window early
    false_end = any(e.end_sample < u.speech_end - margin for e in ends)
    final = ends[-1] if ends else None
    wait = None if final is None else (final.detected_sample - u.speech_end) * 1000 / SAMPLE_RATE
    return {"name": u.name, "pause_ms": u.pause_ms, "false_endpoint": false_end,
            "endpoint_wait_ms": None if wait is None else round(wait, 1), "judged": judged}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "endpoint")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    from pipeline.asr import WhisperAsr
    from services import models

    print("making the corpus with espeak-ng ...", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = make_corpus(Path(tmp))
    print("loading Whisper base ...", flush=True)
    asr = WhisperAsr(models.whisper_model_dir())
    asr.load()
    vad = SileroStream()
    conditions: dict[str, tuple[EndpointPolicy | None, int, bool]] = {
        "fixed 250 ms": (None, 250, False), "fixed 600 ms": (None, 600, False),
        "fixed 1000 ms": (None, 1000, False),
        "policy, text only": (EndpointPolicy(), 600, False),
        "policy, text + Whisper confidence": (EndpointPolicy(), 600, True),
        "cautious policy (400/900/1200), text + confidence": (
            EndpointPolicy(complete_ms=400, default_ms=900, incomplete_ms=1200), 600, True),
    }
    results: dict[str, list[dict[str, object]]] = {}
    for label, (policy, end_ms, confidence) in conditions.items():
        print(f"{label} ...", flush=True)
        results[label] = [run_one(u, vad, asr, policy, end_ms, confidence) for u in corpus]

    (args.out / "endpoint.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = ["| endpoint | false endpoints (paused) | wait p50 (whole) | wait p50 (paused) "
             "| wait p95 (all) |", "|---|---:|---:|---:|---:|"]
    for label, rows in results.items():
        paused = [r for r in rows if r["pause_ms"] is not None]
        false = sum(bool(r["false_endpoint"]) for r in paused)

        def waits(rs: list[dict[str, object]]) -> list[float]:
            return sorted(float(r["endpoint_wait_ms"]) for r in rs  # type: ignore[arg-type]
                          if r["endpoint_wait_ms"] is not None and not r["false_endpoint"])

        def at(values: list[float], q: float) -> str:
            return f"{values[min(len(values) - 1, int(len(values) * q))]:.0f}" if values else "-"

        whole = waits([r for r in rows if r["pause_ms"] is None])
        pw, allw = waits(paused), waits(rows)
        lines.append(f"| {label} | {false}/{len(paused)} ({100 * false / len(paused):.0f} %) "
                     f"| {at(whole, 0.5)} | {at(pw, 0.5)} | {at(allw, 0.95)} |")
    report = "\n".join(lines)
    (args.out / "endpoint.md").write_text(f"# Endpoint policy vs fixed silences\n\n{report}\n")
    print(report)
    print(f"\nreport: {args.out / 'endpoint.md'} (every utterance: endpoint.json)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
