"""The microphone's own samples beside the cancelled ones (pipeline/mic_tape.py)."""

from __future__ import annotations

import numpy as np

from pipeline.asr import Transcript
from pipeline.mic import MicBlock, UtteranceEnd
from pipeline.mic_tape import MicTape, recognize_over_reply, surer

BLOCK = 320  # 20 ms at 16 kHz


def block(i: int, changed: bool) -> MicBlock:
    """Block ``i``: the cancelled samples are 0, the microphone's own are i + 1."""
    own = np.full(BLOCK, i + 1, np.float32)
    return MicBlock(np.zeros(BLOCK, np.float32) if changed else own, 0.0,
                    own if changed else None)


def test_a_span_that_overlapped_playback_gets_the_microphones_own_samples() -> None:
    tape = MicTape()
    for i in range(10):
        tape.append(block(i, changed=3 <= i < 5))
    own = tape.uncancelled(2 * BLOCK, 4 * BLOCK)
    assert own is not None and own.size == 4 * BLOCK
    assert list(own[::BLOCK]) == [3, 4, 5, 6]  # blocks 2-5 as the microphone heard them
    assert tape.uncancelled(6 * BLOCK, 3 * BLOCK) is None  # untouched: nothing to add
    ended = UtteranceEnd(np.zeros(4 * BLOCK, np.float32), 2 * BLOCK, 6 * BLOCK, 80.0,
                         8 * BLOCK)
    assert tape.attach(ended).uncancelled is not None
    assert tape.attach(UtteranceEnd(np.zeros(BLOCK, np.float32), 8 * BLOCK, 9 * BLOCK,
                                    20.0, 9 * BLOCK)).uncancelled is None


def test_the_tape_keeps_its_last_seconds_across_the_ring() -> None:
    tape = MicTape(seconds=0.1)  # 5 blocks
    for i in range(12):
        tape.append(block(i, changed=True))
    own = tape.uncancelled(8 * BLOCK, 4 * BLOCK)
    assert own is not None and list(own[::BLOCK]) == [9, 10, 11, 12]
    assert tape.uncancelled(2 * BLOCK, BLOCK) is None  # overwritten since


def Heard(text: str, avg_logprob: float) -> Transcript:  # noqa: N802 (reads as a type)
    return Transcript(text, "fitted", avg_logprob=avg_logprob)


def test_the_surer_transcript_is_kept_but_never_words_where_the_canceller_heard_none() -> None:
    garbled, clear = Heard("I learned a through-angle.", -0.9), Heard("How can I learn?", -0.2)
    assert surer(garbled, clear) == (clear, "microphone")
    assert surer(clear, garbled) == (clear, "cancelled")
    echo = Heard("The sky appears blue.", -0.1)  # the reply's echo, loud in the microphone
    assert surer(Heard("", -2.0), echo)[1] == "cancelled"


def test_whisper_sure_of_the_cancelled_audio_decodes_once() -> None:
    decoded: list[str] = []
    said = {"cancelled": Heard("Why is the sky blue?", -0.1), "own": Heard("Why?", -0.5)}

    def recognize(audio: np.ndarray) -> Transcript:
        decoded.append(str(audio[0]))
        return said[str(audio[0])]

    cancelled, own = np.array(["cancelled"]), np.array(["own"])
    assert recognize_over_reply(recognize, cancelled, own) == (said["cancelled"], "sure")
    assert decoded == ["cancelled"]
    said["cancelled"] = Heard("Why is the sky blew?", -0.6)
    assert recognize_over_reply(recognize, cancelled, own) == (said["own"], "microphone")
    assert recognize_over_reply(recognize, cancelled, None)[1] == ""
