"""load_wav: every PCM WAV flavour in, float32 16 kHz mono out; one-line errors otherwise."""

from __future__ import annotations

import json
import struct
import wave
from pathlib import Path

import numpy as np
import pytest

from pipeline.audio_in import (
    MAX_RATE,
    MAX_SECONDS,
    MIN_RATE,
    SAMPLE_RATE,
    AudioFileError,
    load_wav,
)

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
TONE_HZ = 440.0
SECONDS = 0.5
AMPLITUDE = 0.5


def tone(rate: int) -> np.ndarray:
    t = np.arange(int(rate * SECONDS)) / rate
    return (AMPLITUDE * np.sin(2 * np.pi * TONE_HZ * t)).astype(np.float64)


def encode(x: np.ndarray, bits: int, *, floating: bool = False) -> bytes:
    """Little-endian PCM bytes of ``x`` (interleaved already if multi-channel)."""
    if floating:
        return x.astype("<f4" if bits == 32 else "<f8").tobytes()
    if bits == 8:  # 8-bit WAV is unsigned
        return (np.round(x * 127) + 128).astype(np.uint8).tobytes()
    if bits == 24:
        ints = np.round(x * (2 ** 23 - 1)).astype("<i4")
        return b"".join(v.tobytes()[:3] for v in ints)
    return np.round(x * (2 ** (bits - 1) - 1)).astype(f"<i{bits // 8}").tobytes()


def riff(data: bytes, *, rate: int, channels: int, bits: int, tag: int = 1,
         declared: int | None = None) -> bytes:
    """A WAV built by hand: the stdlib ``wave`` module cannot write float or a bad size."""
    block = channels * bits // 8
    fmt = struct.pack("<HHIIHH", tag, channels, rate, rate * block, block, bits)
    size = len(data) if declared is None else declared
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
    body += b"data" + struct.pack("<I", size) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def stdlib_wav(path: Path, x: np.ndarray, *, rate: int, channels: int, bits: int) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(bits // 8)
        w.setframerate(rate)
        w.writeframes(encode(x, bits))


def interleave(mono: np.ndarray, channels: int) -> np.ndarray:
    return np.repeat(mono, channels) if channels > 1 else mono


def dominant_hz(audio: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(audio))
    return float(np.argmax(spectrum)) * SAMPLE_RATE / audio.size


def assert_tone(audio: np.ndarray) -> None:
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert abs(audio.size - SECONDS * SAMPLE_RATE) <= 0.02 * SECONDS * SAMPLE_RATE
    assert abs(float(np.abs(audio).max()) - AMPLITUDE) < 0.05
    assert abs(dominant_hz(audio) - TONE_HZ) < 5


@pytest.mark.parametrize("bits", [8, 16, 24, 32])
@pytest.mark.parametrize("channels", [1, 2])
def test_integer_pcm_written_by_stdlib_wave(tmp_path: Path, bits: int, channels: int) -> None:
    path = tmp_path / f"int{bits}_{channels}ch.wav"
    stdlib_wav(path, interleave(tone(22050), channels), rate=22050, channels=channels,
               bits=bits)
    assert_tone(load_wav(path))


@pytest.mark.parametrize("rate", [8000, 16000, 44100, 48000])
def test_any_sample_rate_is_resampled_to_16k(tmp_path: Path, rate: int) -> None:
    path = tmp_path / f"r{rate}.wav"
    stdlib_wav(path, tone(rate), rate=rate, channels=1, bits=16)
    assert_tone(load_wav(path))


@pytest.mark.parametrize("bits", [32, 64])
def test_ieee_float(tmp_path: Path, bits: int) -> None:
    path = tmp_path / f"float{bits}.wav"
    data = encode(interleave(tone(22050), 2), bits, floating=True)
    path.write_bytes(riff(data, rate=22050, channels=2, bits=bits, tag=3))
    assert_tone(load_wav(path))


def test_str_path_and_extra_chunks(tmp_path: Path) -> None:
    # A LIST chunk before data (common from editors) must be skipped, not misread.
    base = riff(encode(tone(16000), 16), rate=16000, channels=1, bits=16)
    fmt_end = 12 + 8 + 16
    info = b"LIST" + struct.pack("<I", 5) + b"INFOx" + b"\0"  # odd size: padded
    path = tmp_path / "list.wav"
    path.write_bytes(base[:fmt_end] + info + base[fmt_end:])
    assert_tone(load_wav(str(path)))


def bad(tmp_path: Path, name: str, content: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


def one_line_error(path: Path | str) -> str:
    with pytest.raises(AudioFileError) as err:
        load_wav(path)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    return message


GOOD = riff(encode(tone(16000), 16), rate=16000, channels=1, bits=16)


@pytest.mark.parametrize(("name", "content", "expected"), [
    ("text.wav", b"hello, I am not audio\n", "not a WAV file (RIFF header missing)"),
    ("zero.wav", b"", "empty file (0 bytes)"),
    ("short_riff.wav", b"RIFF\x10\x00", "truncated (RIFF header"),
    ("avi.wav", b"RIFF\x04\x00\x00\x00AVI " + b"\0" * 32, "not a WAV file (RIFF type"),
    ("header_only.wav", GOOD[:12], "truncated or not a valid WAV file (no fmt and data"),
    ("cut_fmt.wav", GOOD[:12 + 8 + 6], "truncated (fmt chunk"),
    ("cut_chunk_header.wav", GOOD[:12 + 8 + 16 + 4], "truncated (chunk header cut off"),
    ("no_data.wav", GOOD[:12 + 8 + 16], "truncated or not a valid WAV file (no data chunk)"),
    ("cut_data.wav", GOOD[:-1000], "truncated (data chunk declares 16000 bytes"),
    ("no_frames.wav", riff(b"", rate=16000, channels=1, bits=16), "empty (0 samples)"),
    ("bad_codec.wav", riff(b"\x01" * 4000, rate=16000, channels=1, bits=16, tag=0x4242),
     "cannot decode"),
])
def test_broken_files_give_one_line_naming_the_file(tmp_path: Path, name: str,
                                                     content: bytes, expected: str) -> None:
    assert expected in one_line_error(bad(tmp_path, name, content))


def test_zero_frames_from_stdlib_wave(tmp_path: Path) -> None:
    path = tmp_path / "silent_length_0.wav"
    stdlib_wav(path, np.zeros(0), rate=16000, channels=1, bits=16)
    assert "empty (0 samples)" in one_line_error(path)


def test_directory_and_missing_file(tmp_path: Path) -> None:
    assert "is a directory" in one_line_error(tmp_path)
    assert "no such file" in one_line_error(str(tmp_path / "nope.wav"))


def test_shipped_samples_are_16k_mono_questions() -> None:
    transcripts = json.loads((SAMPLES / "transcripts.json").read_text())
    assert len(transcripts) >= 5
    for name in transcripts:
        with wave.open(str(SAMPLES / name)) as w:
            assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2)
        audio = load_wav(SAMPLES / name)
        assert 2.0 <= audio.size / SAMPLE_RATE <= 4.5
        assert float(np.abs(audio[: SAMPLE_RATE // 10]).max()) < 0.01  # padded silence


# --- limits: refused from the header, before anything is decoded ----------------------
def no_decode(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(path: object) -> np.ndarray:
        raise AssertionError("decoded a file the header already rules out")

    monkeypatch.setattr("pipeline.audio_in._decode", refuse)


@pytest.mark.parametrize("rate", [1, 4000, 7999, 192001, 384000])
def test_sample_rate_outside_8_to_192_khz_is_refused(tmp_path: Path, rate: int,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    no_decode(monkeypatch)
    path = bad(tmp_path, f"r{rate}.wav", riff(b"\0\0" * 4000, rate=rate, channels=1, bits=16))
    message = one_line_error(path)
    assert f"sample rate {rate} Hz is outside {MIN_RATE}-{MAX_RATE} Hz" in message


@pytest.mark.parametrize("rate", [MIN_RATE, MAX_RATE])
def test_the_rate_limits_themselves_are_accepted(tmp_path: Path, rate: int) -> None:
    path = tmp_path / f"edge{rate}.wav"
    stdlib_wav(path, tone(rate), rate=rate, channels=1, bits=16)
    assert_tone(load_wav(path))


@pytest.mark.parametrize("channels", [3, 6])
def test_more_than_two_channels_is_refused(tmp_path: Path, channels: int,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    no_decode(monkeypatch)
    path = tmp_path / f"ch{channels}.wav"
    stdlib_wav(path, interleave(tone(16000), channels), rate=16000, channels=channels,
               bits=16)
    message = one_line_error(path)
    assert f"{channels} channels; only mono or stereo" in message


def long_wav(seconds: float, *, streaming: bool = False) -> bytes:
    # 8 kHz 8-bit: a minute is only 480 kB
    data = b"\x80" * int(8000 * seconds)
    return riff(data, rate=8000, channels=1, bits=8,
                declared=0xFFFFFFFF if streaming else None)


@pytest.mark.parametrize("streaming", [False, True])
def test_a_turn_longer_than_the_limit_is_refused_from_the_header(
        tmp_path: Path, streaming: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    no_decode(monkeypatch)
    path = bad(tmp_path, "long.wav", long_wav(MAX_SECONDS + 1, streaming=streaming))
    message = one_line_error(path)
    assert f"{MAX_SECONDS + 1:.1f} s of audio; one turn may be at most" in message


def test_a_turn_at_the_limit_is_accepted(tmp_path: Path) -> None:
    path = bad(tmp_path, "limit.wav", long_wav(MAX_SECONDS))
    assert load_wav(path).size == pytest.approx(MAX_SECONDS * SAMPLE_RATE, rel=0.01)
