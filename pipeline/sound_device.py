"""PortAudio through sounddevice: what the speaker (``pipeline.speaker``) and the microphone
(``pipeline.mic``) share - the lazy import, device lookup, and one-line device errors."""

from __future__ import annotations

from typing import Any


class AudioDeviceError(Exception):
    """The sound system cannot be used; ``str(e)`` is one line saying how to fix it."""


def import_sounddevice() -> Any:
    """Import sounddevice lazily; a missing PortAudio becomes one actionable line."""
    try:
        import sounddevice
    except OSError:
        raise AudioDeviceError("PortAudio not found: apt-get install libportaudio2") from None
    return sounddevice


def close_stream(stream: Any) -> None:
    stream.stop()
    stream.close()


def stream_ended(stream: Any) -> bool:
    """PortAudio ended ``stream`` by itself (the device unplugged, the sound server gone):
    its callback thread failed, so it is neither active nor stopped, and nothing says so
    (seen on PulseAudio's daemon killed under talk). A stream being stopped or aborted
    passes through that state for a moment too: callers rule that out."""
    return not stream.active and not stream.stopped


def one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def device_name(device: str | int | None) -> str:
    return "default" if device is None else repr(device)


def list_devices() -> str:
    """The devices PortAudio sees, one per line, marking the defaults (> input, < output)."""
    sd = import_sounddevice()
    devices = sd.query_devices()
    if not len(devices):
        return ("no audio devices found: connect one, or start a sound server "
                "(PulseAudio/PipeWire) so PortAudio can see it")
    return str(devices)


def check_input_device(device: str | int | None) -> str:
    """Name of the input device ``device`` resolves to; AudioDeviceError if there is none."""
    return _check_device(device, "input", "connect a microphone or pick one with "
                         "--input-device (see voice-llm talk --list-devices)")


def check_output_device(device: str | int | None) -> str:
    """Name of the output device ``device`` resolves to; AudioDeviceError if there is none."""
    return _check_device(device, "output", "pick one with --output-device (see voice-llm "
                         "talk --list-devices)")


def _check_device(device: str | int | None, kind: str, advice: str) -> str:
    sd = import_sounddevice()
    try:
        info = sd.query_devices(device, kind=kind)
    except (sd.PortAudioError, ValueError) as e:
        what = f"no default {kind} device" if device is None else f"no {kind} device {device!r}"
        raise AudioDeviceError(f"{what} ({one_line(e)}): {advice}") from None
    return str(info["name"])
