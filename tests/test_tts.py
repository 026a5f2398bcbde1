"""speakable() markdown cleaning, and PiperTts with the real bundled voice."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from models_fixture import piper_voice

from pipeline.tts import ONSET_FLOOR, PiperTts, speakable, trim_leading_silence


@pytest.mark.parametrize(("raw", "spoken"), [
    ("Plain sentence.", "Plain sentence."),
    ("**Bold** and __strong__ and *em* text.", "Bold and strong and em text."),
    ("Use `pip install` here.", "Use pip install here."),
    ("## Tips for sleep", "Tips for sleep"),
    ("# Title\nBody text.", "Title. Body text."),
    ("- Keep a schedule\n- Avoid screens\n* Dark room",
     "Keep a schedule. Avoid screens. Dark room"),
    ("1. First step.\n2. Second step.", "First step. Second step."),
    ("1) Boil water\n2) Add tea", "Boil water. Add tea"),
    ("• Bullet one", "Bullet one"),
    ("See [the docs](https://example.com/x) now.", "See the docs now."),
    ("![a cat](cat.png)", "a cat"),
    ("> quoted line", "quoted line"),
    ("```python\nprint(1)\n```", "print(1)"),
    ("Before\n\n---\n\nAfter", "Before. After"),
    # What the splitter hands over: pieces of markdown cut mid-span.
    ("**Tip one:", "Tip one:"),
    ("Keep it dark.**", "Keep it dark."),
    ("2.", ""),
    ("**", ""),
    # Not markdown: kept.
    ("It costs 3 * 4 dollars.", "It costs 3 * 4 dollars."),
    ("snake_case stays", "snake_case stays"),
    ("In 2024. We left.", "In 2024. We left."),
])
def test_speakable(raw: str, spoken: str) -> None:
    assert speakable(raw) == spoken
    assert speakable(spoken) == spoken  # idempotent: cleaning twice is harmless


@pytest.fixture(scope="module")
def tts() -> Iterator[PiperTts]:
    onnx, config = piper_voice()
    voice = PiperTts(onnx, config, threads=2)
    started = time.monotonic()
    voice.load()
    print(f"\n[tts] load + warm-up {1000 * (time.monotonic() - started):.0f} ms")
    yield voice


def test_sample_rate_known_before_load() -> None:
    onnx, config = piper_voice()
    voice = PiperTts(onnx, config)
    assert voice.sample_rate == 22050 and not voice.loaded


def test_config_path_defaults_to_model_json() -> None:
    onnx, _config = piper_voice()
    assert PiperTts(onnx).sample_rate == 22050


@pytest.mark.integration
@pytest.mark.parametrize("text", [
    "The sky looks blue because air scatters blue light more than red light.",
    "Hello there. How are you today?",
])
def test_synthesize_plausible_speech(tts: PiperTts, text: str) -> None:
    started = time.monotonic()
    audio = tts.synthesize(text)
    elapsed = time.monotonic() - started
    seconds = audio.size / tts.sample_rate
    print(f"\n[tts] {seconds:.2f} s of audio in {1000 * elapsed:.0f} ms, "
          f"RTF {elapsed / seconds:.3f}: {text!r}")
    assert audio.dtype == np.int16 and audio.ndim == 1
    # ~12-20 characters per second of speech; generous bounds.
    assert len(text) / 30 < seconds < len(text) / 6
    assert int(np.abs(audio).max()) > 3000  # actually audible, not silence


def test_trim_leading_silence_keeps_a_margin_before_the_first_sound() -> None:
    rate = 22050
    sound = np.concatenate([np.zeros(1000, np.int16), np.array([0, 40, -2000, 900], np.int16),
                            np.zeros(50, np.int16)])
    trimmed = trim_leading_silence(sound, rate, margin_ms=2.0)
    margin = int(0.002 * rate)  # 44 samples
    assert trimmed.size == sound.size - (1001 - margin)
    assert np.array_equal(trimmed[margin:], sound[1001:])  # from the first sound on: as is
    assert np.array_equal(trim_leading_silence(sound[:1000], rate), sound[:1000])  # no sound
    quiet = np.full(500, ONSET_FLOOR, np.int16)  # at the floor: not a sound
    assert trim_leading_silence(quiet, rate).size == 500


@pytest.mark.integration
def test_the_voice_starts_with_silence_the_trim_removes(tts: PiperTts) -> None:
    audio = tts.synthesize("One effective way")
    trimmed = trim_leading_silence(audio, tts.sample_rate)
    removed_ms = (audio.size - trimmed.size) * 1000 / tts.sample_rate
    assert removed_ms >= 10  # Piper's leading digital silence (20-60 ms measured)
    first = int(np.flatnonzero(np.abs(trimmed.astype(np.int32)) > ONSET_FLOOR)[0])
    assert first * 1000 / tts.sample_rate <= 5.5  # the margin, not more
    assert np.array_equal(trimmed, audio[audio.size - trimmed.size:])


@pytest.mark.integration
def test_keep_warm_leaves_the_voice_speaking(tts: PiperTts) -> None:
    before = tts.synthesize("The sky is blue.")
    tts.keep_warm()  # one word through the voice, thrown away
    after = tts.synthesize("The sky is blue.")  # Piper's durations are sampled: not equal
    assert before.size > 0.5 * tts.sample_rate and abs(after.size - before.size) < before.size / 4


@pytest.mark.integration
def test_markdown_is_not_spoken(tts: PiperTts) -> None:
    clean = tts.synthesize("Keep a regular schedule.")
    marked = tts.synthesize("- **Keep** a `regular` schedule.")
    # Spoken asterisks or backticks would add words; Piper's noise makes lengths vary.
    assert abs(marked.size - clean.size) < 0.25 * clean.size


@pytest.mark.integration
@pytest.mark.parametrize("text", ["", "   ", "**", "2.", "...", "\n- \n"])
def test_unspeakable_text_gives_empty_audio(tts: PiperTts, text: str) -> None:
    audio = tts.synthesize(text)
    assert audio.dtype == np.int16 and audio.size == 0


LONG = ("The reason is simple: when sunlight reaches our planet's atmosphere, it contains a "
        "mixture of colors, and the blue part is scattered far more than the red part is.")


@pytest.mark.integration
def test_abort_stops_only_that_threads_synthesis(tts: PiperTts) -> None:
    import threading

    from pipeline.tts import SynthesisAborted

    outcome: dict[str, object] = {}
    started = threading.Event()

    def speak(name: str) -> None:
        outcome[f"{name}.thread"] = threading.get_ident()
        started.set()
        try:
            outcome[name] = tts.synthesize(LONG).size
        except SynthesisAborted:
            outcome[name] = "aborted"

    victim = threading.Thread(target=speak, args=("victim",))
    bystander = threading.Thread(target=speak, args=("bystander",))  # another session
    victim.start()
    started.wait()
    bystander.start()
    time.sleep(0.05)  # both inside onnxruntime by now (phonemizing takes ~1 ms)
    tts.abort(outcome["victim.thread"])  # type: ignore[arg-type]
    victim.join(timeout=10)
    bystander.join(timeout=10)
    assert outcome["victim"] == "aborted"
    assert isinstance(outcome["bystander"], int) and outcome["bystander"] > 0
    assert tts.synthesize("Still working.").size > 0  # the voice is usable afterwards


# Run in a fresh process after this prelude (the voice loaded, ``rss_mb()``); each script
# prints RSS in MB before and after what it measures.
_PIPER_AND_RSS = """
import sys
from pathlib import Path
from pipeline.tts import PiperTts
tts = PiperTts(Path(sys.argv[1]), Path(sys.argv[2]), threads=1)
tts.load()
def rss_mb():
    status = Path("/proc/self/status").read_text().splitlines()
    return int(next(x for x in status if x.startswith("VmRSS:")).split()[1]) // 1024
"""

_RSS_AFTER_A_LONG_SENTENCE = """
before = rss_mb()
tts.synthesize(" ".join(["The sky is blue because of a process called Rayleigh scattering,"
                         " which happens in the air"] * 6) + ".")
print(before, rss_mb())
"""


_RSS_OVER_VARIED_SENTENCES = """
import random
words = ("the sky is blue because light from the sun is scattered by the air and the "
         "short waves of blue light scatter more than the long red ones").split()
rng = random.Random(5)
before = rss_mb()
for _ in range(60):  # every sentence a different length, as replies are
    tts.synthesize(" ".join(rng.choice(words) for _ in range(rng.randint(3, 40))) + ".")
print(before, rss_mb())
"""


def rss_before_after(script: str, timeout: float) -> tuple[int, int]:
    """Run ``script`` after ``_PIPER_AND_RSS`` in a fresh process: memory the test
    process already holds must not hide what it measures."""
    import subprocess
    import sys

    onnx, cfg = piper_voice()
    out = subprocess.run([sys.executable, "-c", _PIPER_AND_RSS + script, str(onnx), str(cfg)],
                         capture_output=True, text=True, check=True, timeout=timeout,
                         cwd=Path(__file__).resolve().parent.parent)
    before, after = (int(x) for x in out.stdout.split())
    return before, after


@pytest.mark.integration
def test_varied_sentences_do_not_grow_the_heap() -> None:
    # glibc kept the pages each sentence's tensors freed: Piper alone grew ~1.5 MB per
    # sentence of a new length (169 -> 321 MB over 300); trimmed after each, it stays flat.
    before, after = rss_before_after(_RSS_OVER_VARIED_SENTENCES, timeout=300)
    assert after - before < 40, (before, after)


@pytest.mark.integration
def test_a_long_sentence_does_not_keep_its_memory() -> None:
    # onnxruntime's arena kept the longest sentence's buffers for the life of the process
    # (+540 MB after this one); with the per-run shrinkage it hands them back.
    before, after = rss_before_after(_RSS_AFTER_A_LONG_SENTENCE, timeout=120)
    assert after - before < 250, (before, after)  # the arena would keep ~550 MB
