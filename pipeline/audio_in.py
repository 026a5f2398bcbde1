"""Audio input from recorded WAV turns (``load_wav``); the microphone is ``pipeline.mic``.

Whisper wants float32 mono at 16 kHz. Any PCM WAV flavour is accepted (8/16/24/32-bit
integer or float, mono or stereo, 8-192 kHz; stereo is mixed down to mono); decoding
and resampling are PyAV's job through ``faster_whisper.decode_audio`` (no home-made
resampler). Before handing the file to PyAV we walk the RIFF header ourselves: FFmpeg's
own errors ("Invalid data found when processing input") do not tell a user *what* is wrong
with *which* file, and a replay must be able to report one bad turn in one line and go on
with the others.

Limits, checked from the header before anything is decoded (each refused in one line):
the sample rate must be 8-192 kHz (a 1 Hz header is a broken file, not a recording to
resample), at most 2 channels (more is a multitrack or surround file whose channels may
not hold the same voice; mixing them blindly is a guess), and at most ``MAX_SECONDS`` of
audio (one spoken turn; a 10-minute file would otherwise be transcribed for 20 s before
anything could refuse it).
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

SAMPLE_RATE = 16000
MIN_RATE, MAX_RATE = 8000, 192000  # telephone to studio; outside that the header is wrong
MAX_CHANNELS = 2
MAX_SECONDS = 60.0  # one spoken turn; Whisper's fitted window covers up to ~28 s of it
_PCM_TAGS = (0x0001, 0x0003, 0xFFFE)  # integer, float, extensible: fixed bytes per frame

log = logging.getLogger(__name__)

_STREAMING_SIZE = 0xFFFFFFFF  # data size written by recorders that never patch the header


class AudioFileError(Exception):
    """A user's audio file cannot be used; ``str(e)`` is one line naming the file."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = " ".join(problem.split())  # one line, whatever the decoder said
        super().__init__(f"{self.path}: {self.problem}")


@dataclass(frozen=True)
class WavLayout:
    """What the RIFF header says; enough to name the problem before decoding."""

    channels: int
    sample_rate: int
    bits: int
    block_align: int
    data_bytes: int | None  # None: unknown (streaming header or RF64)
    tag: int = 1  # format tag: 1 integer PCM, 3 float, 0xFFFE extensible, others coded
    available_bytes: int = 0  # bytes in the file after the data chunk header

    @property
    def frames(self) -> int | None:
        if self.data_bytes is None or self.block_align == 0:
            return None
        return self.data_bytes // self.block_align

    @property
    def seconds(self) -> float | None:
        """Duration from the header alone; None for coded formats (no fixed frame size)."""
        if self.tag not in _PCM_TAGS or self.block_align == 0:
            return None
        data = self.data_bytes if self.data_bytes is not None else self.available_bytes
        return data // self.block_align / self.sample_rate


def load_wav(path: str | Path) -> np.ndarray:
    """Read a WAV file as float32 mono 16 kHz samples in [-1, 1].

    Raises ``AudioFileError`` (one line, naming the file) for anything unusable: missing,
    a directory, not a WAV, truncated, empty, undecodable, or outside the limits above.
    """
    layout = check_wav_header(path)
    log.debug("%s: %s", path, layout)
    check_limits(path, layout)
    audio = _decode(path)
    if audio.size == 0:
        raise AudioFileError(path, "empty (0 samples)")
    # Coded formats have no duration in the header: check what was decoded instead.
    _check_seconds(path, audio.size / SAMPLE_RATE)
    return audio


def check_limits(path: str | Path, layout: WavLayout) -> None:
    """Refuse, in one line, what the header shows to be outside what a turn may be."""
    if not MIN_RATE <= layout.sample_rate <= MAX_RATE:
        raise AudioFileError(path, f"sample rate {layout.sample_rate} Hz is outside "
                             f"{MIN_RATE}-{MAX_RATE} Hz (a broken header, or resample it: "
                             "sox in.wav -r 16000 out.wav)")
    if layout.channels > MAX_CHANNELS:
        raise AudioFileError(path, f"{layout.channels} channels; only mono or stereo is "
                             "accepted (stereo is mixed down). Pick the voice channel: "
                             "sox in.wav out.wav remix 1")
    if layout.seconds is not None:
        _check_seconds(path, layout.seconds)


def _check_seconds(path: str | Path, seconds: float) -> None:
    if seconds > MAX_SECONDS:
        raise AudioFileError(path, f"{seconds:.1f} s of audio; one turn may be at most "
                             f"{MAX_SECONDS:.0f} s (cut out the question: "
                             f"sox in.wav out.wav trim START {MAX_SECONDS:.0f})")


def check_wav_header(path: str | Path) -> WavLayout:
    """Validate the RIFF/WAVE structure of ``path`` and return its format."""
    p = Path(path)
    if p.is_dir():
        raise AudioFileError(path, "is a directory, not a WAV file")
    try:
        with p.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            return _parse_riff(path, f, size)
    except FileNotFoundError:
        raise AudioFileError(path, "no such file") from None
    except OSError as e:
        raise AudioFileError(path, f"cannot read ({e.strerror or e})") from None


def _parse_riff(path: str | Path, f: BinaryIO, size: int) -> WavLayout:
    head = f.read(12)
    if size == 0:
        raise AudioFileError(path, "empty file (0 bytes)")
    if head[:4] not in (b"RIFF", b"RF64"):
        raise AudioFileError(path, "not a WAV file (RIFF header missing)")
    if len(head) < 12:
        raise AudioFileError(path, f"truncated (RIFF header is {len(head)} of 12 bytes)")
    if head[8:12] != b"WAVE":
        kind = head[8:12].decode("latin-1")
        raise AudioFileError(path, f"not a WAV file (RIFF type {kind!r}, expected 'WAVE')")
    return _walk_chunks(path, f, size, rf64=head[:4] == b"RF64")


def _walk_chunks(path: str | Path, f: BinaryIO, size: int, *, rf64: bool) -> WavLayout:
    """Find ``fmt `` then ``data``; other chunks (LIST, fact, ...) are skipped."""
    fmt: tuple[int, int, int, int, int] | None = None
    pos = 12
    while pos + 8 <= size:
        f.seek(pos)
        chunk_id, chunk_size = struct.unpack("<4sI", f.read(8))
        available = size - pos - 8
        if chunk_id == b"fmt ":
            fmt = _read_fmt(path, f, chunk_size, available)
        elif chunk_id == b"data":
            if fmt is None:
                raise AudioFileError(path, "not a valid WAV file (data chunk before fmt chunk)")
            return _layout(path, fmt, chunk_size, available, rf64=rf64)
        pos += 8 + chunk_size + (chunk_size & 1)  # chunks are padded to even sizes
    if pos < size:
        raise AudioFileError(path, f"truncated (chunk header cut off at byte {pos})")
    what = "fmt and data chunks" if fmt is None else "data chunk"
    raise AudioFileError(path, f"truncated or not a valid WAV file (no {what})")


def _read_fmt(path: str | Path, f: BinaryIO, chunk_size: int,
              available: int) -> tuple[int, int, int, int, int]:
    if chunk_size < 16 or available < 16:
        raise AudioFileError(path, f"truncated (fmt chunk is {min(chunk_size, available)} "
                                   "of 16 bytes)")
    tag, channels, rate, _byte_rate, block_align, bits = struct.unpack("<HHIIHH", f.read(16))
    if channels == 0 or rate == 0:
        raise AudioFileError(path, f"invalid WAV format ({channels} channels at {rate} Hz)")
    log.debug("%s: WAV format tag %#x", path, tag)  # PCM, float, extensible...: PyAV decides
    return channels, rate, bits, block_align, tag


def _layout(path: str | Path, fmt: tuple[int, int, int, int, int], declared: int,
            available: int, *, rf64: bool) -> WavLayout:
    channels, rate, bits, block_align, tag = fmt
    # RF64 keeps the real size in its ds64 chunk; a streaming header never got patched.
    # In both cases the file length is the only truth, so let the decoder read to the end.
    data_bytes: int | None = None if rf64 or declared == _STREAMING_SIZE else declared
    if data_bytes is not None and data_bytes > available:
        raise AudioFileError(path, f"truncated (data chunk declares {data_bytes} bytes, "
                                   f"file has {available})")
    layout = WavLayout(channels, rate, bits, block_align, data_bytes, tag, available)
    if layout.frames == 0 or (data_bytes is None and available == 0):
        raise AudioFileError(path, "empty (0 samples)")
    return layout


def _decode(path: str | Path) -> np.ndarray:
    import av  # PyAV comes with faster-whisper; imported here to keep module import cheap
    from faster_whisper import decode_audio

    try:
        audio = decode_audio(str(path), sampling_rate=SAMPLE_RATE)
    except (av.FFmpegError, OSError, ValueError) as e:
        raise AudioFileError(path, f"cannot decode ({e})") from None
    return np.asarray(audio, dtype=np.float32)


# --- Microphone capture ---------------------------------------------------------------
# Live input for `voice-llm talk` (issue 5) lives in pipeline/mic.py (MicSource, streaming
# Silero VAD, utterance segmenter); it delivers the same float32 16 kHz mono as load_wav.
