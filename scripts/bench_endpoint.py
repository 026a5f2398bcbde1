#!/usr/bin/env python3
"""False endpoints vs endpoint wait: the endpoint policy against fixed silences.

A corpus of spoken questions is made with espeak-ng (voices other than the reply's Piper
voice): some paused mid-sentence for 300-900 ms ("Can you tell me about the ... history of
bicycles?"), some said in one go. Every paused sentence is made twice:

- ``separate``: the two parts said as two espeak-ng utterances joined with silence. Each part
  ends with sentence-final intonation: the worst case, harsher than a person pausing;
- ``ssml``: one utterance with an SSML ``<break time="..."/>`` at the pause, which keeps the
  continuation intonation a speaker holding the turn has.

Splits with different sentences and voices: ``tune`` (the 16 + 8 sentences the rules and
thresholds were designed on), ``test`` (48 + 24 held out; the figures to quote), ``fresh``
(32 + 16, written after the last-word cue) and ``numbers`` (16 + 16: pauses right after a
number and requests that end on one, for the number rule).

Each utterance runs through the real pieces of live turn-taking, block by block as a
microphone delivers it: the Silero segmenter with 200 ms pause events, the real Whisper on
the words so far at every pause, the prosody cue on the same audio (``pipeline/prosody.py``),
and the endpoint policy setting the end. Fixed end silences run on the same audio in the
same run. Silero's probabilities and Whisper's transcript at each pause are computed once
per utterance and replayed for every condition (the segmenter always sees the same windows
from a reset, so they are the same figures; only the decision differs).

- false endpoint: the utterance was ended before its last word (the assistant would have
  answered a half question);
- endpoint wait: silence after the real last word until the end was decided (what every
  turn pays before it can be heard). Wait columns leave out false endpoints.

The "held until the reply is ready" conditions model what ``LiveTurnTaker`` does: the
speculative turn's first audio is ready ``ready_ms`` after its pause, and the end is not
taken before that (``end_after(held=True)``, ``release_end()``), so voice that comes back
meanwhile continues the utterance. ``ready_ms`` is the pipeline's time from the pause to
the first audio (measured with ``scripts/bench_live.py``; it depends on the machine), so
the figures are given for a few of them.

The "learns the speaker's pauses" conditions run each split as conversations, one per
espeak-ng voice, its utterances in a seeded shuffled order, with ``PauseHabit``
(pipeline/pauses.py) carried from one utterance to the next and fed as ``LiveTurnTaker``
feeds it: the pause before a ``SpeechResumed`` after a finished-looking judgement, and
after a false endpoint the silence up to the next ``SpeechStart`` (the rest of the request
that cut the reply). The other conditions judge every utterance alone.

The report: endpoint.md (the tables), endpoint.png (false endpoints against the wait, one
point per condition, test split) and endpoint.json (every utterance).

Usage: scripts/bench_endpoint.py [--out out/endpoint] [--only REGEX]   (a few minutes;
       real Whisper; --only: just the conditions whose label matches)
       scripts/bench_endpoint.py --report-only out/endpoint   (the report again from its
       endpoint.json; runs nothing)
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.audio_in import SAMPLE_RATE, load_wav  # noqa: E402
from pipeline.endpoint import EndpointPolicy  # noqa: E402
from pipeline.mic import (  # noqa: E402
    SegmenterConfig,
    SileroStream,
    SpeechPause,
    SpeechResumed,
    SpeechStart,
    UtteranceEnd,
    UtteranceSegmenter,
)
from pipeline.pauses import PauseHabit  # noqa: E402
from pipeline.prosody import ProsodyCue, final_cue  # noqa: E402
from services.endpoint_chart import EndpointPoint, draw  # noqa: E402

# (first part, second part). Tune split: the corpus the rules were written against.
TUNE_PAUSED = [
    ("Can you tell me about the", "history of bicycles?"),
    ("What is the best way to", "learn Spanish quickly?"),
    ("I want to bake a cake and", "I need a simple recipe."),
    ("My flight leaves at", "seven thirty in the morning."),
    ("How many", "planets are in the solar system?"),
    ("I was thinking about", "going hiking this weekend."),
    ("Could you explain why the", "ocean is salty?"),
    ("The meeting is on", "Thursday at three."),
    ("What should I do if my", "plants turn yellow?"),
    ("Remind me to buy milk,", "eggs and bread."),
    ("Is it true that", "cats sleep most of the day?"),
    ("Tell me a story about a", "dragon who could not fly."),
    ("I need about", "twenty minutes to get ready."),
    ("Why do leaves change colour in", "autumn?"),
    ("My favourite kind of music is", "jazz from the fifties."),
    ("Which is healthier, rice or", "pasta?"),
]
TUNE_WHOLE = [
    "Why is the sky blue?", "How do I make a good cup of tea?",
    "What is the capital of Australia?", "Tell me a fun fact about octopuses.",
    "How far away is the moon?", "Can you recommend a good book?",
    "What time is it in Tokyo?", "How do airplanes stay in the air?",
]
# Test split: held out, never looked at while choosing rules or thresholds. Like people,
# some pause after a word that cannot end a sentence, some after one that could.
TEST_PAUSED = [
    ("What is the difference between a", "crocodile and an alligator?"),
    ("Can you help me write an email to", "my landlord about the heating?"),
    ("How long should I boil an", "egg for a soft yolk?"),
    ("I would like to know more about the", "Roman empire."),
    ("What are some good exercises for", "lower back pain?"),
    ("Tell me the weather forecast for", "tomorrow in London."),
    ("Why does my phone battery drain so", "fast at night?"),
    ("Could you suggest a name for my", "new puppy?"),
    ("How do I convert Celsius to", "Fahrenheit in my head?"),
    ("What happens if you mix baking soda and", "vinegar?"),
    ("Set a timer for", "fifteen minutes please."),
    ("I am looking for a recipe with", "chicken and rice."),
    ("Who was the first person to", "walk on the moon?"),
    ("Explain how a rainbow forms after the", "rain stops."),
    ("What is the population of", "Canada right now?"),
    ("My daughter wants to learn the", "piano this year."),
    ("Can you translate good morning into", "French and German?"),
    ("How much water should I drink every", "day in summer?"),
    ("Play some relaxing music for", "an hour."),
    ("I forgot where I put my", "car keys again."),
    ("What should I cook for dinner if I only have", "eggs and potatoes?"),
    ("Is it safe to swim after", "eating a big meal?"),
    ("Give me three ideas for a", "birthday present."),
    ("How do bees make", "honey from flowers?"),
    ("I have a meeting with my boss,", "what should I prepare?"),
    ("Tell me a joke about", "penguins."),
    ("The train to Manchester leaves at", "half past nine."),
    ("What does a software engineer do", "all day at work?"),
    ("I need a gift for my mother", "who likes gardening."),
    ("How do I get rid of", "fruit flies in the kitchen?"),
    ("Can you read me the news", "from this morning?"),
    ("What is the tallest mountain", "in Africa?"),
    ("I want to start running", "but my knees hurt."),
    ("Tell me about the planets", "closest to the sun."),
    ("Should I take an umbrella", "when I go out today?"),
    ("Find me a cheap hotel", "near the station."),
    ("How many calories are in", "a banana?"),
    ("What is the best time to visit", "Japan for cherry blossoms?"),
    ("My computer is running slowly", "since the last update."),
    ("Do you know any good games", "for a long car trip?"),
    ("I am going to Paris next week,", "what should I see?"),
    ("Please add tomatoes,", "onions and garlic to my list."),
    ("Why do cats purr", "when they are happy?"),
    ("What is the meaning of", "the word serendipity?"),
    ("Can dogs eat", "grapes safely?"),
    ("Call my sister", "after lunch."),
    ("How do I fix a", "flat tyre on my bike?"),
    ("I think I left the oven", "on this morning."),
]
# The test sentences whose first part could itself be a whole request: the text cannot
# tell these pauses from an ending, only the voice (or a longer wait) can.
COULD_END = frozenset({
    "I have a meeting with my boss,", "What does a software engineer do",
    "I need a gift for my mother", "Can you read me the news", "What is the tallest mountain",
    "I want to start running", "Tell me about the planets", "Should I take an umbrella",
    "Find me a cheap hotel", "What is the best time to visit",
    "My computer is running slowly", "Do you know any good games",
    "I am going to Paris next week,", "Please add tomatoes,", "Why do cats purr",
    "Can dogs eat", "Call my sister", "I think I left the oven", "Remind me to buy milk,",
})
TEST_WHOLE = [
    "What is the boiling point of water?", "How do I reset my password?",
    "Tell me a short poem about the sea.", "Who wrote Pride and Prejudice?",
    "What is the speed of light?", "How do I make pancakes?",
    "Why do we dream at night?", "What is the largest ocean on Earth?",
    "Can you set an alarm for seven?", "How does a vaccine work?",
    "What should I name my cat?", "Is it going to rain today?",
    "How many legs does a spider have?", "What is a black hole?",
    "Tell me something interesting about bees.", "How do I tie a tie?",
    "Where is the nearest pharmacy?", "Why is the ocean salty?",
    "What is the square root of sixty four?", "How do I stop snoring?",
    "Recommend a film for tonight.", "What language do they speak in Brazil?",
    "How old is the universe?", "Turn off the lights in the kitchen.",
]
# Fresh split (session 11): written after the last-word cue was chosen, by looking at the
# test split's false endpoints, so that a held-out split was never looked at for it.
FRESH_PAUSED = [
    ("Can you tell me how to", "clean a cast iron pan?"),
    ("What is the best way to store", "fresh herbs in the fridge?"),
    ("I would like to book a table for", "four people on Friday."),
    ("How many hours of sleep does a", "teenager need?"),
    ("Remind me to water the", "tomatoes tomorrow morning."),
    ("Why does bread go stale faster in", "the fridge?"),
    ("What is the difference between weather and", "climate?"),
    ("Could you explain how a", "heat pump works?"),
    ("I need to send a parcel to", "my brother in Spain."),
    ("How do I get a red wine stain out of", "a white shirt?"),
    ("What year did the first", "person climb Everest?"),
    ("Tell me the latest scores from", "the football tonight."),
    ("My washing machine makes a loud noise when", "it spins."),
    ("How much should I tip a", "taxi driver in New York?"),
    ("Is there a quicker way to", "get to the airport?"),
    ("Which planet has the most", "moons?"),
    ("Write a short message to", "my neighbour about the fence."),
    ("What can I make with leftover rice and", "some vegetables?"),
    ("Turn the heating up", "to twenty one degrees."),
    ("Can you recommend a podcast", "about history?"),
    ("I lost my wallet", "on the bus this morning."),
    ("What should I wear to a job interview", "at a bank?"),
    ("Tell me a bedtime story", "about a brave little mouse."),
    ("How do I make my tomatoes", "grow bigger?"),
    ("Book me a taxi", "for six o'clock."),
    ("Where can I buy a new charger", "for my laptop?"),
    ("I am feeling a bit tired today,", "any tips to wake up?"),
    ("Send a message to my wife", "saying I will be late."),
    ("Can cats see", "in the dark?"),
    ("What is a good name for a", "goldfish?"),
    ("How far is it from London to", "Edinburgh by train?"),
    ("Explain why the sky turns red at", "sunset."),
]
FRESH_WHOLE = [
    "How do I boil rice?", "What is the tallest building in the world?",
    "Tell me a riddle.", "Why do onions make you cry?",
    "How many days are in a leap year?", "Who painted the Mona Lisa?",
    "What is the capital of Canada?", "Play some jazz.",
    "How do I unblock a sink?", "What time does the sun set today?",
    "Can you spell necessary?", "Why do birds fly south in winter?",
    "Set an alarm for six thirty.", "What is the weather like in Paris?",
    "How do magnets work?", "Give me a quick breakfast idea.",
]
FRESH_COULD_END = frozenset({
    "Turn the heating up", "Can you recommend a podcast", "I lost my wallet",
    "What should I wear to a job interview", "Tell me a bedtime story",
    "How do I make my tomatoes", "Book me a taxi", "Where can I buy a new charger",
    "I am feeling a bit tired today,", "Send a message to my wife", "Can cats see",
})
# Numbers split (session 18): pauses right after a number, which may or may not be the
# whole figure ("at seven | thirty"), and whole requests that end on one ("Set an alarm
# for seven."): what the number rule (``numbers_can_end``) trades. Written before either
# rule was run on it.
NUMBER_PAUSED = [
    ("Set a timer for fifteen", "minutes please."),
    ("The meeting starts at seven", "thirty tomorrow."),
    ("Turn the heating up to twenty", "one degrees."),
    ("How much is three hundred", "dollars in euros?"),
    ("My flight number is four", "two seven."),
    ("Remind me in ten", "minutes to call Sam."),
    ("What is twelve", "times eleven?"),
    ("Wake me up at six", "fifteen."),
    ("Is a hundred", "degrees too hot for tea?"),
    ("Book a table for two", "at eight o'clock."),
    ("Add five", "apples to my shopping list."),
    ("How far is fifty", "miles in kilometres?"),
    ("Call me back in twenty", "minutes."),
    ("The code is nine", "eight one four."),
    ("Play the top forty", "songs from last year."),
    ("Set the volume to eight", "please."),
]
NUMBER_WHOLE = [
    "Set an alarm for seven.", "What is seven times eight?", "Turn the volume down to three.",
    "How much is ten plus twenty five?", "Count down from ten.",
    "What is the square root of eighty one?", "Wake me up at half past six.",
    "Book a table for four.", "Call me at nine.", "What is a hundred divided by four?",
    "Change the thermostat to twenty one.", "Play track number five.",
    "What is two to the power of ten?", "Set the oven to two hundred.",
    "Can you count to twenty?", "Skip to chapter twelve.",
]
NUMBER_COULD_END = frozenset({
    "Set a timer for fifteen", "The meeting starts at seven", "Turn the heating up to twenty",
    "Remind me in ten", "Wake me up at six", "Book a table for two", "Call me back in twenty",
    "The code is nine", "Play the top forty", "Set the volume to eight",
})
NUMBER_VOICES = ["en-us+m2", "en-gb+f2", "en-gb-scotland+m4", "en-us+f4"]
FRESH_VOICES = ["en-gb-x-gbcwmd", "en-us-nyc", "en-us+m3", "en-gb+f4", "en-029+f2"]
TUNE_VOICES = ["en-us", "en-gb", "en-us+f3", "en-gb+m3"]
TEST_VOICES = ["en-gb-scotland", "en-029", "en-gb-x-rp", "en-us+f2", "en-us+m5",
               "en-gb-x-gbclan"]
PAUSES_MS = [300, 400, 500, 600, 700, 800, 900]
RATES = [150, 165, 180]
LEAD_S, TAIL_S = 0.4, 2.0
VARIANTS = ("separate", "ssml")
# The speculative reply's first audio, this long after the pause (held-end conditions):
# bench_live measured ~300-430 ms p50 (t0 -> first audio) on a fast host state and
# ~600-890 ms on slower ones.
READY_MS = (250, 300, 350, 450, 600, 750)
COMPLETE_READY_MS = 350
PIPELINE_MS = 420  # bench_live, session 11: t0 -> first audio p50 with speculation
PAUSES_TRIED_MS = (128, 160, 200)
LEARN_ORDERS = (1, 2, 3)
LEARN_READY_MS = (250, 300, COMPLETE_READY_MS, 450)


def speak(text: str, voice: str, rate: int, workdir: Path, ssml: bool = False) -> np.ndarray:
    path = workdir / "say.wav"
    cmd = ["espeak-ng", "-v", voice, "-s", str(rate), "-w", str(path)]
    subprocess.run(cmd + (["-m"] if ssml else []) + [text], check=True, capture_output=True)
    audio = load_wav(path)
    loud = np.flatnonzero(np.abs(audio) > 0.01)
    return audio[loud[0]:loud[-1] + 1]


def longest_gap_ms(audio: np.ndarray) -> float:
    loud = np.flatnonzero(np.abs(audio) > 0.01)
    return float(np.max(np.diff(loud))) * 1000 / SAMPLE_RATE if loud.size > 1 else 0.0


@dataclass
class Utterance:
    name: str
    split: str  # "tune", "test", "fresh" or "numbers"
    variant: str  # "separate", "ssml" or "whole"
    text: str
    audio: np.ndarray
    speech_end: int  # the real last voiced sample
    pause_ms: float | None  # the mid-sentence pause as made, None for "said in one go"
    voice: str  # the espeak-ng voice: one speaker of the conversation conditions


def make_corpus(workdir: Path) -> list[Utterance]:
    rng = np.random.default_rng(11)
    out: list[Utterance] = []

    def add(name: str, split: str, variant: str, text: str, speech: np.ndarray,
            pause: float | None, voice: str) -> None:
        audio = np.concatenate([np.zeros(int(LEAD_S * SAMPLE_RATE), np.float32), speech,
                                np.zeros(int(TAIL_S * SAMPLE_RATE), np.float32)])
        audio = audio + (rng.standard_normal(audio.size) * 0.001).astype(np.float32)
        out.append(Utterance(name, split, variant, text, audio,
                             int(LEAD_S * SAMPLE_RATE) + speech.size, pause, voice))

    for split, paused, whole, voices in (("tune", TUNE_PAUSED, TUNE_WHOLE, TUNE_VOICES),
                                         ("test", TEST_PAUSED, TEST_WHOLE, TEST_VOICES),
                                         ("fresh", FRESH_PAUSED, FRESH_WHOLE, FRESH_VOICES),
                                         ("numbers", NUMBER_PAUSED, NUMBER_WHOLE,
                                          NUMBER_VOICES)):
        for i, (a, b) in enumerate(paused):
            voice, pause = voices[i % len(voices)], PAUSES_MS[i % len(PAUSES_MS)]
            rate = RATES[i % len(RATES)]
            first, second = speak(a, voice, rate, workdir), speak(b, voice, rate, workdir)
            gap = np.zeros(int(pause * SAMPLE_RATE / 1000), np.float32)
            add(f"{split}-p{i:02d}-separate", split, "separate", f"{a} | {b}",
                np.concatenate([first, gap, second]), pause, voice)
            joined = speak(f'<speak>{a} <break time="{pause}ms"/> {b}</speak>', voice, rate,
                           workdir, ssml=True)
            add(f"{split}-p{i:02d}-ssml", split, "ssml", f"{a} | {b}", joined,
                round(longest_gap_ms(joined)), voice)
        for i, text in enumerate(whole):
            voice, rate = voices[i % len(voices)], RATES[i % len(RATES)]
            add(f"{split}-w{i:02d}", split, "whole", text, speak(text, voice, rate, workdir),
                None, voice)
    return out


class ReplayedVad:
    """Silero over each utterance once; later passes over the same windows replay them."""

    def __init__(self) -> None:
        self.silero = SileroStream()
        self.cache: dict[str, list[float]] = {}
        self.key = ""
        self.index = 0

    def start(self, key: str) -> None:
        self.key, self.index = key, 0
        self.silero.reset()

    def reset(self) -> None:
        self.index = 0  # the segmenter resets at the start only; start() set the key

    def window(self, samples: np.ndarray) -> float:
        probs = self.cache.setdefault(self.key, [])
        if self.index == len(probs):
            probs.append(self.silero.window(samples))
        p = probs[self.index]
        self.index += 1
        return p


@dataclass(frozen=True)
class Heard:
    text: str
    avg_logprob: float
    last_word_prob: float | None
    cue: ProsodyCue


class Listener:
    """Whisper's transcript and the prosody cue of the utterance so far, once per pause."""

    def __init__(self, asr: object) -> None:
        self.asr = asr
        self.cache: dict[tuple[str, int, int], Heard] = {}

    def at(self, key: str, pause: SpeechPause) -> Heard:
        k = (key, pause.start_sample, pause.end_sample)
        if k not in self.cache:
            heard = self.asr.recognize(pause.audio)  # type: ignore[attr-defined]
            voiced = pause.audio[:pause.end_sample - pause.start_sample]
            self.cache[k] = Heard(heard.text, heard.avg_logprob, heard.last_word_prob,
                                  final_cue(voiced))
        return self.cache[k]


@dataclass(frozen=True)
class Condition:
    label: str
    policy: EndpointPolicy | None  # None: a fixed end silence
    end_ms: int = 600
    confidence: bool = True
    prosody: bool = True
    word: bool = True  # Whisper's probability of the last word
    ready_ms: int | None = None  # the end is held until the reply is ready (None: not held)
    pause_ms: int = 200  # the silence that starts the speculative turn (talk's --pause-ms)
    # The policy learns each speaker's pauses (pipeline/pauses.py): the utterances run as
    # one conversation per voice, in the order this seed shuffles them. None: each alone.
    order: int | None = None
    every_pause: bool = False  # it learns from every pause the user went on after


def run_one(u: Utterance, vad: ReplayedVad, listener: Listener, c: Condition,
            habit: PauseHabit | None = None) -> dict[str, object]:
    seg = UtteranceSegmenter(vad, SegmenterConfig(end_silence_ms=c.end_ms,
                                                  pause_ms=c.pause_ms if c.policy else None))
    vad.start(u.name)
    block = SAMPLE_RATE // 50
    ends: list[UtteranceEnd] = []
    ended = 0  # of them, told to the habit
    margin = int(0.1 * SAMPLE_RATE)  # the segmenter's end may sit a window early
    judged: list[str] = []
    release_at: int | None = None  # where the held end's reply is ready (a stream sample)
    wait_ms = 0
    looked_finished = False  # the words at the last pause made a whole sentence
    taken: UtteranceEnd | None = None  # an end taken before the last word (a false one)
    for i in range(0, u.audio.size, block):
        if release_at is not None and seg.position >= release_at:
            # As LiveTurnTaker: release, and end at once if the wait has already passed.
            seg.release_end()
            release_at = None
            if seg.silence_ms >= wait_ms and (now := seg.end_now()) is not None:
                ends.append(now)
        for ev in seg.feed(u.audio[i:i + block]):
            if isinstance(ev, SpeechPause) and c.policy is not None:
                h = listener.at(u.name, ev)
                policy = c.policy if habit is None else habit.policy(c.policy)
                d = policy.decide(h.text, h.avg_logprob if c.confidence else None,
                                    h.cue if c.prosody else None,
                                    h.last_word_prob if c.word else None)
                word = "-" if h.last_word_prob is None else f"{h.last_word_prob:.2f}"
                judged.append(f"{h.text!r} lp {h.avg_logprob:.2f} word {word} fall "
                              f"{h.cue.fall_st:+.1f} slope {h.cue.slope_st_s:+.1f} -> "
                              f"{d.reason} {d.wait_ms}")
                held, wait_ms = c.ready_ms is not None, d.wait_ms
                looked_finished = d.looks_finished
                seg.end_after(d.wait_ms, held=held)
                if held:
                    release_at = ev.detected_sample + c.ready_ms * SAMPLE_RATE // 1000  # type: ignore[operator]
            elif isinstance(ev, UtteranceEnd):
                ends.append(ev)
            elif isinstance(ev, SpeechResumed):
                if habit is not None and (looked_finished or c.every_pause):
                    habit.went_on(ev.pause_ms)  # a near miss: the user went on
                looked_finished = False
            elif isinstance(ev, SpeechStart) and habit is not None and taken is not None:
                # The rest of the request cut the reply, and its words were carried over
                # (LiveTurnTaker does the same when a cut turn's words are rejoined).
                habit.went_on((ev.sample - taken.end_sample) * 1000 / SAMPLE_RATE)
                taken = None
        while habit is not None and len(ends) > ended:
            habit.utterance_ended()
            ended += 1
            if ends[-1].end_sample < u.speech_end - margin:
                taken = ends[-1]
    ends += [e for e in seg.flush() if isinstance(e, UtteranceEnd)]
    if habit is not None and len(ends) > ended:
        habit.utterance_ended()
    false_end = any(e.end_sample < u.speech_end - margin for e in ends)
    final = ends[-1] if ends else None
    wait = None if final is None else (final.detected_sample - u.speech_end) * 1000 / SAMPLE_RATE
    return {"name": u.name, "split": u.split, "variant": u.variant, "text": u.text,
            "pause_ms": u.pause_ms, "false_endpoint": false_end,
            "endpoint_wait_ms": None if wait is None else round(wait, 1), "judged": judged}


def run_condition(corpus: list[Utterance], vad: ReplayedVad, listener: Listener,
                  c: Condition) -> list[dict[str, object]]:
    """Every utterance under ``c``: each alone, or (``c.order``) as one conversation per
    speaker, in a shuffled order, the policy learning the speaker's pauses as it goes."""
    if c.order is None:
        return [run_one(u, vad, listener, c) for u in corpus]
    rows: dict[str, dict[str, object]] = {}
    for talk in speaker_orders(corpus, c.order):
        habit = PauseHabit()
        for u in talk:
            rows[u.name] = run_one(u, vad, listener, c, habit)
    return [rows[u.name] for u in corpus]


def speaker_orders(corpus: list[Utterance], order: int) -> list[list[Utterance]]:
    """One conversation per (split, voice) in corpus order, each speaker's utterances
    shuffled by seed ``order``. One generator draws for every speaker in turn, so a
    speaker's order depends on the whole corpus: bench_endpoint_live speaks this too."""
    rng = np.random.default_rng(order)
    out = []
    for key in dict.fromkeys((u.split, u.voice) for u in corpus):
        talk = [u for u in corpus if (u.split, u.voice) == key]
        out.append([talk[i] for i in rng.permutation(len(talk))])
    return out


# The complete wait tried beside the default where the reply is ready early: the default
# until session 21 (450 since; bench_live measured both on the audio, docs/live.md).
OTHER_COMPLETE_MS = 500


def conditions() -> list[Condition]:
    old = EndpointPolicy(complete_ms=250, default_ms=800, incomplete_ms=1100)
    out = [Condition("fixed 600 ms", None, 600), Condition("fixed 1000 ms", None, 1000),
           Condition("policy 250/800/1100, text only", old, confidence=False, prosody=False,
                     word=False)]
    # The grid the thresholds were chosen on (sessions 8-9), without the last-word cue.
    for complete in (250, 400, 500, 600):
        for default in (800, 1000):
            p = replace(old, complete_ms=complete, default_ms=default)
            was = " (the old default)" if p == old else ""
            out.append(Condition(f"policy {complete}/{default}/1100, text + confidence{was}",
                                 p, prosody=False, word=False))
            out.append(Condition(f"policy {complete}/{default}/1100, text + confidence + "
                                 f"pitch ({p.final_fall_st:g} st)", p, word=False))
    for complete, default in ((250, 800), (500, 1000)):
        for fall in (-1.0, -1.5, -2.5, -3.0):
            p = replace(old, complete_ms=complete, default_ms=default, final_fall_st=fall)
            out.append(Condition(f"policy {complete}/{default}/1100, text + confidence + "
                                 f"pitch ({fall:g} st)", p, word=False))
    shipped = EndpointPolicy()
    out.append(Condition(f"policy {shipped.complete_ms}/{shipped.default_ms}/"
                         f"{shipped.incomplete_ms}, text + confidence + pitch "
                         f"({shipped.final_fall_st:g} st) + last word (the default)", shipped))
    for ready in READY_MS:
        out.append(Condition(f"the default, held until the reply is ready {ready} ms after "
                             "the pause", shipped, ready_ms=ready))
    # The same run without the last-word cue (session 10's default): what the cue buys.
    out.append(Condition(f"no last-word cue, held until the reply is ready "
                         f"{COMPLETE_READY_MS} ms after the pause", shipped,
                         ready_ms=COMPLETE_READY_MS, word=False))
    # The trade `--complete-ms` offers where the reply is ready early (~350 ms after the
    # pause on the session-9 host): a longer wait after a finished sentence.
    for complete in (600, 700, 800, 900):
        out.append(Condition(f"--complete-ms {complete}, held until the reply is ready "
                             f"{COMPLETE_READY_MS} ms after the pause",
                             replace(shipped, complete_ms=complete),
                             ready_ms=COMPLETE_READY_MS))
    # --pause-ms, with the pipeline's time from the pause to the first audio fixed at what
    # talk measured in session 11 (t0 -> first audio p50): a shorter pause starts the turn,
    # and so ends the hold, that much sooner after the last word.
    for pause in PAUSES_TRIED_MS:
        out.append(Condition(f"--pause-ms {pause}, held until the reply is ready "
                             f"{PIPELINE_MS} ms after the pause", shipped,
                             ready_ms=PIPELINE_MS, pause_ms=pause))
    # A number that ends a finished question or a falling statement ends the turn
    # (numbers split, session 18).
    numbers = replace(shipped, numbers_can_end=not shipped.numbers_can_end)
    tag = "numbers can end" if numbers.numbers_can_end else "a number never ends"
    out.append(Condition(f"{tag}, not held", numbers))
    for ready in (COMPLETE_READY_MS, 450):
        out.append(Condition(f"{tag}, held until the reply is ready {ready} ms after the "
                             "pause", numbers, ready_ms=ready))
    # The policy learning each speaker's pauses (pipeline/pauses.py), three orders of the
    # same conversations.
    # Ready 250-300 ms after the pause is where talk's replies were on the AVX-512 hosts of
    # sessions 17-20, where the complete wait, not the reply, set the latency; there the
    # learning is also tried under the other first wait (OTHER_COMPLETE_MS).
    for ready in LEARN_READY_MS:
        for order in LEARN_ORDERS:
            out.append(Condition(f"learns the speaker's pauses (order {order}), held until "
                                 f"the reply is ready {ready} ms after the pause", shipped,
                                 ready_ms=ready, order=order))
            if ready in (COMPLETE_READY_MS, 450):
                out.append(Condition(f"learns the speaker's pauses from every pause (order "
                                     f"{order}), held until the reply is ready {ready} ms "
                                     "after the pause", shipped, ready_ms=ready, order=order,
                                     every_pause=True))
            else:
                out.append(Condition(f"--complete-ms {OTHER_COMPLETE_MS} + learns the speaker's "
                                     f"pauses (order {order}), held until the reply is ready "
                                     f"{ready} ms after the pause",
                                     replace(shipped, complete_ms=OTHER_COMPLETE_MS),
                                     ready_ms=ready, order=order))
    for ready in LEARN_READY_MS[:2]:
        out.append(Condition(f"--complete-ms {OTHER_COMPLETE_MS}, held until the reply is ready "
                             f"{ready} ms after the pause",
                             replace(shipped, complete_ms=OTHER_COMPLETE_MS),
                             ready_ms=ready))
    return out


def mean_ms(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def quantile_ms(values: list[float], q: float) -> float | None:
    return values[min(len(values) - 1, int(len(values) * q))] if values else None


def quantile(values: list[float], q: float) -> str:
    v = quantile_ms(values, q)
    return "-" if v is None else f"{v:.0f}"


def mean(values: list[float]) -> str:
    m = mean_ms(values)
    return "-" if m is None else f"{m:.0f}"


def waits(rs: list[dict[str, object]]) -> list[float]:
    """Sorted endpoint waits (ms), false endpoints left out."""
    return sorted(float(r["endpoint_wait_ms"]) for r in rs  # type: ignore[arg-type]
                  if r["endpoint_wait_ms"] is not None and not r["false_endpoint"])


def first_part_could_end(first: str) -> bool:
    """Could these words before the pause be a whole request by themselves?"""
    return first in COULD_END | FRESH_COULD_END | NUMBER_COULD_END


def could_end(row: dict[str, object]) -> bool:
    """Could the words before the pause be a whole request by themselves?"""
    return first_part_could_end(str(row["text"]).split(" | ")[0])


def mid_sentence(row: dict[str, object]) -> bool:
    """Paused mid-sentence: every ssml utterance, and the separate ones whose first part
    could not end a request (the rest are two sentences, each said as finished)."""
    return not (row["variant"] == "separate" and could_end(row))


def table(results: dict[str, list[dict[str, object]]], split: str) -> str:
    lines = ["| endpoint | false: separate | false: ssml | false: both "
             "| false where part 1 could end | false: mid-sentence "
             "| wait p50 / mean / p95 (whole) | wait p95 (all) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]

    def rate(rs: list[dict[str, object]]) -> str:
        false = sum(bool(r["false_endpoint"]) for r in rs)
        return f"{false}/{len(rs)} ({100 * false / max(1, len(rs)):.0f} %)"

    for label, rows in results.items():
        rows = [r for r in rows if r["split"] == split]
        sep = [r for r in rows if r["variant"] == "separate"]
        ssml = [r for r in rows if r["variant"] == "ssml"]
        whole = waits([r for r in rows if r["variant"] == "whole"])
        could = [r for r in sep + ssml if could_end(r)]
        mid = [r for r in sep + ssml if mid_sentence(r)]
        lines.append(f"| {label} | {rate(sep)} | {rate(ssml)} | {rate(sep + ssml)} "
                     f"| {rate(could)} | {rate(mid)} "
                     f"| {quantile(whole, 0.5)} / {mean(whole)} / {quantile(whole, 0.95)} "
                     f"| {quantile(waits(rows), 0.95)} |")
    return "\n".join(lines)


HELD = re.compile(r"the default, held until the reply is ready (\d+) ms")
NO_WORD = re.compile(r"no last-word cue, held until the reply is ready (\d+) ms")
COMPLETE = re.compile(r"--complete-ms (\d+), held until the reply is ready (\d+) ms")
PAUSE = re.compile(r"--pause-ms (\d+), held until the reply is ready (\d+) ms")
NUMBERS = re.compile(r"(numbers can end|a number never ends), (?:not held|held until the "
                     r"reply is ready (\d+) ms)")
LEARN = re.compile(r"(?:--complete-ms (\d+) \+ )?learns the speaker's pauses( from every "
                   r"pause)? \(order (\d+)\), held until the reply is ready (\d+) ms")
POLICY = re.compile(r"policy (\d+)/(\d+)/\d+, text( only| \+ confidence)"
                    r"(?: \+ pitch \((-?[\d.]+) st\))?")


def point(label: str, false_pct: float, wait_ms: float | None) -> EndpointPoint:
    """The chart's point for a condition, its tag and series read back from its label (so
    that --report-only can draw an endpoint.json written before)."""
    tag, series = label, None
    if m := re.match(r"fixed (\d+) ms", label):
        tag = f"fixed {m[1]}"
    elif m := HELD.match(label):
        tag, series = f"held {m[1]}", "the default, end held until the reply is ready N ms"
    elif m := NO_WORD.match(label):
        tag = f"held {m[1]}, no word cue"
    elif m := PAUSE.match(label):
        tag = f"pause {m[1]}, ready {m[2]}"
        series = f"--pause-ms N, end held until the reply is ready {m[2]} ms after it"
    elif m := NUMBERS.match(label):
        tag = f"{'numbers end' if m[1] == 'numbers can end' else 'no number ends'}" + (
            f", held {m[2]}" if m[2] else "")
    elif m := LEARN.match(label):
        every = " every" if m[2] else ""
        tag = f"learns{every} o{m[3]}, held {m[4]}" + (f", c{m[1]}" if m[1] else "")
        if m[3] == "1" and not every and not m[1]:
            series = ("learns the speaker's pauses (order 1), end held until the reply is "
                      "ready N ms")
    elif m := COMPLETE.match(label):
        tag = f"complete {m[1]}" + ("" if int(m[2]) == COMPLETE_READY_MS else f", held {m[2]}")
        if int(m[2]) == COMPLETE_READY_MS:
            series = f"--complete-ms N, end held until the reply is ready {m[2]} ms"
    elif m := POLICY.match(label):
        cues = "text" if m[3] == " only" else "+conf" if m[4] is None else f"+pitch {m[4]}"
        if "last word" in label:
            cues = "+pitch+word"
        tag = f"{m[1]}/{m[2]} {cues}"
    shipped = label.endswith("(the default)")
    if shipped or label.endswith("(the old default)"):
        tag += " (default)" if shipped else " (old default)"
    return EndpointPoint(label, tag, false_pct, wait_ms, series, highlight=shipped)


def summary(results: dict[str, list[dict[str, object]]], split: str
            ) -> list[EndpointPoint]:
    """Per condition: false endpoints (% of the paused utterances) and the mean wait on whole
    questions, as the table's "false: both" and "wait mean (whole)" columns."""
    out = []
    for label, rows in results.items():
        if (m := LEARN.match(label)) and (m[1] or m[2] or m[3] != "1"):
            continue  # the picture has one order of the plain rule; the tables have all
        rows = [r for r in rows if r["split"] == split]
        paused = [r for r in rows if r["variant"] in ("separate", "ssml")]
        false_pct = 100 * sum(bool(r["false_endpoint"]) for r in paused) / max(1, len(paused))
        out.append(point(label, false_pct, mean_ms(waits([r for r in rows
                                                          if r["variant"] == "whole"]))))
    return out


def write_report(out: Path, counts: dict[str, dict[str, int]],
                 results: dict[str, list[dict[str, object]]]) -> str:
    """endpoint.md and endpoint.png in ``out`` from a run's results; returns the markdown."""
    t = counts["test"]
    draw(summary(results, "test"), out / "endpoint.png",
         title=f"Test split: {t['separate'] + t['ssml']} paused utterances, {t['whole']} whole "
         "questions; down and left is better")
    report = (
        "# Endpoint policy vs fixed silences\n\n"
        "![false endpoints against the wait after the last word, test split](endpoint.png)"
        "\n\n"
        f"## Test split (held out: {t['separate']} paused sentences x 2 variants, "
        f"{t['whole']} whole; {len(TEST_VOICES)} espeak-ng voices)\n\n"
        f"{table(results, 'test')}\n\n"
        "## Tune split (the sentences the rules and thresholds were chosen on)\n\n"
        f"{table(results, 'tune')}\n\n"
        + (f"## Fresh split (held out from the last-word cue: written after it was chosen "
           f"on the test split's false endpoints; {len(FRESH_VOICES)} other voices)\n\n"
           f"{table(results, 'fresh')}\n\n" if counts.get("fresh") else "")
        + (f"## Numbers split (pauses right after a number, whole requests ending on one; "
           f"{len(NUMBER_VOICES)} other voices)\n\n"
           f"{table(results, 'numbers')}\n\n" if counts.get("numbers") else "")
        + "false: paused utterances ended before their last word (separate: fragments said "
        "as two utterances; ssml: one utterance with a break). mid-sentence: every paused "
        "utterance but a whole request said as a finished sentence of its own (the separate "
        "variant where part 1 could end: 'Call my sister.' ... 'after lunch.'), where the "
        "words, the falling voice and the silence are those of a finished request. Waits in "
        "ms after the real last word, false endpoints left out. Policy labels: "
        "complete/default/incomplete ms; confidence: Whisper's average log-probability; "
        "last word: its probability of the last word. The picture: x the wait mean (whole), "
        "y false: both, of the test split.\n")
    (out / "endpoint.md").write_text(report)
    return report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "endpoint")
    ap.add_argument("--report-only", type=Path, metavar="DIR",
                    help="write endpoint.md and endpoint.png again from DIR/endpoint.json "
                    "(a finished run), run nothing")
    ap.add_argument("--only", metavar="REGEX",
                    help="run only the conditions whose label matches REGEX (e.g. 'learns|"
                    "ready 350'; the report then has just those rows)")
    args = ap.parse_args()
    if args.report_only is not None:
        saved = args.report_only / "endpoint.json"
        if not saved.is_file():
            ap.error(f"--report-only: no {saved}")
        data = json.loads(saved.read_text())
        print(write_report(args.report_only, data["corpus"], data["results"]))
        print(f"report: {args.report_only / 'endpoint.md'} (picture: endpoint.png)")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)

    from pipeline.asr import WhisperAsr
    from services import models

    print("making the corpus with espeak-ng ...", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = make_corpus(Path(tmp))
    counts = {s: {v: sum(u.split == s and u.variant == v for u in corpus)
                  for v in ("separate", "ssml", "whole")}
              for s in ("tune", "test", "fresh", "numbers")}
    print(f"corpus: {counts}", flush=True)
    print("loading Whisper base ...", flush=True)
    asr = WhisperAsr(models.whisper_model_dir())
    asr.load()
    vad, listener = ReplayedVad(), Listener(asr)
    results: dict[str, list[dict[str, object]]] = {}
    for c in conditions():
        if args.only is not None and not re.search(args.only, c.label):
            continue
        print(f"{c.label} ...", flush=True)
        results[c.label] = run_condition(corpus, vad, listener, c)

    (args.out / "endpoint.json").write_text(json.dumps(
        {"corpus": counts, "results": results}, indent=2) + "\n")
    print(write_report(args.out, counts, results))
    print(f"report: {args.out / 'endpoint.md'} (picture: endpoint.png; every utterance: "
          "endpoint.json)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
