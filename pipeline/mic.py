"""Microphone: capture, streaming Silero VAD, and the utterance segmenter.

Three layers, so each can be tested on its own:

* ``SileroStream`` runs the Silero VAD bundled with faster-whisper one 512-sample window
  (32 ms at 16 kHz) at a time, carrying the LSTM state and the 64-sample context between
  calls. faster-whisper's ``SileroVADModel.__call__`` restarts from a zero state on every
  call (it is made for whole files); carried over, the streamed probabilities are exactly
  the batch ones.
* ``UtteranceSegmenter`` is pure and synchronous: feed it blocks of any size, it returns
  ``SpeechStart`` / ``SpeechSustained`` / ``UtteranceEnd`` events. No event loop, no device,
  so it is tested on recorded WAVs.
* ``MicSource`` is the sounddevice ``InputStream``: 16 kHz mono float32 blocks handed to the
  event loop through a queue (the PortAudio callback must never block). The device helpers
  it shares with the speaker are in ``pipeline.sound_device``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from pipeline.audio_in import SAMPLE_RATE
from pipeline.sound_device import (
    AudioDeviceError,
    close_stream,
    device_name,
    import_sounddevice,
    one_line,
    stream_ended,
)

log = logging.getLogger(__name__)

WINDOW = 512  # Silero's window at 16 kHz
_CONTEXT = 64  # samples of the previous window the v6 model sees in front of each one
WINDOW_MS = WINDOW * 1000 / SAMPLE_RATE


class SpeechProbability(Protocol):
    """Speech probability of consecutive 512-sample windows (state carried over)."""

    def window(self, samples: np.ndarray) -> float: ...

    def reset(self) -> None: ...


class SileroStream:
    """Silero VAD v6 (faster-whisper's asset) over a live stream, one window per call."""

    def __init__(self) -> None:
        from faster_whisper.vad import get_vad_model  # onnxruntime: import only when used

        self._session: Any = get_vad_model().session
        self.reset()

    def reset(self) -> None:
        self._h = np.zeros((1, 1, 128), dtype=np.float32)
        self._c = np.zeros((1, 1, 128), dtype=np.float32)
        self._context = np.zeros((1, _CONTEXT), dtype=np.float32)

    def window(self, samples: np.ndarray) -> float:
        x = samples.reshape(1, WINDOW).astype(np.float32, copy=False)
        inp = np.concatenate([self._context, x], axis=1)
        out, self._h, self._c = self._session.run(
            None, {"input": inp, "h": self._h, "c": self._c})
        self._context = x[:, -_CONTEXT:]
        return float(np.asarray(out).reshape(-1)[0])


# -- segmenter events -------------------------------------------------------------------
@dataclass(frozen=True)
class SpeechStart:
    sample: int  # stream position (samples since the segmenter started) of the first window


@dataclass(frozen=True)
class SpeechSustained:
    """The current utterance has ``speech_ms`` of voiced windows: enough to barge in."""

    sample: int
    speech_ms: float


@dataclass(frozen=True)
class UtteranceEnd:
    audio: np.ndarray = field(repr=False)  # float32 16 kHz, with pre-roll, without the tail
    start_sample: int
    end_sample: int  # where the speech ended (before the trailing silence)
    speech_ms: float
    detected_sample: int  # where the end was decided (end_sample + end silence)
    # The same span as the microphone heard it, when the echo canceller changed part of it
    # (set by BargeIn.watch from pipeline.mic_tape; else None).
    uncancelled: np.ndarray | None = field(default=None, repr=False)

    @property
    def duration_s(self) -> float:
        return self.audio.size / SAMPLE_RATE


@dataclass(frozen=True)
class SpeechSoFar:
    """Silence inside an utterance, reported with the utterance so far: ``audio`` holds the
    pre-roll and the words, and the silence after ``end_sample`` up to the pre-roll length,
    as ``UtteranceEnd`` keeps it. A gap and the pause after it in the same silence have the
    same ``end_sample``."""

    audio: np.ndarray = field(repr=False)
    start_sample: int
    end_sample: int  # the last voiced sample so far
    speech_ms: float
    detected_sample: int  # where the silence was noticed (end_sample + gap_ms / pause_ms)
    uncancelled: np.ndarray | None = field(default=None, repr=False)  # as UtteranceEnd's


@dataclass(frozen=True)
class SpeechPause(SpeechSoFar):
    """``pause_ms`` of silence inside an utterance: the moment to start a speculative turn."""


@dataclass(frozen=True)
class SpeechGap(SpeechSoFar):
    """``gap_ms`` of silence inside an utterance, shorter than the pause: Whisper may start
    on the words so far (``pipeline.early_asr``)."""


@dataclass(frozen=True)
class SpeechResumed:
    """Voice again after a ``SpeechPause``: the user was not done; drop the speculation."""

    sample: int
    pause_ms: float  # how long the pause was


SegmentEvent = (SpeechStart | SpeechSustained | SpeechGap | SpeechPause | SpeechResumed
                | UtteranceEnd)

# A gate decides, per window, whether (probability, rms) counts as the user speaking.
# The echo guard installs one while the assistant's own voice may reach the microphone.
Gate = Callable[[float, float], bool]


@dataclass(frozen=True)
class GuardedGate:
    """What the echo guard asks of the segmenter for one block during playback.

    ``voiced`` decides speech, as ``Gate``. ``onset`` is the softer test of windows *before*
    a gated start: the user's first syllables over the assistant's voice are often too
    quiet for ``voiced`` yet louder than the echo alone; an utterance that starts under the
    guard reaches back over such windows (``SegmenterConfig.onset_backtrack_ms``) so the
    words that preceded the barge-in reach Whisper too."""

    voiced: Gate
    onset: Gate


@dataclass
class SegmenterConfig:
    threshold: float = 0.5  # Silero's own default; speech starts above it
    neg_threshold: float = 0.35  # ...and continues while above this (hysteresis)
    end_silence_ms: int = 600  # the utterance ends after this much silence
    bargein_min_ms: int = 300  # voiced time that makes SpeechSustained (barge-in)
    pre_roll_ms: int = 200  # audio kept before the first voiced window (soft onsets)
    # An utterance that starts under the echo guard also keeps the run of windows before
    # it that passed the guard's softer onset test, up to this much (then the pre-roll).
    # A user who began over a loud stretch of the reply was heard only from a later
    # syllable: in CI "How can I learn a new language quickly?" lost its first 0.5 s
    # (scripts/bench_echo_guard.py --backtrack-ms measures the onsets and words kept).
    onset_backtrack_ms: int = 1000
    min_utterance_ms: int = 200  # shorter voiced time is a click or a cough: dropped
    max_utterance_s: float = 30.0  # Whisper's window; longer speech is cut here
    # Silence that makes a SpeechPause (speculative start); None: no pause events.
    pause_ms: int | None = None
    # Shorter silence that makes a SpeechGap (Whisper starts early); None: no gap events.
    gap_ms: int | None = None
    # A held end (``end_after(held=True)``) is taken after this much silence regardless.
    held_end_max_ms: int = 3000


class UtteranceSegmenter:
    """Speech start / sustained / end from a stream of 16 kHz float32 blocks.

    Pure and synchronous. ``feed`` accepts blocks of any size; they are cut into
    512-sample windows and the events of the windows completed by this block are
    returned in order. ``gate``, when given, replaces the threshold test for the windows
    of this block (the echo guard during playback).
    """

    def __init__(self, vad: SpeechProbability, config: SegmenterConfig | None = None) -> None:
        self.vad = vad
        self.config = config or SegmenterConfig()
        self.position = 0  # samples consumed into windows
        self.windows: list[tuple[float, float, bool]] = []  # (prob, rms, voiced) last feed
        self._pending = np.zeros(0, dtype=np.float32)
        # pre-roll windows while not in speech, each with its onset test (GuardedGate)
        self._history: list[tuple[np.ndarray, bool]] = []
        self._speech: list[np.ndarray] = []  # windows of the current utterance
        self._in_speech = False
        self._voiced = 0  # voiced windows of the current utterance
        self._silent = 0  # consecutive silent windows since the last voiced one
        self._sustained = False
        self._start = 0
        self._pre = 0
        self._paused = False  # a SpeechPause was sent for the current silence
        self._gapped = False  # a SpeechGap was sent for the current silence
        self._end_silence_ms: float | None = None  # this utterance's override
        self._end_held = False  # the override's end waits for release_end()
        # Told of every utterance that ends, however its end was taken (a window of
        # ``feed`` or the live turn-taker's ``end_now``): ``talk --record`` keeps them.
        self.on_end: Callable[[UtteranceEnd], None] | None = None

    @property
    def in_speech(self) -> bool:
        return self._in_speech

    @property
    def first_sample(self) -> int | None:
        """Stream position of the current utterance's first sample (pre-roll included)."""
        return self._first() if self._in_speech else None

    def _first(self) -> int:
        return self._start - self._pre * WINDOW

    def reset(self) -> None:
        """Forget the current utterance (e.g. the device restarted)."""
        self.vad.reset()
        self._pending = np.zeros(0, dtype=np.float32)
        self._history, self._speech = [], []
        self._in_speech, self._voiced, self._silent, self._sustained = False, 0, 0, False
        self._paused, self._gapped = False, False
        self._end_silence_ms, self._end_held = None, False

    @property
    def silence_ms(self) -> float:
        """Silence since the last voiced window of the current utterance (0 outside one)."""
        return self._silent * WINDOW_MS if self._in_speech else 0.0

    def end_after(self, silence_ms: float | None, *, held: bool = False) -> None:
        """Set how much silence ends the *current* utterance (the endpoint policy's answer;
        None: back to ``end_silence_ms``). If that much has already passed, the next window
        ends it: the end comes out of ``feed`` like any other, one block later at most.

        ``held``: the end is not taken before ``release_end()`` either (the speculative
        reply is not ready to be heard yet, so there is no hurry to decide; voice coming
        back meanwhile is a resumption, not a new utterance)."""
        if self._in_speech:
            self._end_silence_ms = silence_ms
            self._end_held = held

    def release_end(self) -> None:
        """Let a held end be taken: at the next window if its silence has already passed."""
        self._end_held = False

    def end_now(self) -> UtteranceEnd | None:
        """End the current utterance at this window, for a caller that decided the end
        itself (the live turn-taker, when a held end's reply became ready after its
        silence had passed). None outside an utterance or for one too short to keep."""
        if not self._in_speech:
            return None
        ended = self._end()
        return ended[0] if ended and isinstance(ended[0], UtteranceEnd) else None

    def feed(self, block: np.ndarray,
             gate: Gate | GuardedGate | None = None) -> list[SegmentEvent]:
        data = np.concatenate([self._pending, np.asarray(block, dtype=np.float32).ravel()])
        n = data.size // WINDOW
        self._pending = data[n * WINDOW:]
        events: list[SegmentEvent] = []
        self.windows = []
        for i in range(n):
            events.extend(self._window(data[i * WINDOW:(i + 1) * WINDOW], gate))
        return events

    def flush(self) -> list[SegmentEvent]:
        """End of stream: close an utterance in progress."""
        if not self._in_speech:
            return []
        return self._end()

    def _voiced_window(self, prob: float, rms: float, gate: Gate | GuardedGate | None) -> bool:
        if isinstance(gate, GuardedGate):
            return gate.voiced(prob, rms)
        if gate is not None:
            return gate(prob, rms)
        limit = self.config.neg_threshold if self._in_speech else self.config.threshold
        return prob >= limit

    def _window(self, w: np.ndarray, gate: Gate | GuardedGate | None) -> list[SegmentEvent]:
        cfg = self.config
        prob = self.vad.window(w)
        rms = float(np.sqrt(np.mean(np.square(w, dtype=np.float64))))
        voiced = self._voiced_window(prob, rms, gate)
        self.windows.append((prob, rms, voiced))
        start_of_window = self.position
        self.position += WINDOW
        events: list[SegmentEvent] = []
        if not self._in_speech:
            onset = (gate.onset(prob, rms) if isinstance(gate, GuardedGate)
                     else prob >= cfg.neg_threshold)
            self._history.append((w, onset))
            pre_roll = int(cfg.pre_roll_ms / WINDOW_MS)
            del self._history[:-(pre_roll + int(cfg.onset_backtrack_ms / WINDOW_MS) + 1)]
            if voiced:
                back = self._backtrack() if isinstance(gate, GuardedGate) else 0
                self._pre = min(len(self._history) - 1, back + pre_roll)
                self._in_speech, self._start = True, start_of_window
                self._speech = [h[0] for h in self._history[-(self._pre + 1):]]
                self._history = []
                self._voiced, self._silent, self._sustained = 1, 0, False
                events.append(SpeechStart(start_of_window))
            return events + self._check_sustained()
        self._speech.append(w)
        if voiced:
            if self._paused:
                events.append(SpeechResumed(start_of_window, self._silent * WINDOW_MS))
                # The policy judged the words before the pause; they were not the end.
                self._paused, self._end_silence_ms, self._end_held = False, None, False
            self._voiced += 1
            self._silent = 0
            self._gapped = False
        else:
            self._silent += 1
        events.extend(self._check_sustained())
        end_silence = (cfg.end_silence_ms if self._end_silence_ms is None
                       else self._end_silence_ms)
        silence_ms = self._silent * WINDOW_MS
        held = self._end_held and silence_ms < cfg.held_end_max_ms
        if ((silence_ms >= end_silence and not held)
                or len(self._speech) * WINDOW >= cfg.max_utterance_s * SAMPLE_RATE):
            return events + self._end()
        if not self._gapped and cfg.gap_ms is not None and silence_ms >= cfg.gap_ms:
            self._gapped = True
            events.extend(self._so_far_event(SpeechGap))
        if not self._paused and cfg.pause_ms is not None and silence_ms >= cfg.pause_ms:
            self._paused = True
            events.extend(self._so_far_event(SpeechPause))
        return events

    def _backtrack(self) -> int:
        """Windows just before the current one that passed the onset test, in a row."""
        limit = int(self.config.onset_backtrack_ms / WINDOW_MS)
        back = 0
        for _w, onset in reversed(self._history[:-1]):
            if not onset or back >= limit:
                break
            back += 1
        return back

    def _check_sustained(self) -> list[SegmentEvent]:
        speech_ms = self._voiced * WINDOW_MS
        if self._in_speech and not self._sustained and speech_ms >= self.config.bargein_min_ms:
            self._sustained = True
            return [SpeechSustained(self.position, speech_ms)]
        return []

    def _so_far(self) -> tuple[list[np.ndarray], int, int]:
        """(windows to hand over, first sample, samples of speech) of the utterance so far."""
        keep = len(self._speech) - self._silent  # drop the trailing silence...
        tail = min(self._silent, int(self.config.pre_roll_ms / WINDOW_MS))
        windows = self._speech[:keep + tail]  # ...but keep a little, like the pre-roll
        return windows, self._first(), keep * WINDOW

    def _so_far_event(self, kind: type[SpeechGap | SpeechPause]) -> list[SegmentEvent]:
        speech_ms = self._voiced * WINDOW_MS
        windows, first, kept = self._so_far()
        if speech_ms < self.config.min_utterance_ms or not windows:
            return []  # a click so far: nothing worth speculating on
        return [kind(np.concatenate(windows), first, first + kept, speech_ms, self.position)]

    def _end(self) -> list[SegmentEvent]:
        speech_ms = self._voiced * WINDOW_MS
        windows, first, kept = self._so_far()
        keep = kept // WINDOW
        self._in_speech, self._speech, self._history = False, [], []
        self._voiced, self._silent, self._sustained = 0, 0, False
        self._paused, self._gapped = False, False
        self._end_silence_ms, self._end_held = None, False
        if speech_ms < self.config.min_utterance_ms or not windows:
            log.debug("dropped %.0f ms of speech (under min_utterance_ms)", speech_ms)
            return []
        ended = UtteranceEnd(np.concatenate(windows), first, first + keep * WINDOW,
                             speech_ms, self.position)
        if self.on_end is not None:
            self.on_end(ended)
        return [ended]


# -- capture ----------------------------------------------------------------------------
# While no block comes, MicSource checks its stream this often; a stream still open but
# silent this long is logged once (PulseAudio's null-sink monitors take up to ~3 s to
# start delivering, so not an error by itself).
_CHECK_S = 0.5
_QUIET_WARN_S = 5.0
# A stream that ended by itself is opened again for this long (every _CHECK_S) before the
# device counts as gone: a sound server restarting (PulseAudio killed and respawned, a
# PipeWire restart) is back within ~1 s here; a USB microphone replugged takes longer.
REOPEN_S = 5.0


@dataclass(frozen=True)
class MicBlock:
    samples: np.ndarray = field(repr=False)  # float32 mono 16 kHz
    t: float  # time.monotonic() when the block arrived (its last sample, give or take)
    # The microphone's own samples when the echo canceller changed ``samples`` (while the
    # reply played and its echo's tail, pipeline.echo_cancel): Whisper is given both.
    uncancelled: np.ndarray | None = field(default=None, repr=False)


class MicSource:
    """The microphone as an async iterator of ``MicBlock`` (``async with`` owns the stream).

    The PortAudio callback runs on PortAudio's thread; it copies the block and hands it to
    the loop with ``call_soon_threadsafe``. If the loop falls behind, the oldest blocks are
    dropped (counted in ``overflows``) rather than letting capture drift further behind.
    """

    def __init__(self, device: str | int | None = None, block_ms: int = 20,
                 max_queued_s: float = 2.0) -> None:
        self.device = device
        self.block = SAMPLE_RATE * block_ms // 1000
        self.overflows = 0
        self._overflowing = False
        self._max = max(1, int(max_queued_s * 1000 / block_ms))
        self._queue: asyncio.Queue[MicBlock | None] = asyncio.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stream: Any = None
        self.reopened = 0  # times the stream ended by itself and was opened again
        self._closed = False

    async def __aenter__(self) -> MicSource:
        sd = import_sounddevice()
        self._loop = asyncio.get_running_loop()
        self._stream = await asyncio.to_thread(self._open, sd)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _open(self, sd: Any) -> Any:
        name = device_name(self.device)
        try:
            sd.check_input_settings(device=self.device, channels=1, dtype="float32",
                                    samplerate=SAMPLE_RATE)
            stream = sd.InputStream(samplerate=SAMPLE_RATE, channels=1, dtype="float32",
                                    blocksize=self.block, device=self.device,
                                    latency="low", callback=self._callback)
            stream.start()
        except (sd.PortAudioError, ValueError) as e:
            raise AudioDeviceError(
                f"cannot open input device {name} ({one_line(e)}): connect a microphone "
                "or pick one with --input-device (voice-llm talk --list-devices)") from None
        log.info("input device %s open at %d Hz, %d-sample blocks, latency %.0f ms", name,
                 SAMPLE_RATE, self.block, stream.latency * 1000)
        return stream

    def _callback(self, indata: np.ndarray, frames: int, _time: Any, status: Any) -> None:
        if status:
            log.debug("input stream status: %s", status)
        block = MicBlock(indata[:, 0].copy(), time.monotonic())
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._put, block)

    def _put(self, block: MicBlock | None) -> None:
        if block is not None and self._queue.qsize() >= self._max:
            self._queue.get_nowait()
            self.overflows += 1
            if not self._overflowing:  # once per episode: the user's words have holes
                self._overflowing = True
                log.warning("fell %.1f s behind the microphone: dropping its oldest audio "
                            "(%d blocks so far); is the CPU overloaded?",
                            self._max * self.block / SAMPLE_RATE, self.overflows)
        elif self._overflowing and self._queue.qsize() < self._max // 2:
            self._overflowing = False
        self._queue.put_nowait(block)

    def __aiter__(self) -> AsyncIterator[MicBlock]:
        return self._blocks()

    async def _blocks(self) -> AsyncIterator[MicBlock]:
        quiet_since = time.monotonic()
        warned = False
        while True:
            try:
                block = (self._queue.get_nowait() if not self._queue.empty()
                         else await asyncio.wait_for(self._queue.get(), _CHECK_S))
            except TimeoutError:
                if self._stream is not None and stream_ended(self._stream):
                    await self._reopen()
                    quiet_since, warned = time.monotonic(), False
                    continue
                quiet = time.monotonic() - quiet_since
                if quiet >= _QUIET_WARN_S and not warned:
                    warned = True
                    log.warning("input device %s has delivered no audio for %.0f s (its "
                                "stream is still open); is the sound server stuck?",
                                device_name(self.device), quiet)
                continue
            if block is None:
                return
            quiet_since, warned = time.monotonic(), False
            yield block

    async def _reopen(self) -> None:
        """The stream ended by itself (PortAudio says nothing: its callback thread ended,
        the stream is neither active nor stopped): open the device again, for up to
        ``REOPEN_S``, so a sound server that restarted loses the user a second of audio,
        not the conversation. A device still gone after that is an error, instead of a
        wait forever for a block that will not come (only close() stops the stream, and
        it lets go of it first)."""
        ended, self._stream = self._stream, None
        name = device_name(self.device)
        log.warning("input device %s stopped delivering audio (its stream ended); "
                    "opening it again", name)
        with contextlib.suppress(Exception):  # PortAudio may refuse to stop a dead stream
            await asyncio.to_thread(close_stream, ended)
        sd = import_sounddevice()
        deadline = time.monotonic() + REOPEN_S
        while not self._closed:
            try:
                stream = await asyncio.to_thread(self._open, sd)
            except AudioDeviceError:
                if time.monotonic() >= deadline:
                    raise AudioDeviceError(
                        f"input device {name} stopped delivering audio (its stream ended: "
                        "unplugged, or the sound server stopped) and did not come back in "
                        f"{REOPEN_S:.0f} s; check it, then start again") from None
                await asyncio.sleep(_CHECK_S)
                continue
            if self._closed:  # close() ran meanwhile: it ends the iteration
                await asyncio.to_thread(close_stream, stream)
                return
            self._stream = stream
            self.reopened += 1
            log.warning("input device %s is back: listening again", name)
            return

    async def close(self) -> None:
        self._closed = True
        stream, self._stream = self._stream, None
        if stream is not None:
            await asyncio.to_thread(close_stream, stream)
        self._put(None)  # ends the iteration of whoever is reading
