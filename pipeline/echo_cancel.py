"""Echo cancellation: the reply, as it was played, taken out of what the microphone hears.

Over open speakers the microphone hears the assistant as well as the user. The echo guard
(``pipeline.bargein``) copes by asking more of the user while something plays: louder
than the echo by a margin, and longer. A user only a little louder than the echo is then
heard late or not at all (docs/talk.md: +6 dB over a 0.5 echo missed about one onset in
four).

``EchoCanceller`` runs WebRTC's audio processing module (AEC3, as shipped in the
``livekit`` package's native build: no network, no model) on every microphone block before
anything else sees it. Its far end is what the speaker played over the same 20 ms
(``FarEnd.played_between``, i.e. ``PlaybackTap`` in ``talk``, which dates each sentence
from when the device played its first sample). AEC3 estimates the delay between the far
end and its echo itself, so no clock needs to be exact; what it needs is a far end that
comes before the echo and that is one continuous stream (``_span``). A microphone block
arrives after its echo was captured, but through PulseAudio by as little as nothing
(the two devices' clocks are dated apart), so the far end is handed over ``FAR_LEAD_S``
ahead. The echo guard
still runs after it: it learns the echo that is *left* as the echo path, so it asks the
user for less where the canceller works and for as much as before where it does not.

**Only while there can be echo.** The processing module is not transparent: with nothing
played it still delays the audio by ~8 ms (125 samples) and changes its waveform enough
that Whisper heard one of the six sample questions differently ("What should I pack" ->
"What sure nipack"). So the canceller always runs (it keeps adapting), but hands on the
microphone's own samples unless something was played within ``ECHO_TAIL_S``: a question
said to a quiet speaker reaches Silero and Whisper untouched, sample for sample. The same
when the microphone does not hear the speaker at all (headphones without
``--headphones``): see ``ECHO_HEARD``.

It costs ~0.6 % of one core in real time (20 ms blocks, 16 kHz).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any, Protocol

import numpy as np

from pipeline.audio_in import SAMPLE_RATE
from pipeline.mic import MicBlock

log = logging.getLogger(__name__)

FRAME = SAMPLE_RATE // 100  # the processing module takes exactly 10 ms at a time
# After the last played sample, how long the microphone may still hear it (the device's
# output and input latency, ~40-110 ms measured through PulseAudio, and a room's tail).
ECHO_TAIL_S = 0.5
# The far end follows the microphone's sample count; it is set again from the blocks'
# arrival times only when the two are further apart than RESYNC_S for RESYNC_AFTER_S of
# arrival time: samples were lost. A callback that is late (both cores busy with Piper and
# llama-server) delivers its blocks late but all of them, in a burst: moving the far end
# 127 ms ahead for that burst and back again left the echo uncancelled for seconds, and
# the assistant interrupted itself (tests/test_echo_guard_pulseaudio.py, 2 of 3 runs with
# the CPU busy).
RESYNC_S = 0.1
RESYNC_AFTER_S = 0.25
# Is there an echo at all? The median, over the last ~5 s of playback while the user was
# not speaking, of the microphone's level over the loudest far end in the 300 ms before
# (``FarEnd.level``, the echo guard's own measure):
# ~0.09-0.16 with open speakers at 0.25-0.5, the microphone's own noise (~0.01) with
# headphones (bench_echo_guard's replies). With no echo to model, AEC3 takes the
# user's voice over the reply for echo and removes it (the PulseAudio null sinks of
# tests/test_talk_pulseaudio.py: a barge-in heard only in the reply's pauses), so the
# microphone's own samples are handed on instead.
ECHO_HEARD = 0.03
# The far end is handed to AEC3 this much ahead of the microphone's clock. AEC3 cancels
# only an echo that comes *after* its far end; through PulseAudio the echo followed the
# far end by 32, -5 and -40 ms in three runs of talk (``EchoDelay``: the devices' dating,
# the microphone's sample count against the DAC clock, moves by tens of ms from run to
# run; one cause, the sink's dates left 40 ms late after a burst, is fixed in
# ``SoundDeviceSink._heard_at``), and when it came first AEC3 lost the echo path and the
# assistant interrupted itself (CI). Replaying that run (tests/recordings/) with the far
# end 0-120 ms later: 11-12 of 26 replays interrupted with no lead, 4 with 30 ms, 1 with
# 60-80 ms, none with 100 ms, while users over the echo kept their barge-ins
# (scripts/bench_echo_guard.py; docs/talk.md). The audio ahead of the device is known:
# the rest of a sentence follows on (``PlaybackTap``).
FAR_LEAD_S = 0.1
_ECHO_EVIDENCE = 25  # playback blocks before the median is trusted (0.5 s); echo until then


class FarEnd(Protocol):
    """What the speaker played (``PlaybackTap`` in the product)."""

    def played_between(self, t0: float, t1: float, rate: int) -> np.ndarray:
        """Between two moments, resampled to ``rate`` (zeros where nothing played)."""
        ...

    def level(self, t: float) -> float:
        """The loudest 20 ms RMS in the 300 ms before ``t`` (the echo guard's measure)."""
        ...


def leave_past_the_native_runtime(code: int) -> None:
    """End the process with ``code`` without finalizing the interpreter, if the canceller's
    native runtime (livekit's, with its tokio threads) was started in it; else return.

    Those threads outlive Python. One that calls back into Python while the interpreter
    finalizes is ended by Python 3.11 with ``pthread_exit``, whose unwinding Rust turns
    into an abort: CI (stop 34) reported "2072 passed", then "thread 'tokio-rt-worker'
    panicked ... panic in a function that cannot unwind" and exit 134. Call it last, with
    everything written (output is flushed here)."""
    import os
    import sys

    ffi = sys.modules.get("livekit.rtc._ffi_client")
    if ffi is None or getattr(ffi.FfiClient, "_instance", None) is None:
        return
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))) if x.size else 0.0


def _to_pcm(samples: np.ndarray) -> bytes:
    pcm: bytes = (np.clip(samples, -1.0, 1.0) * 32767.0).astype(np.int16).tobytes()
    return pcm


class EchoDelay:
    """How long after its far end the echo reached the microphone over one reply: the lag
    at which the two levels (10 ms frames) correlate best. AEC3 needs it positive; it is
    the lead ``FAR_LEAD_S`` buys (``talk -v`` logs it after every reply)."""

    LAGS_MS = range(-100, 310, 10)

    def __init__(self, seconds: float = 8.0) -> None:
        n = int(seconds * 100)
        self._far: deque[float] = deque(maxlen=n)
        self._mic: deque[float] = deque(maxlen=n)

    def add(self, far: np.ndarray, mic: np.ndarray) -> None:
        frames = min(far.size, mic.size) // FRAME
        for k in range(frames):
            part = slice(k * FRAME, (k + 1) * FRAME)
            self._far.append(_rms(far[part]))
            self._mic.append(_rms(mic[part]))

    def delay_ms(self) -> float | None:
        """None without a second of playback or a clear peak (correlation under 0.5)."""
        far, mic = np.array(self._far), np.array(self._mic)
        if np.count_nonzero(far > 0.01) < 100:
            return None
        best, at = 0.5, None
        for lag_ms in self.LAGS_MS:
            k = lag_ms // 10
            a, b = (far[:far.size - k], mic[k:]) if k >= 0 else (far[-k:], mic[:mic.size + k])
            if a.std() > 0 and b.std() > 0:
                r = float(np.corrcoef(a, b)[0, 1])
                if r > best:
                    best, at = r, float(lag_ms)
        return at

    def clear(self) -> None:
        self._far.clear()
        self._mic.clear()

    def __len__(self) -> int:
        return len(self._far)


class EchoCanceller:
    """Microphone blocks in, the same blocks with the played reply taken out.

    Blocks must be whole 10 ms frames (the microphone's are 20 ms); a remainder is passed
    through as it came. Blocks more than ``ECHO_TAIL_S`` after the last played sample come
    out as they went in. One canceller per microphone stream: it adapts to the echo path as
    it goes (within a second or two of the first reply).
    """

    def __init__(self, far: FarEnd, *,
                 user_speaking: Callable[[], bool] = lambda: False,
                 lead_s: float = FAR_LEAD_S) -> None:
        from livekit import rtc  # the native WebRTC build; imported only when asked for

        self.far = far
        self.lead_s = lead_s
        # The user's voice is not evidence of an echo (the segmenter's in_speech in talk)
        self.user_speaking = user_speaking
        self._rtc: Any = rtc
        self._apm: Any = rtc.AudioProcessingModule(echo_cancellation=True,
                                                   high_pass_filter=True)
        self._played_at = -np.inf  # the end of the last block whose far end was not silent
        self._cursor = -np.inf  # where the far end's next block starts
        self._ratios: deque[float] = deque(maxlen=250)  # mic / far level while playing
        self.resyncs = 0  # times the far end was set again from the blocks' arrival
        self._delay = EchoDelay()
        self.echo_delays_ms: list[float] = []  # one per reply, where it showed
        self._apart_since: float | None = None  # arrival of the first block off its count

    @property
    def echo_heard(self) -> bool:
        """Does the microphone hear the speaker? (True until half a second of playback
        has told.)"""
        if len(self._ratios) < _ECHO_EVIDENCE:
            return True
        return float(np.median(self._ratios)) >= ECHO_HEARD

    def _listen_for_echo(self, mic: np.ndarray, t: float) -> None:
        level = self.far.level(t)
        if level > 0.02 and not self.user_speaking():
            self._ratios.append(_rms(mic) / level)

    def process(self, block: MicBlock) -> MicBlock:
        mic = np.asarray(block.samples, dtype=np.float32).reshape(-1)
        frames = mic.size // FRAME
        if not frames:
            return block
        span = self._span(block.t, mic.size / SAMPLE_RATE)
        far = self.far.played_between(span[0] + self.lead_s, span[1] + self.lead_s,
                                      SAMPLE_RATE)  # ahead: FAR_LEAD_S
        if far.any():
            self._played_at = block.t
        self._listen_for_echo(mic, span[1])
        out = mic.copy()
        rtc = self._rtc
        for k in range(frames):
            part = slice(k * FRAME, (k + 1) * FRAME)
            self._apm.process_reverse_stream(rtc.AudioFrame(_to_pcm(far[part]), SAMPLE_RATE,
                                                            1, FRAME))
            near = rtc.AudioFrame(_to_pcm(mic[part]), SAMPLE_RATE, 1, FRAME)
            self._apm.process_stream(near)
            out[part] = np.frombuffer(bytes(near.data), dtype=np.int16) / 32768.0
        if block.t - self._played_at > ECHO_TAIL_S:
            self._reply_over()
            return block  # nothing to hear but the user: their own samples
        self._delay.add(far, mic)
        if not self.echo_heard:
            return block
        # The user's words over the reply are what AEC3 bends most (double talk):
        # Whisper gets the microphone's own samples as well (pipeline.mic_tape).
        return MicBlock(out, block.t, mic)

    def _reply_over(self) -> None:
        if not len(self._delay):
            return
        delay = self._delay.delay_ms()
        self._delay.clear()
        if delay is not None:
            self.echo_delays_ms.append(delay)
            log.info("echo canceller: the echo came %.0f ms after its far end (AEC3 needs "
                     "it after; FAR_LEAD_S %.0f ms)", delay, self.lead_s * 1000)

    def _span(self, t: float, seconds: float) -> tuple[float, float]:
        """The far end's interval for a block that arrived at ``t``. The microphone's
        callback often delivers two blocks at once, with the same arrival time, and a late
        callback several; the far end must stay one continuous stream all the same (the
        canceller models the echo as a filter over it), so it follows the microphone's
        sample count and is set again from the arrival time only when the two stay apart
        (samples were lost: ``RESYNC_AFTER_S``)."""
        start = t - seconds
        if not np.isfinite(self._cursor):
            self._cursor = start
        if abs(self._cursor - start) <= RESYNC_S:
            self._apart_since = None
        elif self._apart_since is None:
            self._apart_since = t
        elif t - self._apart_since >= RESYNC_AFTER_S:
            self.resyncs += 1
            log.info("echo canceller: the microphone's blocks stayed %.0f ms off their "
                     "sample count (samples lost); far end moved", (start - self._cursor)
                     * 1000)
            self._cursor, self._apart_since = start, None
        span = (self._cursor, self._cursor + seconds)
        self._cursor += seconds
        return span

    async def cancel(self, blocks: AsyncIterable[MicBlock]) -> AsyncIterator[MicBlock]:
        """``blocks`` with the echo taken out, one for one."""
        async for block in blocks:
            yield self.process(block)
