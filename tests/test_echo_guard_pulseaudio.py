"""The echo guard on a real echo path: open speakers, simulated by PulseAudio.

A private PulseAudio daemon (tests/pulse.py) with a loopback from the speaker's monitor
into the microphone (``module-loopback``, 40 ms, amplitude 0.5): whatever ``voice-llm talk``
plays leaks into what it records, as loud desk speakers would. Measured here:

- without ``--headphones`` the assistant answers a question to the end, with the echo
  canceller (the default) and with the guard alone (``--no-echo-cancel``); its own voice
  neither barges in nor becomes a user turn;
- with ``--headphones`` (neither) the same echo makes it interrupt itself;
- behind the canceller a user at the samples' level barges in; with the guard alone, a
  user 12 dB louder.

docs/talk.md (the echo guard) has the numbers.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from pulse import MISSING_REASON, EventLog, add_echo, frame_rms, private_pulse, pulse_missing

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
ECHO_GAIN = 0.5  # amplitude of the speaker in the microphone: loud speakers near the mic
LOUDER = 104000  # paplay volume (cubic, 65536 = 100 %): 1.587**3 = 4.0, i.e. +12 dB

pytestmark = [
    pytest.mark.audio,
    pytest.mark.integration,
    pytest.mark.skipif(pulse_missing(), reason=MISSING_REASON),
]


@pytest.fixture
def echo_pulse() -> Iterator[dict[str, str]]:
    with private_pulse() as env:
        add_echo(env, ECHO_GAIN, latency_ms=40)
        yield env


@contextmanager
def talking(env: dict[str, str], url: str, tmp_path: Path, *extra: str,
            verbose: bool = False) -> Iterator[tuple[subprocess.Popen[str], EventLog]]:
    """``voice-llm talk`` on the private PulseAudio, ready to listen; Ctrl-C at the end.
    Its stderr is kept in ``tmp_path / "talk.err"`` (with ``verbose``, the -v log)."""
    events = tmp_path / "events.jsonl"
    err_path = tmp_path / "talk.err"  # a file, not a pipe: -v must never fill it and block
    with err_path.open("w") as err_file:
        talk = subprocess.Popen(
            [sys.executable, "-m", "services.cli", *(["-v"] if verbose else []), "talk",
             "--llm-url", url, "--input-device",
             "pulse", "--output-device", "pulse", "--events", str(events), *extra],
            cwd=ROOT, env={**env, "VOICE_LLM_STATE": str(tmp_path / "state")},
            stdout=subprocess.PIPE, stderr=err_file, text=True)
    try:
        assert talk.stdout is not None
        ready = talk.stdout.readline()  # blocks until models are loaded and the mic is open
        assert ready.startswith("ready:"), ready + err_path.read_text()
        time.sleep(0.5)
        yield talk, EventLog(events)
    finally:
        talk.send_signal(signal.SIGINT)
        try:
            talk.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            talk.kill()
            talk.communicate()
    err = err_path.read_text()
    assert talk.returncode == 130, err  # stopped by SIGINT (Ctrl-C), as a shell reports
    assert "stopped by SIGINT" in err
    assert "Traceback" not in err, err


def ask(env: dict[str, str], sample: str, volume: int = 65536) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["paplay", "--device=mic", f"--volume={volume}",
                             str(SAMPLES / sample)], env=env)


def record(env: dict[str, str], device: str, path: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["parecord", f"--device={device}", "--rate=16000", "--channels=1",
                             "--file-format=wav", str(path)], env=env)


@pytest.mark.parametrize("mode", [(), ("--no-echo-cancel",)], ids=["canceller", "guard-only"])
def test_open_speakers_do_not_interrupt_themselves(echo_pulse, llama_server, tmp_path,
                                                   mode) -> None:
    env = echo_pulse
    with talking(env, llama_server.url, tmp_path, *mode, verbose=True) as (talk, log):
        recorders = [record(env, f"{d}.monitor", tmp_path / f"{d}.wav")
                     for d in ("speaker", "mic")]
        try:
            ask(env, "03_sky_blue.wav").wait(timeout=30)
            asr1, _ = log.wait(1, "asr.end", 60, talk)
            assert "sky" in str(asr1["text"]).lower()
            start, _ = log.wait(1, "playback.start", 120, talk)
            end1, _ = log.wait(1, "turn.end", 120, talk)
            time.sleep(3.0)  # the echo's tail, and any utterance cut from it, is over
            log.poll()
        finally:
            for r in recorders:
                r.send_signal(signal.SIGINT)
                r.wait(timeout=10)
    names = [(e["turn"], f"{e['stage']}.{e['event']}") for e in log.events]
    assert (1, "bargein.detected") not in names, names
    assert (1, "playback.end") in names, names  # the whole reply was played
    assert not [n for n in names if n[0] != 1], f"its own voice became a turn: {names}"
    metrics = end1["metrics"]
    assert isinstance(metrics, dict) and metrics["interrupted"] is False
    played = next(e for e in log.events if e["stage"] == "playback" and e["event"] == "end")
    reply_s = float(played["t"]) - float(start["t"])  # type: ignore[arg-type]
    assert reply_s > 2.0, f"a {reply_s:.1f} s reply is too short to test the echo"

    # the echo was really there: the microphone heard the reply at about ECHO_GAIN
    speaker, _ = frame_rms(tmp_path / "speaker.wav", 0.02)
    mic, _ = frame_rms(tmp_path / "mic.wav", 0.02)
    n = min(speaker.size, mic.size)
    lag = max(range(25), key=lambda k: float(np.corrcoef(speaker[:n - k], mic[k:n])[0, 1]))
    s, m = speaker[:n - lag], mic[lag:n]
    loud = s > 0.02
    ratio = float(np.median(m[loud] / s[loud]))
    print(f"\necho: {ratio:.2f} of the speaker, {lag * 20} ms later; reply {reply_s:.1f} s "
          f"played to the end without a barge-in ({' '.join(mode) or 'canceller'})")
    assert loud.sum() * 0.02 > 1.0
    assert 0.6 * ECHO_GAIN < ratio < 1.4 * ECHO_GAIN
    if not mode:  # AEC3 cancels only an echo that comes after its far end (FAR_LEAD_S)
        delays = [int(m) for m in re.findall(r"the echo came (-?\d+) ms after its far end",
                                             (tmp_path / "talk.err").read_text())]
        print(f"the echo came {delays} ms after the canceller's far end")
        assert delays and min(delays) > 0, delays


def test_without_the_guard_the_echo_interrupts(echo_pulse, llama_server, tmp_path) -> None:
    env = echo_pulse
    with talking(env, llama_server.url, tmp_path, "--headphones") as (talk, log):
        ask(env, "03_sky_blue.wav").wait(timeout=30)
        start, _ = log.wait(1, "playback.start", 120, talk)
        detected, _ = log.wait(1, "bargein.detected", 30, talk)
    assert detected["source"] == "mic"
    after = float(detected["t"]) - float(start["t"])  # type: ignore[arg-type]
    print(f"\n--headphones with the echo: interrupted itself {after:.2f} s into the reply")


@pytest.mark.parametrize(("mode", "volume"), [((), 65536), (("--no-echo-cancel",), LOUDER)],
                         ids=["canceller-same-level", "guard-only-12dB"])
def test_a_user_barges_in_over_the_echo(echo_pulse, llama_server, tmp_path, mode,
                                        volume) -> None:
    """Behind the canceller a user at the samples' own level gets through; the guard
    alone needs them 12 dB louder (scripts/bench_echo_guard.py has the rates)."""
    env = echo_pulse
    with talking(env, llama_server.url, tmp_path, *mode) as (talk, log):
        ask(env, "03_sky_blue.wav").wait(timeout=30)
        start, _ = log.wait(1, "playback.start", 120, talk)
        time.sleep(1.0)  # a second of the reply (and of its echo), then talk over it
        spoke_at = float(start["t"]) + 1.0  # type: ignore[arg-type]
        ask(env, "06_learn_language.wav", volume).wait(timeout=30)
        detected, _ = log.wait(1, "bargein.detected", 30, talk)
        asr2, _ = log.wait(2, "asr.end", 60, talk)
    assert detected["source"] == "mic"
    assert "language" in str(asr2["text"]).lower()
    delay = float(detected["t"]) - spoke_at  # type: ignore[arg-type]
    level = 20 * np.log10((volume / 65536) ** 3)
    print(f"\n{level:+.0f} dB user over a {ECHO_GAIN} echo ({' '.join(mode) or 'canceller'}): "
          f"barge-in {delay:.2f} s after paplay began")
    assert delay < 3.0
