"""A private PulseAudio daemon with null sinks, and helpers to follow ``voice-llm talk``.

Shared by the PulseAudio tests. ``private_pulse()`` starts a daemon of its own
(``XDG_RUNTIME_DIR`` in a temp folder) with two null sinks: ``mic`` (its monitor is the
microphone ``talk`` records) and ``speaker`` (where ``talk`` plays). ``add_echo()`` adds a
real echo path: a loopback from the speaker's monitor into the microphone, as open
speakers would leak into a real one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import wave
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

TOOLS = ("pulseaudio", "pactl", "paplay", "parecord")
MISSING_REASON = ("PulseAudio is not installed (apt-get install pulseaudio pulseaudio-utils; "
                  "scripts/setup does it)")


def pulse_missing() -> bool:
    return any(shutil.which(t) is None for t in TOOLS)


def start_pulse(env: dict[str, str]) -> None:
    """Start the daemon ``env`` reaches, with the ``mic`` and ``speaker`` null sinks as the
    defaults, and wait until it answers. ``private_pulse`` starts it; a test that killed it
    can start it again (a sound server restarting under a running program)."""
    subprocess.run(["pulseaudio", "-D", "-n", "--exit-idle-time=-1", "--daemonize=yes",
                    "--load=module-native-protocol-unix",
                    "--load=module-null-sink sink_name=mic",
                    "--load=module-null-sink sink_name=speaker"],
                   env=env, check=True, capture_output=True, timeout=30)
    for _ in range(100):
        if subprocess.run(["pactl", "info"], env=env, capture_output=True).returncode == 0:
            break
        time.sleep(0.1)
    subprocess.run(["pactl", "set-default-source", "mic.monitor"], env=env, check=True)
    subprocess.run(["pactl", "set-default-sink", "speaker"], env=env, check=True)


@contextmanager
def private_pulse() -> Iterator[dict[str, str]]:
    """A private PulseAudio daemon; yields the environment that reaches it."""
    # unix socket paths are limited to 108 bytes: keep the runtime dir short
    runtime = tempfile.mkdtemp(prefix="pa-", dir="/tmp")
    env = {**os.environ, "XDG_RUNTIME_DIR": runtime, "PULSE_SERVER":
           f"unix:{runtime}/pulse/native", "HOME": runtime}
    env.pop("PULSE_SINK", None)
    env.pop("PULSE_SOURCE", None)
    start_pulse(env)
    try:
        yield env
    finally:
        subprocess.run(["pulseaudio", "-k"], env=env, capture_output=True, timeout=30)
        shutil.rmtree(runtime, ignore_errors=True)


def add_both(env: dict[str, str]) -> None:
    """A combine sink ``both`` feeding ``mic`` and ``speaker`` at once: a question played
    into it is heard by the microphone and lands in the speaker's recording at the same
    moment, so one recording holds the question and the reply on one clock."""
    # adjust_time=0: the two null sinks run on one clock, so no rate adjustment and no
    # resampling (which would take CPU from the pipeline being measured).
    subprocess.run(["pactl", "load-module", "module-combine-sink", "sink_name=both",
                    "slaves=mic,speaker", "adjust_time=0", "resample_method=trivial"],
                   env=env, check=True, capture_output=True, timeout=30)


def add_browser_mic(env: dict[str, str]) -> None:
    """Make ``mic``'s sound a source Chromium lists: it leaves monitor sources out of its
    microphones (getUserMedia: NotFoundError), so a remap of ``mic.monitor``, made the
    default source."""
    subprocess.run(["pactl", "load-module", "module-remap-source", "master=mic.monitor",
                    "source_name=mic_in"], env=env, check=True, capture_output=True, timeout=30)
    subprocess.run(["pactl", "set-default-source", "mic_in"], env=env, check=True, timeout=30)


def add_echo(env: dict[str, str], gain: float, latency_ms: int = 40) -> None:
    """Leak what is played on ``speaker`` into ``mic`` with amplitude ``gain`` (linear)."""
    module = subprocess.run(
        ["pactl", "load-module", "module-loopback", "source=speaker.monitor", "sink=mic",
         f"latency_msec={latency_ms}"],
        env=env, check=True, capture_output=True, text=True, timeout=30).stdout.strip()
    inputs = json.loads(subprocess.run(["pactl", "-f", "json", "list", "sink-inputs"],
                                       env=env, check=True, capture_output=True, text=True,
                                       timeout=30).stdout)
    index = next(i["index"] for i in inputs if str(i["owner_module"]) == module)
    # a bare number is a linear factor for pactl (a percentage would be cubic)
    subprocess.run(["pactl", "set-sink-input-volume", str(index), f"{gain:.3f}"],
                   env=env, check=True, timeout=30)


class EventLog:
    """Follows talk's --events file; remembers when (test clock) each event was seen."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.events: list[dict[str, object]] = []
        self.seen_at: list[float] = []
        self._offset = 0

    def poll(self) -> None:
        if not self.path.exists():
            return
        with self.path.open("rb") as f:  # bytes: a text offset is not a byte offset
            f.seek(self._offset)
            data = f.read()
        complete = data[: data.rfind(b"\n") + 1]  # the writer may be mid-line
        self._offset += len(complete)
        for line in complete.decode().splitlines():
            self.events.append(json.loads(line))
            self.seen_at.append(time.monotonic())

    def find(self, turn: int, name: str) -> tuple[dict[str, object], float] | None:
        stage, event = name.split(".")
        for ev, at in zip(self.events, self.seen_at, strict=True):
            if ev["turn"] == turn and ev["stage"] == stage and ev["event"] == event:
                return ev, at
        return None

    def wait(self, turn: int, name: str, timeout: float,
             proc: subprocess.Popen[str]) -> tuple[dict[str, object], float]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.poll()
            if (found := self.find(turn, name)) is not None:
                return found
            if proc.poll() is not None:
                break
            time.sleep(0.02)
        seen = [(e["turn"], e["stage"], e["event"]) for e in self.events]
        raise AssertionError(f"no {name} for turn {turn} within {timeout:.0f} s; saw {seen}")


def frame_rms(path: Path, frame_s: float = 0.05) -> tuple[np.ndarray, int]:
    with wave.open(str(path)) as w:
        rate = w.getframerate()
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
        pcm = pcm.reshape(-1, w.getnchannels())[:, 0].astype(np.float32) / 32768
    n = int(rate * frame_s)
    frames = pcm[: pcm.size // n * n].reshape(-1, n)
    return np.sqrt(np.mean(frames ** 2, axis=1)), rate
