"""``voice-llm talk`` through a real PortAudio path, no hardware: PulseAudio null sinks.

The test starts its own PulseAudio daemon (tests/pulse.py: ``XDG_RUNTIME_DIR`` in a temp
folder) with two null sinks: ``mic`` (its monitor is the microphone ``talk`` records) and
``speaker`` (where ``talk`` plays; its monitor is recorded with ``parecord``). A question
is played into the microphone with ``paplay``; the reply must come out of the speaker as
speech of a plausible length. A second question is then played over the reply: the reply
must stop (barge-in from the microphone VAD) and the second question must be answered.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from pulse import (
    MISSING_REASON,
    EventLog,
    frame_rms,
    private_pulse,
    pulse_missing,
    start_pulse,
)
from script_module import load_script

from pipeline.audio_in import SAMPLE_RATE, load_wav
from pipeline.heard import INTERRUPTED_MARK

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
# How long the test listens for the second reply after its playback.start: the reply is
# often heard within ~0.1 s, but after a barge-in the device restarts (see below).
REPLY2_S = 5.0

pytestmark = [
    pytest.mark.audio,
    pytest.mark.integration,
    pytest.mark.skipif(pulse_missing(), reason=MISSING_REASON),
]


@pytest.fixture
def pulse() -> Iterator[dict[str, str]]:
    """A private PulseAudio daemon; yields the environment that reaches it."""
    with private_pulse() as env:
        yield env


def voiced_s(audio: np.ndarray) -> float:
    """From the first to the last 10 ms frame louder than 5 % of the loudest, seconds."""
    first, last = load_script("bench_asr").voiced_span(audio)
    return (last - first) / SAMPLE_RATE


def start_talk(env: dict[str, str], *options: str) -> subprocess.Popen[str]:
    """``voice-llm talk`` on the daemon's ``mic`` and ``speaker``, once it says it is ready
    (models loaded, the microphone open)."""
    talk = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "talk", "--input-device", "pulse",
         "--output-device", "pulse", *options],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert talk.stdout is not None
    ready = talk.stdout.readline()
    if not ready.startswith("ready:"):
        talk.kill()
        _, err = talk.communicate()
        raise AssertionError(ready + err)
    return talk


def test_talk_hears_answers_and_is_interrupted(pulse, llama_server, tmp_path) -> None:
    events_path, history_path = tmp_path / "events.jsonl", tmp_path / "history.json"
    recording = tmp_path / "speaker.wav"
    env = {**pulse, "VOICE_LLM_STATE": str(tmp_path / "state")}
    talk = start_talk(env, "--llm-url", llama_server.url, "--events", str(events_path),
                      "--save-history", str(history_path), "--record", str(tmp_path / "said"))
    recorder: subprocess.Popen[bytes] | None = None
    try:
        recorder = subprocess.Popen(
            ["parecord", "--device=speaker.monitor", "--rate=16000", "--channels=1",
             "--file-format=wav", str(recording)], env=env)
        rec_start = time.monotonic()
        time.sleep(0.5)
        log = EventLog(events_path)
        subprocess.run(["paplay", "--device=mic", str(SAMPLES / "03_sky_blue.wav")],
                       env=env, check=True, timeout=30)
        asr1, _ = log.wait(1, "asr.end", 60, talk)
        assert "sky" in str(asr1["text"]).lower()
        _, play1_at = log.wait(1, "playback.start", 120, talk)
        time.sleep(2.0)  # two seconds of the reply (past 4 words, kept), then talk over it
        subprocess.run(["paplay", "--device=mic", str(SAMPLES / "06_learn_language.wav")],
                       env=env, check=True, timeout=30)
        detected, bargein_at = log.wait(1, "bargein.detected", 30, talk)
        assert detected["source"] == "mic"
        log.wait(1, "server.slot_idle", 30, talk)
        asr2, _ = log.wait(2, "asr.end", 60, talk)
        assert "language" in str(asr2["text"]).lower()
        _, play2_at = log.wait(2, "playback.start", 120, talk)
        # The barge-in flushed the device (abort + restart); a PulseAudio null sink can take
        # seconds to pull again (4 s once in CI), so the reply may be heard that much later.
        time.sleep(REPLY2_S)
    finally:
        talk.send_signal(signal.SIGINT)  # Ctrl-C
        try:
            out, err = talk.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            talk.kill()
            out, err = talk.communicate()
        if recorder is not None:
            recorder.send_signal(signal.SIGINT)
            recorder.wait(timeout=10)
    assert talk.returncode == 130, err  # stopped by SIGINT (Ctrl-C), as a shell reports
    assert "stopped by SIGINT" in err
    assert "Traceback" not in err, err

    # the events: barge-in carried out in order, and the interrupted turn measured
    log.poll()
    names = [f"{e['stage']}.{e['event']}" for e in log.events if e["turn"] == 1]
    order = [n for n in names if n in ("bargein.detected", "playback.stopped",
                                       "server.slot_idle")]
    assert order == ["bargein.detected", "playback.stopped", "server.slot_idle"]
    end1 = next(e for e in log.events if e["turn"] == 1 and e["event"] == "end"
                and e["stage"] == "turn")
    metrics = end1["metrics"]
    assert isinstance(metrics, dict) and metrics["interrupted"] is True
    print(f"\nmic barge-in: silence {metrics['bargein_to_silence_ms']} ms, LLM closed "
          f"{metrics.get('bargein_to_llm_closed_ms')} ms, slot idle "
          f"{metrics['bargein_to_slot_idle_ms']} ms")

    # the history: Ctrl-C saved it (turn 2, cut short by Ctrl-C, is not in it); the first
    # reply ends where it was interrupted
    history = json.loads(history_path.read_text())["history"]
    assert [m["role"] for m in history[:2]] == ["user", "assistant"]
    assert history[1]["content"].endswith(INTERRUPTED_MARK)

    # --record: both questions on disk as the microphone heard them, the second one too
    # (it was cut short by Ctrl-C after its reply began, not before it ended)
    said = sorted((tmp_path / "said").glob("utterance-*.wav"))
    assert [p.name for p in said] == ["utterance-001.wav", "utterance-002.wav"], err
    for path, sample in zip(said, ("03_sky_blue.wav", "06_learn_language.wav"), strict=True):
        heard, asked = load_wav(path), load_wav(SAMPLES / sample)
        # the voiced part of the question plus the segmenter's pre-roll, within 0.5 s
        assert abs(voiced_s(heard) - voiced_s(asked)) < 0.5, (path.name, voiced_s(heard))
    assert "utterances recorded in" in err

    # the speaker: speech while the first reply played, silence after the barge-in
    rms, _ = frame_rms(recording)
    t = rec_start + np.arange(rms.size) * 0.05  # test clock of each 50 ms frame

    def span(a: float, b: float) -> np.ndarray:
        return rms[(t >= a) & (t < b)]

    reply1 = span(play1_at - 0.2, bargein_at)
    assert (reply1 > 0.01).sum() * 0.05 >= 0.5, "the first reply was not heard as speech"
    gap = span(bargein_at + 0.3, play2_at - 0.2)
    if gap.size:
        assert (gap > 0.01).mean() < 0.1, "the reply kept playing after the barge-in"
    reply2 = span(play2_at - 0.2, play2_at + REPLY2_S)
    heard = np.flatnonzero(reply2 > 0.01)
    print(f"second reply heard {heard[0] * 0.05 - 0.2:.2f} s after its playback.start"
          if heard.size else "second reply not heard")
    assert (reply2 > 0.01).sum() * 0.05 >= 0.3, "the second question was not answered aloud"


def test_talk_restarts_a_killed_server_and_answers_the_next_question(pulse, tmp_path) -> None:
    """llama-server started by talk itself (managed, its child) is SIGKILLed by pid while it
    streams the first reply: talk names the signal in one line, restarts it, and the next
    question is answered (issue 12, supervision in talk as in replay)."""
    from services import models
    from services.errors import UserError
    from services.llama_server import LlamaServer
    from services.server_check import free_port

    try:
        models.llama_server_binary()
        models.llm_model()
    except UserError as e:
        pytest.skip(f"real llama-server not available: {e}")
    events_path, state = tmp_path / "events.jsonl", tmp_path / "state"
    env = {**pulse, "VOICE_LLM_STATE": str(state)}
    url = f"http://127.0.0.1:{free_port()}"
    server = LlamaServer(state)
    try:  # talk starts the server; stop it whatever happens
        talk = start_talk(env, "--llm-url", url, "--events", str(events_path),
                          "--max-sentences", "0", "--max-tokens", "300")
    except AssertionError:
        server.stop()
        raise
    try:
        log = EventLog(events_path)
        subprocess.run(["paplay", "--device=mic", str(SAMPLES / "02_bicycle_history.wav")],
                       env=env, check=True, timeout=30)
        log.wait(1, "splitter.sentence", 120, talk)
        pid = server.running_pid()
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # the server this test's talk started
        error1, _ = log.wait(1, "turn.error", 60, talk)
        time.sleep(3.0)  # the restart (a couple of seconds) runs while nobody speaks
        subprocess.run(["paplay", "--device=mic", str(SAMPLES / "03_sky_blue.wav")],
                       env=env, check=True, timeout=30)
        asr2, _ = log.wait(2, "asr.end", 60, talk)
        log.wait(2, "turn.end", 120, talk)
    finally:
        talk.send_signal(signal.SIGINT)
        try:
            _, err = talk.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            talk.kill()
            _, err = talk.communicate()
        server.stop()  # the restarted server, started by this test's talk
    assert "Traceback" not in err, err
    died = [x for x in err.splitlines() if "died with SIGKILL" in x]
    assert len(died) == 1 and "restarted it" in died[0], err
    assert "llama-server" in str(error1["message"])
    assert "sky" in str(asr2["text"]).lower()
    turn2 = [e for e in log.events if e["turn"] == 2]
    assert any(e["stage"] == "playback" and e["event"] == "start" for e in turn2), \
        "the question after the restart was not answered aloud"


def test_talk_whose_sound_server_dies_says_so_and_keeps_what_it_had(
        pulse, llama_server, tmp_path) -> None:
    """The sound server stops (here: the PulseAudio daemon killed) while the user is
    speaking. PortAudio's input stream then ends by itself, with no error to any caller:
    talk used to wait for the next block forever, saying nothing. Now it tries to open
    the device again for 5 s (a restart would be back by then: the test below), then ends
    with one line that says what happened; the conversation so far is saved and the
    question cut off is on disk (--record)."""
    events_path, history_path = tmp_path / "events.jsonl", tmp_path / "history.json"
    env = {**pulse, "VOICE_LLM_STATE": str(tmp_path / "state")}
    talk = start_talk(env, "--llm-url", llama_server.url, "--events", str(events_path),
                      "--save-history", str(history_path), "--record", str(tmp_path / "said"),
                      "--max-sentences", "1")
    try:
        log = EventLog(events_path)
        subprocess.run(["paplay", "--device=mic", str(SAMPLES / "03_sky_blue.wav")],
                       env=env, check=True, timeout=30)
        log.wait(1, "turn.end", 120, talk)
        asking = subprocess.Popen(["paplay", "--device=mic",
                                   str(SAMPLES / "06_learn_language.wav")], env=env)
        time.sleep(1.5)  # into the second question
        subprocess.run(["pulseaudio", "-k"], env=env, check=True, timeout=30)
        asking.wait(timeout=30)
        _, err = talk.communicate(timeout=60)  # ends by itself: no Ctrl-C
    finally:
        if talk.poll() is None:
            talk.kill()
            talk.communicate()
    assert talk.returncode not in (0, None), err
    assert "Traceback" not in err, err
    line = [x for x in err.splitlines() if x.startswith("voice-llm talk:")]
    assert len(line) == 1 and "stopped delivering audio" in line[0], err
    history = json.loads(history_path.read_text())["history"]
    assert [m["role"] for m in history] == ["user", "assistant"]
    assert "sky" in history[0]["content"].lower()
    said = sorted((tmp_path / "said").glob("utterance-*.wav"))
    assert [p.name for p in said] == ["utterance-001.wav", "utterance-002.wav"], err
    cut = voiced_s(load_wav(said[1]))
    assert 0.3 < cut < voiced_s(load_wav(SAMPLES / "06_learn_language.wav")), cut


def test_talk_goes_on_after_the_sound_server_restarts(pulse, llama_server, tmp_path) -> None:
    """The sound server restarts between two questions (the PulseAudio daemon killed and
    started again, as a desktop session does): talk opens the microphone again within a
    second or so, the next question is answered aloud through the speaker opened again,
    and the conversation goes on with both turns in its history."""
    events_path, history_path = tmp_path / "events.jsonl", tmp_path / "history.json"
    recording = tmp_path / "speaker.wav"
    env = {**pulse, "VOICE_LLM_STATE": str(tmp_path / "state")}
    talk = start_talk(env, "--llm-url", llama_server.url, "--events", str(events_path),
                      "--save-history", str(history_path), "--max-sentences", "1")
    recorder: subprocess.Popen[bytes] | None = None
    try:
        log = EventLog(events_path)
        subprocess.run(["paplay", "--device=mic", str(SAMPLES / "03_sky_blue.wav")],
                       env=env, check=True, timeout=30)
        log.wait(1, "turn.end", 120, talk)
        subprocess.run(["pulseaudio", "-k"], env=env, check=True, timeout=30)
        time.sleep(1.0)
        start_pulse(env)
        time.sleep(4.0)  # the mic opened again; a null sink's monitor may take ~3 s
        recorder = subprocess.Popen(
            ["parecord", "--device=speaker.monitor", "--rate=16000", "--channels=1",
             "--file-format=wav", str(recording)], env=env)
        subprocess.run(["paplay", "--device=mic", str(SAMPLES / "06_learn_language.wav")],
                       env=env, check=True, timeout=30)
        asr2, _ = log.wait(2, "asr.end", 60, talk)
        log.wait(2, "turn.end", 120, talk)
        time.sleep(0.5)
        if talk.poll() is not None:
            raise AssertionError(f"talk ended after the restart: {talk.communicate()[1]}")
        talk.send_signal(signal.SIGINT)
        _, err = talk.communicate(timeout=60)
    finally:
        if recorder is not None:
            recorder.terminate()
            recorder.wait(timeout=10)
        if talk.poll() is None:
            talk.kill()
            talk.communicate()
    assert talk.returncode == 130, err
    assert "Traceback" not in err, err
    assert "language" in str(asr2["text"]).lower()
    turn2 = [e for e in log.events if e["turn"] == 2]
    assert not any(e["stage"] == "turn" and e["event"] == "error" for e in turn2), turn2
    assert any("input device 'pulse' is back" in x for x in err.splitlines()), err
    assert any("output device 'pulse' is back" in x for x in err.splitlines()), err
    rms, rate = frame_rms(recording)
    assert (rms > 0.01).sum() * 0.05 > 1.0, "the reply after the restart was not heard"
    history = json.loads(history_path.read_text())["history"]
    assert [m["role"] for m in history] == ["user", "assistant"] * 2
