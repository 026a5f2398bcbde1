"""Audio sinks: real-time pacing, stop/resume (barge-in), exact played counts, WAV capture.

Timing is asserted only as generous sanity bounds (shared, noisy machines); behaviour is
what the tests pin down.
"""

from __future__ import annotations

import asyncio
import builtins
import time
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pipeline.audio_out import AudioSink, InstantSink, RealtimeNullSink, WavFileSink
from pipeline.sound_device import AudioDeviceError
from pipeline.speaker import SoundDeviceSink

RATE = 16000


def ramp(seconds: float) -> np.ndarray:
    """Distinct int16 values, so a prefix check proves *which* samples were kept."""
    n = int(RATE * seconds)
    return (np.arange(n) % 30000).astype(np.int16)


async def play_then_stop(sink: AudioSink, samples: np.ndarray, after: float) -> tuple[int, float]:
    """Start playing, stop after ``after`` s; returns (played, s from stop() to return)."""
    task = asyncio.create_task(sink.play(samples))
    await asyncio.sleep(after)
    stopped_at = time.monotonic()
    sink.stop()
    played = await task
    return played, time.monotonic() - stopped_at


def test_sinks_satisfy_the_protocol() -> None:
    sinks: list[AudioSink] = [RealtimeNullSink(), WavFileSink("x.wav"), SoundDeviceSink(),
                              InstantSink()]
    assert all(s.sample_rate == 0 for s in sinks)


async def test_instant_sink_counts_at_once_and_honours_stop() -> None:
    sink = InstantSink()
    await sink.open(RATE)
    assert await sink.play(ramp(10.0)) == int(RATE * 10.0)  # no pacing
    sink.stop()
    assert await sink.play(ramp(0.1)) == 0
    sink.resume()
    assert await sink.play(ramp(0.1)) == int(RATE * 0.1)
    assert sink.samples == int(RATE * 10.1)


async def test_null_sink_plays_everything_at_real_time_pace() -> None:
    sink = RealtimeNullSink()
    await sink.open(RATE)
    started = time.monotonic()
    assert await sink.play(ramp(0.3)) == int(RATE * 0.3)
    assert 0.28 <= time.monotonic() - started < 3.0


async def test_null_sink_back_to_back_plays_keep_one_schedule() -> None:
    sink = RealtimeNullSink()
    await sink.open(RATE)
    started = time.monotonic()
    counts = [await sink.play(ramp(0.05)) for _ in range(8)]
    assert counts == [800] * 8
    assert 0.39 <= time.monotonic() - started < 3.0


async def test_null_sink_stop_returns_early_with_partial_count() -> None:
    sink = RealtimeNullSink()
    await sink.open(RATE)
    samples = ramp(1.0)
    played, latency = await play_then_stop(sink, samples, 0.2)
    assert 0 < played < samples.size
    assert 0.1 * RATE <= played <= 0.9 * RATE  # it is a position in time, roughly 0.2 s
    assert latency < 0.5
    print(f"\n[null sink] stop -> play returned in {latency * 1000:.1f} ms, played {played}")


async def test_null_sink_after_stop_plays_nothing_until_resume() -> None:
    sink = RealtimeNullSink()
    await sink.open(RATE)
    sink.stop()
    started = time.monotonic()
    assert await sink.play(ramp(0.5)) == 0
    assert time.monotonic() - started < 0.1
    sink.resume()
    assert await sink.play(ramp(0.05)) == 800


async def test_null_sink_rejects_misuse() -> None:
    sink = RealtimeNullSink()
    with pytest.raises(RuntimeError, match="before open"):
        await sink.play(ramp(0.01))
    await sink.open(RATE)
    with pytest.raises(TypeError, match="int16"):
        await sink.play(np.zeros(10, dtype=np.float32))
    assert await sink.play(np.zeros(0, dtype=np.int16)) == 0


def read_wav(path: Path) -> tuple[int, np.ndarray]:
    with wave.open(str(path)) as w:
        assert (w.getnchannels(), w.getsampwidth()) == (1, 2)
        return w.getframerate(), np.frombuffer(w.readframes(w.getnframes()), "<i2")


async def test_wav_sink_without_inner_is_instant_and_writes_all(tmp_path: Path) -> None:
    path = tmp_path / "out" / "reply.wav"
    sink = WavFileSink(path)
    await sink.open(22050)
    first, second = ramp(1.0), ramp(0.5)
    started = time.monotonic()
    assert await sink.play(first) == first.size
    assert await sink.play(second) == second.size
    assert time.monotonic() - started < 0.5
    await sink.close()
    rate, recorded = read_wav(path)
    assert rate == 22050
    assert np.array_equal(recorded, np.concatenate([first, second]))


async def test_wav_sink_keeps_only_what_the_inner_sink_played(tmp_path: Path) -> None:
    path = tmp_path / "interrupted.wav"
    sink = WavFileSink(path, inner=RealtimeNullSink())
    await sink.open(RATE)
    first = ramp(0.1)
    assert await sink.play(first) == first.size
    second = ramp(1.0)
    played, _latency = await play_then_stop(sink, second, 0.15)
    assert 0 < played < second.size
    assert await sink.play(ramp(0.2)) == 0  # stopped: dropped, not recorded
    await sink.close()
    _rate, recorded = read_wav(path)
    assert recorded.size == first.size + played
    assert np.array_equal(recorded, np.concatenate([first, second[:played]]))


async def test_wav_sink_stop_and_resume_without_inner(tmp_path: Path) -> None:
    sink = WavFileSink(tmp_path / "x.wav")
    await sink.open(RATE)
    sink.stop()
    assert await sink.play(ramp(0.1)) == 0
    sink.resume()
    assert await sink.play(ramp(0.1)) == 1600
    await sink.close()
    assert read_wav(tmp_path / "x.wav")[1].size == 1600


async def test_wav_sink_refuses_to_change_rate_mid_recording(tmp_path: Path) -> None:
    sink = WavFileSink(tmp_path / "x.wav")
    await sink.open(RATE)
    await sink.play(ramp(0.01))
    with pytest.raises(ValueError, match="16000 Hz"):
        await sink.open(22050)


async def test_missing_portaudio_is_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_portaudio(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "sounddevice":
            raise OSError("PortAudio library not found")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(__import__("sys").modules, "sounddevice", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_portaudio)
    with pytest.raises(AudioDeviceError) as err:
        await SoundDeviceSink().open(22050)
    assert str(err.value) == "PortAudio not found: apt-get install libportaudio2"


async def test_sound_device_sink_play_before_open() -> None:
    with pytest.raises(RuntimeError, match="before open"):
        await SoundDeviceSink().play(ramp(0.01))


def dated_blocks(monkeypatch: pytest.MonkeyPatch,
                 callbacks: list[tuple[float, float]]) -> list[float]:
    """Drive the sink's PortAudio callback by hand: each (arrival, DAC time) pulls one
    20 ms block of a playing sentence; returns when each block was dated heard."""
    from types import SimpleNamespace

    from pipeline import speaker

    sink = SoundDeviceSink(block_ms=20)
    sink.sample_rate = RATE
    sink._buf = ramp(10.0)
    clock = iter([at for at, _ in callbacks])
    monkeypatch.setattr(speaker.time, "monotonic", lambda: next(clock))
    out = np.zeros((RATE // 50, 1), dtype=np.int16)
    for at, dac in callbacks:
        sink._callback(out, out.shape[0], SimpleNamespace(currentTime=at,
                                                          outputBufferDacTime=dac), None)
    return [heard for heard, _ in sink._blocks]


def test_a_burst_of_blocks_is_dated_one_after_the_other(monkeypatch) -> None:
    # A late callback, then three pulled at once with the same DAC time: back to back.
    dates = dated_blocks(monkeypatch, [(1.0, 1.05), (1.1, 1.15), (1.1005, 1.15),
                                       (1.101, 1.15)])
    assert dates == pytest.approx([1.05, 1.15, 1.17, 1.19])


def test_after_a_burst_the_blocks_follow_the_device_again(monkeypatch) -> None:
    """Chained through a burst, the dates ran 40 ms ahead of the device for the rest of a
    talk run; the next steady callback's DAC time puts them back."""
    burst = [(1.0, 1.05), (1.1, 1.15), (1.1005, 1.15), (1.101, 1.15)]
    steady = [(1.12 + 0.02 * k, 1.17 + 0.02 * k) for k in range(4)]  # the device's truth
    dates = dated_blocks(monkeypatch, burst + steady)
    assert dates[4:] == pytest.approx([1.17, 1.19, 1.21, 1.23])


def test_a_device_a_few_ms_off_its_chain_stays_chained(monkeypatch) -> None:
    # DAC times that wobble by a few ms around a steady pull do not move the dates.
    dates = dated_blocks(monkeypatch, [(1.0 + 0.02 * k, 1.05 + 0.02 * k - 0.004 * (k % 2))
                                       for k in range(5)])
    assert dates == pytest.approx([1.05 + 0.02 * k for k in range(5)])


async def test_a_device_that_hangs_on_stop_does_not_hang_close(monkeypatch) -> None:
    """CI once saw the PulseAudio child below time out after 60 s; a PortAudio call the
    sound server does not answer must not keep close() (and talk's exit) waiting."""
    import threading

    from pipeline import speaker

    release = threading.Event()

    class HangingStream:
        def stop(self) -> None:
            release.wait(30)  # the sound server never answers (within the test)

        def close(self) -> None:
            pass

    monkeypatch.setattr(speaker, "_CLOSE_TIMEOUT_S", 0.2)
    sink = SoundDeviceSink()
    sink._stream = HangingStream()
    started = time.monotonic()
    await sink.close()
    assert time.monotonic() - started < 5  # not the 30 s the stop would take
    release.set()


class FakeStream:
    """A PortAudio stream for the flush's watch: after start() its callbacks come every
    ``every`` seconds for ``for_s`` seconds (none at all: ``every`` None)."""

    latency = 0.05

    def __init__(self, sink: SoundDeviceSink, every: float | None, for_s: float) -> None:
        self.sink, self.every, self.for_s = sink, every, for_s

    def abort(self) -> None:
        pass

    def start(self) -> None:
        import threading

        def pull() -> None:
            until = time.monotonic() + self.for_s
            while self.every is not None and time.monotonic() < until:
                self.sink._last_callback = time.monotonic()
                time.sleep(self.every)

        threading.Thread(target=pull, daemon=True).start()


@pytest.mark.parametrize("every, flushes", [(0.02, True), (None, False)])
def test_a_device_that_stalls_after_a_flush_is_not_flushed_again(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        every: float | None, flushes: bool) -> None:
    """A PulseAudio null sink that nothing else holds at a low latency went ~1.9 s without
    a callback after every flush (session 30): a reply after a barge-in waited for it."""
    from pipeline import speaker

    monkeypatch.setattr(speaker, "_RESTART_WATCH_S", 0.2)
    monkeypatch.setattr(speaker, "_RESTART_STALL_S", 0.1)
    monkeypatch.setattr(speaker, "_CLOSE_TIMEOUT_S", 0.3)
    sink = SoundDeviceSink(block_ms=20)
    sink._stream = stream = FakeStream(sink, every, for_s=1.0)
    sink._abort_and_restart(stream)
    assert sink.flushes is flushes
    assert ("not flushing it any more" in caplog.text) is not flushes


async def test_without_a_flush_stop_waits_for_the_queue_and_counts_it() -> None:
    """Not flushed, the blocks in the device play out: play() returns when they have been
    heard, with their samples counted (the history keeps what the user heard)."""
    from types import SimpleNamespace

    sink = SoundDeviceSink(block_ms=20)
    sink.sample_rate, sink.flushes = RATE, False
    sink._stream = SimpleNamespace(active=True, stopped=False)  # a live stream
    sink._loop = asyncio.get_running_loop()
    task = asyncio.create_task(sink.play(ramp(1.0)))
    await asyncio.sleep(0)
    out = np.zeros((RATE // 50, 1), dtype=np.int16)
    now = time.monotonic()
    for k in range(3):  # three blocks handed over, heard 100-160 ms from now
        sink._callback(out, out.shape[0], SimpleNamespace(
            currentTime=now, outputBufferDacTime=now + 0.1 + 0.02 * k), None)
    sink.stop()
    played = await task
    assert played == 3 * out.shape[0]
    assert time.monotonic() >= now + 0.16  # returned once the last block was heard


# --- The real PortAudio path, no hardware: a PulseAudio null sink ---------------------
CHILD = r"""
import asyncio, faulthandler, json, sys, time
import numpy as np
faulthandler.dump_traceback_later(45, exit=True)  # a hang says where it is (stderr)
from pipeline.speaker import SoundDeviceSink

async def main():
    sink = SoundDeviceSink(device="pulse")
    await sink.open(22050)
    t = np.arange(int(22050 * 0.6)) / 22050
    tone = (8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    started = time.monotonic()
    full = await sink.play(tone)
    full_s = time.monotonic() - started
    blocks = sink.heard_blocks()
    ends = [at + n / 22050 for at, n in blocks[:-1]]
    worst_gap = max((b[0] - end for b, end in zip(blocks[1:], ends)), default=0.0)
    in_blocks = sum(n for _, n in blocks)
    task = asyncio.create_task(sink.play(np.concatenate([tone] * 3)))
    await asyncio.sleep(0.3)
    stopped_at = time.monotonic()
    sink.stop()
    part = await task
    stop_s = time.monotonic() - stopped_at
    part_heard = sink.heard_from()
    after_stop = await sink.play(tone)
    after_stop_heard = sink.heard_from()
    sink.resume()
    await sink.close()
    print(json.dumps(dict(n=tone.size, full=full, full_s=full_s, part=part, stop_s=stop_s,
                          in_blocks=in_blocks, worst_gap=worst_gap, first=blocks[0][0] - started,
                          after_stop=after_stop, part_heard=part_heard,
                          after_stop_heard=after_stop_heard)))

asyncio.run(main())
"""


@pytest.fixture(scope="module")
def pulse_null_sink(tmp_path_factory: pytest.TempPathFactory) -> Any:
    import os
    import shutil
    import subprocess

    if not (shutil.which("pulseaudio") and shutil.which("parec")):
        pytest.skip("pulseaudio / pulseaudio-utils not installed")
    runtime = tmp_path_factory.mktemp("pulse-runtime")
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "PULSE_SINK": "speaker"}
    subprocess.run(["pulseaudio", "-D", "-n", "--exit-idle-time=-1",
                    "--load=module-native-protocol-unix",
                    "--load=module-null-sink sink_name=speaker"],
                   env=env, check=True, capture_output=True, timeout=30)
    pid_file = runtime / "pulse" / "pid"
    yield env
    if pid_file.exists():  # stop the daemon this fixture started, by its own pid
        os.kill(int(pid_file.read_text().split()[0]), 15)


@pytest.mark.audio
def test_sound_device_sink_through_pulseaudio(pulse_null_sink: dict[str, str]) -> None:
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    env = {**pulse_null_sink, "PYTHONPATH": str(root)}
    capture = subprocess.Popen(
        ["parec", "-d", "speaker.monitor", "--raw", "--format=s16le", "--rate=22050",
         "--channels=1", "--latency-msec=20"], env=env, stdout=subprocess.PIPE)
    try:
        child = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                               text=True, timeout=60)
        time.sleep(0.3)
    finally:
        capture.send_signal(2)
        heard = np.frombuffer(capture.communicate(timeout=10)[0], dtype="<i2")
    assert child.returncode == 0, child.stderr[-2000:]
    result = json.loads(child.stdout.strip().splitlines()[-1])
    print(f"\n[sounddevice/pulse] {result}")
    assert result["full"] == result["n"]
    assert result["full_s"] >= 0.5  # paced by the device, not instant
    # every sample dated block by block, heard after the call, one block after another
    assert result["in_blocks"] == result["n"]
    assert 0 < result["first"] < 0.5
    assert -1e-6 < result["worst_gap"] < 0.05
    assert 0 < result["part"] < 3 * result["n"]
    assert result["stop_s"] < 0.5
    assert result["after_stop"] == 0
    # the cut play was dated by the device; the refused one is not dated by it
    assert result["part_heard"] is not None
    assert result["after_stop_heard"] is None
    tone_s = float((np.abs(heard) > 1000).sum()) / 22050
    assert tone_s > 0.4  # the tone reached the speaker's monitor


async def test_null_sink_reopened_after_close_plays_again() -> None:
    sink = RealtimeNullSink()
    await sink.open(RATE)
    await sink.close()
    await sink.open(RATE)
    assert await sink.play(ramp(0.02)) == 320


async def test_null_sink_close_ends_a_running_play() -> None:
    sink = RealtimeNullSink()
    await sink.open(RATE)
    task = asyncio.create_task(sink.play(ramp(2.0)))
    await asyncio.sleep(0.05)
    await sink.close()
    assert 0 < await asyncio.wait_for(task, 1.0) < 2 * RATE


def on_private_pulse(child_code: str) -> tuple[dict[str, Any], str]:
    """Run ``child_code`` in a Python process of its own on a private PulseAudio daemon
    (tests/pulse.py); returns the JSON it printed last and its stderr."""
    import json
    import subprocess
    import sys

    from pulse import MISSING_REASON, private_pulse, pulse_missing

    if pulse_missing():
        pytest.skip(MISSING_REASON)
    root = Path(__file__).resolve().parent.parent
    with private_pulse() as env:
        child = subprocess.run([sys.executable, "-c", child_code], capture_output=True,
                               text=True, timeout=60, env={**env, "PYTHONPATH": str(root)})
    assert child.returncode == 0, child.stderr[-2000:]
    return json.loads(child.stdout.strip().splitlines()[-1]), child.stderr


STALL_CHILD = r"""
import asyncio, faulthandler, json, time
import numpy as np
faulthandler.dump_traceback_later(45, exit=True)
from pipeline.speaker import SoundDeviceSink

async def barge_in(sink, tone):
    task = asyncio.create_task(sink.play(tone))
    await asyncio.sleep(0.3)
    sink.stop()
    played = await task
    sink.resume()
    return played

async def main():
    sink = SoundDeviceSink()
    await sink.open(22050)
    tone = (8000 * np.sin(2 * np.pi * 440 * np.arange(22050) / 22050)).astype(np.int16)
    await barge_in(sink, tone)
    await asyncio.sleep(2.5)  # the watch sees the restart stall out
    flushes = sink.flushes
    played = await barge_in(sink, tone)
    called = time.monotonic()
    await sink.play(tone[:6615])  # 0.3 s: longer than PortAudio's pre-fill
    print(json.dumps(dict(flushes=flushes, played=played, next_s=time.monotonic() - called)))
    await sink.close()

asyncio.run(main())
"""


@pytest.mark.audio
def test_a_pulseaudio_sink_that_stalls_after_a_flush_replies_at_once_after(
        tmp_path: Path) -> None:
    """On a PulseAudio null sink with nothing else holding it at a low latency, the
    restart after a flush went ~1.9 s without a callback (session 30): the sink sees it
    and stops flushing, so the play after the next barge-in is heard at once."""
    result, stderr = on_private_pulse(STALL_CHILD)
    print(f"\n[pulse stall] {result}")
    assert result["flushes"] is False, stderr[-2000:]
    assert "not flushing it any more" in stderr
    assert 0.2 * 22050 < result["played"] < 22050  # cut, its queue counted
    assert result["next_s"] < 0.3 + 0.5  # the next reply's 0.3 s, not a ~1.9 s stall


class EndedStream:
    """An output stream whose callback thread failed: PortAudio leaves it neither active
    nor stopped, and calls back no more (``active=True``: one still alive)."""

    stopped = False
    latency = 0.05

    def __init__(self, active: bool = False) -> None:
        self.active = active

    def stop(self) -> None:
        """What close() does to a stream: nothing to do for a stand-in."""

    def close(self) -> None:
        """Ditto."""


@pytest.mark.parametrize("flushing", [False, True])
async def test_a_stream_that_ends_by_itself_during_a_play_fails_it_at_once(
        monkeypatch: pytest.MonkeyPatch, flushing: bool) -> None:
    """Not after the reply's length + 5 s; but a flush's abort, which leaves the stream
    in the same state for a moment, is not taken for it."""
    import threading

    from pipeline import speaker

    monkeypatch.setattr(speaker, "_CHECK_S", 0.02)
    sink = SoundDeviceSink(device="usb speaker")
    sink.sample_rate, sink._loop = RATE, asyncio.get_running_loop()
    sink._stream = stream = EndedStream(active=True)
    release = threading.Event()
    if flushing:
        sink._flusher = threading.Thread(target=release.wait, daemon=True)
        sink._flusher.start()
    task = asyncio.create_task(sink.play(ramp(0.5)))
    await asyncio.sleep(0.05)
    stream.active = False  # the sound server went away mid-play
    await asyncio.sleep(0.15)
    try:
        if flushing:
            assert not task.done()
        else:
            with pytest.raises(AudioDeviceError, match="'usb speaker' stopped taking audio"):
                await task
    finally:
        release.set()
        if flushing:
            sink.flushes = False  # the stop below ends the play without a flush of its own
            sink.stop()
            await asyncio.wait_for(task, 2)


def ended_speaker(monkeypatch: pytest.MonkeyPatch) -> tuple[SoundDeviceSink, list[int]]:
    """A sink whose stream ended by itself between two plays, with ``open`` standing in
    for the device: it fails while the list of rates it was asked for is shorter than
    ``fails``, then gives a stream that plays at once."""
    sink = SoundDeviceSink(device="usb speaker")
    sink.sample_rate, sink._loop = RATE, asyncio.get_running_loop()
    sink._stream = EndedStream()
    asked: list[int] = []

    async def open_device(sample_rate: int) -> None:
        asked.append(sample_rate)
        if len(asked) <= getattr(sink, "fails", 0):
            raise AudioDeviceError("cannot open output device 'usb speaker': "
                                   "Unanticipated host error")
        sink._stream, sink._stopped = EndedStream(active=True), False

    async def heard_at_once(total: int, consumed: object, wake: object) -> int:
        return total

    monkeypatch.setattr(sink, "open", open_device)
    monkeypatch.setattr(sink, "_until_heard", heard_at_once)
    return sink, asked


async def test_a_play_after_the_stream_ended_opens_the_device_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The sound server restarted between two replies: the next one is heard."""
    sink, asked = ended_speaker(monkeypatch)
    assert await sink.play(ramp(0.1)) == int(0.1 * RATE)
    assert asked == [RATE] and sink.reopened == 1
    assert await sink.play(ramp(0.1)) == int(0.1 * RATE)
    assert asked == [RATE]  # alive now: not opened again


async def test_a_stopped_sink_opened_again_stays_stopped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A barge-in stopped the sink before its stream was found ended: opening the device
    again (which resets the stop) must not play the rest of the cut reply."""
    sink, asked = ended_speaker(monkeypatch)
    sink.stop()
    assert await sink.play(ramp(0.1)) == 0
    assert asked == [RATE] and sink._stopped
    sink.resume()
    assert await sink.play(ramp(0.1)) == int(0.1 * RATE)


async def test_a_device_that_does_not_open_again_is_one_line_and_tried_at_the_next_play(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sink, asked = ended_speaker(monkeypatch)
    sink.fails = 1  # type: ignore[attr-defined]
    with pytest.raises(AudioDeviceError) as failed:
        await sink.play(ramp(0.1))
    said = str(failed.value)
    assert said.startswith("output device 'usb speaker' stopped taking audio")
    assert "does not open again (Unanticipated host error)" in said and "\n" not in said
    sink.resume()  # the turn is over (TurnRunner.run)
    assert await sink.play(ramp(0.1)) == int(0.1 * RATE)  # it came back meanwhile
    assert asked == [RATE, RATE] and sink.reopened == 1


DEAD_SERVER_CHILD = r"""
import asyncio, faulthandler, json, os, subprocess, time
import numpy as np
faulthandler.dump_traceback_later(45, exit=True)
from pipeline.sound_device import AudioDeviceError
from pipeline.speaker import SoundDeviceSink

async def main():
    sink = SoundDeviceSink()
    await sink.open(22050)
    subprocess.run(["pulseaudio", "-k"], check=True, timeout=30)
    await asyncio.sleep(1.0)
    tone = (8000 * np.sin(2 * np.pi * 440 * np.arange(44100) / 22050)).astype(np.int16)
    called = time.monotonic()
    try:
        await sink.play(tone)  # 2 s
        error = None
    except AudioDeviceError as e:
        error = str(e)
    print(json.dumps(dict(error=error, after_s=time.monotonic() - called)))
    await sink.close()

asyncio.run(main())
"""


@pytest.mark.audio
def test_a_sink_whose_sound_server_died_says_so_at_the_next_play() -> None:
    """The PulseAudio daemon killed under an open sink: PortAudio's output stream ends by
    itself. The next play tries to open it again, and with no server says so at once; it
    used to wait its length + 5 s, then say only that the device stopped consuming audio."""
    result, _ = on_private_pulse(DEAD_SERVER_CHILD)
    print(f"\n[dead sound server] {result}")
    assert result["error"] is not None and "stopped taking audio" in result["error"]
    assert "does not open again" in result["error"]
    assert result["after_s"] < 2.0  # not the 2 s tone + 5 s
