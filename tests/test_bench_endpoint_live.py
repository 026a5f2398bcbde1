"""How scripts/bench_endpoint_live.py judges a false endpoint from an utterance's turns, and
the order it speaks the corpus in (the same as bench_endpoint's learning rows)."""

from __future__ import annotations

import numpy as np
from script_module import load_script

live = load_script("bench_endpoint_live")
endpoint = load_script("bench_endpoint")


def turn(audio_s: float | None, speech_end_ms: float = 450.0, played: bool = True,
         from_speech_end_ms: float | None = 600.0):
    return live.HeardTurn("text", audio_s, speech_end_ms, played, True, None,
                          from_speech_end_ms, None)


# "Call my sister | after lunch.": 3.0 s of voice; the pause comes after the first 1.2 s.
WHOLE_S = 3.0
PRE = live.PRE_ROLL_S


def test_a_reply_on_the_whole_utterance_is_no_false_endpoint() -> None:
    # pre-roll + 3.0 s of voice, then the silence the turn waited
    assert not live.false_endpoint([turn(PRE + 3.0 + 0.45)], WHOLE_S)


def test_a_quiet_last_syllable_heard_as_silence_is_none_if_the_reply_came_after_it() -> None:
    # The VAD's voice ended 0.36 s before the last loud sample ("... at sunset"), and the
    # reply started 1100 ms after the VAD's end: after the user's.
    late = turn(PRE + 2.64 + 0.224, speech_end_ms=224, from_speech_end_ms=1100)
    assert not live.false_endpoint([late], WHOLE_S)
    early = turn(PRE + 2.64 + 0.224, speech_end_ms=224, from_speech_end_ms=300)
    assert live.false_endpoint([early], WHOLE_S)


def test_a_reply_played_on_the_first_part_is_one() -> None:
    first = turn(PRE + 1.2 + 0.45)  # the pause taken for the end, and played
    assert live.false_endpoint([first], WHOLE_S)  # (the rest did not even cut it)
    rest = turn(PRE + 1.0 + 0.45)  # the rest, with the cut reply's words carried
    assert live.false_endpoint([first, rest], WHOLE_S)


def test_a_turn_cut_before_it_played_is_not_one() -> None:
    # The end was taken at the pause, but the rest of the request came back before a
    # sample of the reply played: nothing was heard, and the next turn answers all of it
    # (the cut turn's words carried), on the audio of the rest alone.
    first = turn(PRE + 1.2 + 0.45, played=False)
    rest = turn(PRE + 1.0 + 0.45)
    assert not live.false_endpoint([first, rest], WHOLE_S)


def test_a_played_reply_cut_by_more_of_the_utterance_is_one() -> None:
    # The first turn was cut unplayed, the rest paused again and that was taken for the
    # end too, played, and cut by the last words.
    turns = [turn(1.85, played=False), turn(1.2), turn(0.9)]
    assert live.false_endpoint(turns, WHOLE_S)


def test_unknown_audio_or_no_reply_counts_as_none() -> None:
    assert not live.false_endpoint([turn(None)], WHOLE_S)
    assert not live.false_endpoint([turn(PRE + 1.2 + 0.45, from_speech_end_ms=None)], WHOLE_S)


def test_each_speaker_is_one_conversation_in_bench_endpoints_order() -> None:
    def u(split: str, voice: str, i: int):
        return endpoint.Utterance(f"{split}-{voice}-{i}", split, "whole", "x",
                                  np.zeros(1, np.float32), 1, None, voice)

    corpus = [u("tune", "a", i) for i in range(3)] + [u("test", "b", i) for i in range(4)] + \
        [u("test", "c", i) for i in range(2)]
    talks = live.conversations(corpus, ["test"], order=1)
    assert [[x.voice for x in t] for t in talks] == [["b"] * 4, ["c"] * 2]
    # bench_endpoint's run_condition: one generator per condition, a permutation per
    # speaker in corpus order, the tune split's drawn too
    rng = np.random.default_rng(1)
    rng.permutation(3)
    assert [x.name for x in talks[0]] == [f"test-b-{i}" for i in rng.permutation(4)]


def test_the_report_counts_mid_sentence_pauses_apart_from_two_finished_sentences() -> None:
    def r(text: str, variant: str, false: bool):
        return {"name": text, "split": "test", "variant": variant, "text": text,
                "voice": "v", "pause_ms": 600, "false_endpoint": false, "turns": [],
                "from_speech_end_ms": None, "error": None}

    rows = [r("Call my sister | after lunch.", "separate", True),  # part 1 could end
            r("Call my sister | after lunch.", "ssml", False),
            r("How do I fix a | flat tyre on my bike?", "separate", False),
            r("How do I fix a | flat tyre on my bike?", "ssml", True)]
    line = next(x for x in live.report(rows, {}).splitlines() if x.startswith("| test"))
    # separate, ssml, both, mid-sentence (both ssml and the separate "How do I fix a")
    assert line.split(" | ")[1:5] == ["1/2 (50 %)", "1/2 (50 %)", "2/4 (50 %)",
                                      "1/3 (33 %)"]


def test_learning_both_ways_alternates_which_goes_first_and_reports_them_side_by_side(
        ) -> None:
    assert live.learning_order("on", 1) == [True]
    assert live.learning_order("off", 2) == [False]
    assert [live.learning_order("both", i) for i in (1, 2)] == [[True, False],
                                                               [False, True]]

    def r(variant: str, false: bool, learn: bool, ms: float | None = None):
        # Whole questions: Silero's voice ended 100 ms before the last loud sample.
        turns = [] if ms is None else [{"voiced_s": PRE + 1.9, "endpoint": None,
                                        "speculative": False, "played": True}]
        return {"name": "n", "split": "fresh", "variant": variant,
                "text": "How do I fix a | flat tyre on my bike?", "voice": "v",
                "pause_ms": 600, "voiced_s": 2.0, "false_endpoint": false,
                "turns": turns, "from_speech_end_ms": ms, "error": None,
                "learn_pauses": learn}

    rows = [r("ssml", True, False), r("ssml", False, True), r("separate", True, False),
            r("separate", False, True), r("whole", False, True, 900.0),
            r("whole", False, False, 600.0)]
    text = live.report(rows, {"learn_pauses": "both"})
    lines = text.splitlines()
    assert next(x for x in lines if x.startswith("| fresh, learning |")).split(
        " | ")[3] == "0/2 (0 %)"
    assert next(x for x in lines if x.startswith("| fresh, no learning |")).split(
        " | ")[3] == "2/2 (100 %)"
    pair = lines[lines.index("## Learning the speaker's pauses vs not, same run") + 4]
    # from the last sound: 900 and 600 ms from Silero's end, less the 100 ms it missed
    assert pair == "| fresh | 0/2 / 2/2 | 0/2 / 2/2 | 800 / 500 (1.60x) |"
    assert next(x for x in lines if x.startswith("| fresh, learning |")).split(
        " | ")[5:7] == ["900 / 900 / 900", "800 / 800"]
    # a run of one condition keeps its one row per split
    single = live.report([x for x in rows if x["learn_pauses"]], {"learn_pauses": "on"})
    assert "| fresh | " in single and "vs not" not in single
