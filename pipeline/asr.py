"""Speech recognition: faster-whisper on a local CTranslate2 model folder.

Blocking by design: the turn runner calls ``transcribe`` through ``asyncio.to_thread``.
The model folder is found by the caller (``services.models`` assembles the bundled Whisper
base); this module never looks anything up on a hub.

**The fitted window.** Whisper was trained on 30 s windows and faster-whisper always pads
the mel features to 3000 frames, so a 3 s question costs the encoder as much as a 30 s one
(its ``chunk_length`` option does not change that). CTranslate2's Whisper accepts shorter
features, and the encoder's cost falls with them. ``window="fitted"`` computes the features
with faster-whisper's own extractor, pads them with ``pad_s`` of silence after the audio
(Whisper needs that silence to close its transcript: with too little it repeats the
sentence until the length limit) and runs CTranslate2's ``generate`` on that. Audio whose
fitted window would not be shorter than 30 s goes through faster-whisper's normal 30 s
path (``window="full"``, kept for comparison: ``--asr-window full``).

**A loop is ended where it began, or redone with more silence.** ~2 % of the question
WAVs cut as the live path cuts them loop on the fitted window ("Why is the sky blue? Why
is the sky blue? Why is"), and more in talk (up to 12 of ~70 turns in one run,
docs/live.md). When the tokens repeat the transcript from its first one and Whisper gave
the end token a real chance where the repeat began (``LOOP_END_MIN_PROB``), the text up
to there is the transcript: no second decode (``LoopEnd``). Otherwise the fitted window
again with more silence (``RETRY_PADS``) costs what the first decode did and gave the
same text as the 30 s window on the looped cuts measured, which costs ~5x as much
(``scripts/bench_asr.py retry``); only a decode that loops every time goes to the 30 s
path.

**The decode cap.** Both paths stop after a number of tokens proportional to the audio
length, so a repetition loop can never cost more than a few hundred milliseconds.

**The speech gate** (``pipeline.speech_gate``) runs Silero before Whisper and checks
Whisper's confidence after it; a rejected utterance transcribes as "" and the turn ends
as "heard no speech" without an LLM call.
"""

from __future__ import annotations

import logging
import math
import re
import time
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from pipeline.audio_in import SAMPLE_RATE  # what Whisper expects; load_wav delivers it
from pipeline.speech_gate import GateVerdict, SpeechEvidence, SpeechGate

if TYPE_CHECKING:
    from faster_whisper import WhisperModel

log = logging.getLogger(__name__)

FRAMES_PER_SECOND = 100  # mel frames (hop 160 samples)
FULL_WINDOW_FRAMES = 3000  # Whisper's trained window: 30 s
MAX_DECODE_TOKENS = 448  # Whisper's text context
_WARMUP_SECONDS = 1.0
_WARM_SAMPLES = 4800  # keep_warm: 0.3 s

Window = Literal["fitted", "full"]
WINDOWS: tuple[Window, ...] = ("fitted", "full")

# Silence after the audio in the fitted window. Measured with `scripts/bench_asr.py pad`
# on 18 questions (docs/results.md): +0.5 s and +1 s made Whisper repeat the question or
# drop words, +1.5 s and +2 s still looped on 1 of 18, +2.5 s to +4 s were as exact as the
# 30 s window. 3 s is the middle of that band and costs ~15 ms more than 2 s.
DEFAULT_PAD_S = 3.0
# The fitted decodes after a loop, in turn, before the 30 s window: more silence after the
# audio (`scripts/bench_asr.py retry`, docs/results.md).
RETRY_PADS = (4.0, 6.0)
# Decode cap: fast speech is ~3.5 words/s, ~5 tokens/s; 10 tokens per second of audio
# (plus a floor for one-word turns) never cut a real question and bounds a loop.
TOKENS_PER_SECOND = 10.0
MIN_DECODE_TOKENS = 24
# faster-whisper's own loop detector: gzip ratio of a normal sentence is ~1-1.6. Short
# loops ("Why is the sky blue? Why is the sky blue? Why") compress too little to trip it,
# so a repeated run of REPEAT_WORDS words counts as a loop too.
MAX_COMPRESSION_RATIO = 2.4
REPEAT_WORDS = 4
# A loop that repeats the transcript from its first token ends where the repeat began,
# without a second decode, when ending there was a real option to Whisper: the end
# token's probability at that step. On the 18 looped decodes measured (talk's own
# recordings, `scripts/bench_asr.py heard`; the live-like WAV cuts, `retry`;
# docs/results.md) every one repeated from its first token, the end token had 0.23-0.48,
# and the words before the repeat were those of the 30 s window.
LOOP_END_MIN_PROB = 0.1


@dataclass(frozen=True)
class LoopEnd:
    """A looped decode cut where the repeat began: what Whisper said before repeating."""

    tokens: int  # tokens before the repeat
    text: str
    end_prob: float  # Whisper's probability of ending there instead of repeating
    avg_logprob: float  # of the tokens kept and the end token, as faster-whisper counts
    last_word_prob: float | None


@dataclass(frozen=True)
class Transcript:
    """One utterance's text and how it was obtained (for the gate, tests and benches)."""

    text: str
    window: str  # "fitted", "full" or "gated" (Whisper not run)
    frames: int = 0  # mel frames the encoder saw
    no_speech_prob: float = 0.0
    avg_logprob: float = 0.0
    tokens: int = 0
    raw_text: str = ""  # what Whisper said before the gate's verdict
    fell_back: str = ""  # why the first fitted decode was redone ("" if it was not)
    # Whisper's probability of the last word (its least likely token), fitted window only:
    # a fragment's last word misheard into a sentence ("if I only have" -> "harm?") is
    # one Whisper was unsure of, though the rest of the words were clear.
    last_word_prob: float | None = None
    gate: GateVerdict | None = None
    evidence: SpeechEvidence | None = field(default=None, repr=False)
    # Set by a fitted decode whose tokens repeat from the first one (``loop_start``).
    loop_end: LoopEnd | None = field(default=None, repr=False)
    cut_at_loop: bool = False  # the text is ``loop_end``'s: no second decode was needed

    @property
    def redone(self) -> str:
        """How a looped first decode was mended: "cut" (where the repeat began), "fitted"
        (decoded again with more silence), "full" (30 s window) or "" (it did not loop)."""
        if not self.fell_back:
            return ""
        return "cut" if self.cut_at_loop else self.window


def fitted_frames(samples: int, pad_s: float) -> int:
    """Mel frames for ``samples`` of audio plus ``pad_s`` of silence; even (conv stride 2)."""
    frames = math.ceil(samples / (SAMPLE_RATE / FRAMES_PER_SECOND) + pad_s * FRAMES_PER_SECOND)
    return frames + (frames & 1)


def decode_cap(samples: int) -> int:
    """Most new tokens worth decoding for ``samples`` of audio."""
    seconds = samples / SAMPLE_RATE
    return min(MAX_DECODE_TOKENS // 2, max(MIN_DECODE_TOKENS,
                                           math.ceil(seconds * TOKENS_PER_SECOND)))


def fit_features(features: np.ndarray, frames: int) -> np.ndarray:
    """``features`` (n_mels, n) cut or padded with zeros to ``frames`` columns.

    Zero is what faster-whisper's own ``pad_or_trim`` pads with on the way to 3000 frames,
    so the fitted window differs from the full one only in where it stops.
    """
    n_mels, have = features.shape
    if have >= frames:
        return np.ascontiguousarray(features[:, :frames], dtype=np.float32)
    out = np.zeros((n_mels, frames), dtype=np.float32)
    out[:, :have] = features
    return out


def token_probability(logits: np.ndarray, token: int) -> float:
    """Softmax probability of ``token`` among one decoding step's logits."""
    z = logits.astype(np.float64).reshape(-1)
    top = float(z.max())
    return float(np.exp(z[token] - top) / np.exp(z - top).sum())


_PUNCTUATION_PIECE = re.compile(r"^[\s.,?!;:…\-–—\"')\]]*$")


def last_word_probability(pieces: list[str], probs: list[float]) -> float | None:
    """The least probability among the tokens of the last word, trailing punctuation left
    out; ``pieces`` are the decoded tokens (a word's first token starts with a space).
    None when there is no word."""
    i = len(pieces)
    while i > 0 and _PUNCTUATION_PIECE.match(pieces[i - 1]):
        i -= 1
    word: list[float] = []
    while i > 0:
        i -= 1
        word.append(probs[i])
        if pieces[i].startswith(" "):
            break
    return min(word) if word else None


def loop_start(tokens: list[int]) -> int | None:
    """Where a decode began repeating itself from its first token: the least ``k`` (at
    least 2) with ``tokens[k:]``, two tokens or more, a repeat of ``tokens[:k]`` (the last
    repeat may stop short). None when the tokens do not loop that way."""
    for k in range(2, len(tokens) - 1):
        if all(tokens[i] == tokens[i % k] for i in range(k, len(tokens))):
            return k
    return None


def compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / max(1, len(zlib.compress(data)))


def repeated_phrase(text: str, n: int = REPEAT_WORDS) -> str:
    """The first run of ``n`` words that occurs twice in ``text`` ("" if none)."""
    words = re.sub(r"[^\w' ]", " ", text.lower()).split()
    seen: set[tuple[str, ...]] = set()
    for i in range(len(words) - n + 1):
        gram = tuple(words[i:i + n])
        if gram in seen:
            return " ".join(gram)
        seen.add(gram)
    return ""


class WhisperAsr:
    """One Whisper model, loaded once, transcribing whole utterances."""

    engine = "local"  # in this process (pipeline.wyoming_asr: on a Wyoming server)

    def __init__(self, model_dir: Path, *, language: str | None = "en", threads: int = 2,
                 beam_size: int = 1, compute_type: str = "int8", window: Window = "fitted",
                 pad_s: float = DEFAULT_PAD_S, gate: SpeechGate | None | bool = True) -> None:
        if window not in WINDOWS:
            raise ValueError(f"window must be one of {WINDOWS}, not {window!r}")
        self.model_dir = Path(model_dir)
        self.language = language
        self.threads = threads
        self.beam_size = beam_size
        self.compute_type = compute_type
        self.window: Window = window
        self.pad_s = pad_s
        self.gate: SpeechGate | None = (SpeechGate() if gate is True
                                        else None if gate is False else gate)
        self._model: WhisperModel | None = None
        self._tokenizers: dict[str, Any] = {}

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self) -> None:
        """Load the model (once) and run a warm-up so the first real turn is not slower."""
        if self._model is not None:
            return
        from faster_whisper import WhisperModel

        started = time.monotonic()
        # local_files_only: a folder path never downloads, but be explicit on a closed net.
        self._model = WhisperModel(str(self.model_dir), device="cpu",
                                   compute_type=self.compute_type, cpu_threads=self.threads,
                                   local_files_only=True)
        if self.gate is not None:
            self.gate.load()
        loaded = time.monotonic()
        # The first call pays for allocating the encoder buffers; do it before "ready".
        # The gate would (rightly) refuse the silent warm-up, so it is bypassed.
        self.recognize(np.zeros(int(SAMPLE_RATE * _WARMUP_SECONDS), dtype=np.float32),
                       gated=False)
        log.info("whisper loaded from %s in %.0f ms (+%.0f ms warm-up)", self.model_dir,
                 (loaded - started) * 1000, (time.monotonic() - loaded) * 1000)

    def transcribe(self, audio: np.ndarray) -> str:
        """Text of one utterance (float32 mono 16 kHz), "" if it holds no speech; blocking."""
        return self.recognize(audio).text

    def recognize(self, audio: np.ndarray, *, window: Window | None = None,
                  gated: bool = True) -> Transcript:
        """``transcribe`` with the details: window used, Whisper's confidence, gate verdict."""
        samples = np.asarray(audio, dtype=np.float32).reshape(-1)
        if samples.size == 0:
            return Transcript("", "gated", gate=GateVerdict(False, "empty audio"))
        if self._model is None:
            self.load()
        gate = self.gate if gated else None
        evidence = None
        if gate is not None:
            verdict, evidence = gate.before_asr(samples)
            if not verdict.speech:
                log.info("speech gate: %s", verdict.reason)
                return Transcript("", "gated", gate=verdict, evidence=evidence)
        result = self._run(samples, window or self.window)
        if gate is None:
            return result
        verdict = gate.after_asr(result.text, result.no_speech_prob, result.avg_logprob)
        if not verdict.speech:
            log.info("speech gate: %s (heard %r)", verdict.reason, result.text)
        return replace(result, text=result.text if verdict.speech else "",
                       raw_text=result.text, gate=verdict, evidence=evidence)

    def _run(self, samples: np.ndarray, window: Window) -> Transcript:
        if window == "fitted":
            frames = fitted_frames(samples.size, self.pad_s)
            if frames < FULL_WINDOW_FRAMES:
                fitted = self._fitted(samples, frames)
                why = self._looks_broken(fitted, samples.size)
                if not why:
                    return fitted
                return self._mend(fitted, samples, why)
        return self._full(samples)

    def _mend(self, looped: Transcript, samples: np.ndarray, why: str) -> Transcript:
        """A looped first decode: cut where the repeat began, else decoded again."""
        return self._end_at_loop(looped, why, samples.size) or self._redo(samples, why)

    def _end_at_loop(self, looped: Transcript, why: str, samples: int) -> Transcript | None:
        """The looped decode up to where it began repeating, if Whisper could have ended
        there (``LOOP_END_MIN_PROB``) and what is left does not loop: costs no decode."""
        end = looped.loop_end
        if end is None or end.end_prob < LOOP_END_MIN_PROB:
            return None
        cut = replace(looped, text=end.text, raw_text=end.text, tokens=end.tokens,
                      avg_logprob=end.avg_logprob, last_word_prob=end.last_word_prob,
                      fell_back=why, cut_at_loop=True)
        if self._looks_broken(cut, samples):
            return None
        log.info("fitted window: %s; cut where the repeat began (end p %.2f)", why,
                 end.end_prob)
        return cut

    def _redo(self, samples: np.ndarray, why: str) -> Transcript:
        """A looped fitted decode done again: with more silence (``RETRY_PADS``), then on
        the 30 s window if every one of those loops too."""
        tried = fitted_frames(samples.size, self.pad_s)
        for pad in RETRY_PADS:
            frames = fitted_frames(samples.size, pad)
            if frames <= tried or frames >= FULL_WINDOW_FRAMES:
                continue
            tried = frames
            log.info("fitted window: %s; redoing with %.0f s of silence", why, pad)
            again = self._fitted(samples, frames)
            if not self._looks_broken(again, samples.size):
                return replace(again, fell_back=why)
        log.info("fitted window: %s; redoing on the 30 s window", why)
        return replace(self._full(samples), fell_back=why)

    @staticmethod
    def _looks_broken(result: Transcript, samples: int) -> str:
        if result.tokens >= decode_cap(samples):
            return f"decode hit the {decode_cap(samples)}-token cap"
        if compression_ratio(result.text) > MAX_COMPRESSION_RATIO:
            return f"repetitive text (gzip ratio {compression_ratio(result.text):.1f})"
        if phrase := repeated_phrase(result.text):
            return f"repetitive text ({phrase!r} twice)"
        return ""

    def _tokenizer(self, language: str) -> Any:
        if language not in self._tokenizers:
            from faster_whisper.tokenizer import Tokenizer

            assert self._model is not None
            self._tokenizers[language] = Tokenizer(
                self._model.hf_tokenizer, self._model.model.is_multilingual,
                task="transcribe", language=language)
        return self._tokenizers[language]

    def keep_warm(self) -> None:
        """Encoder and decoder on 0.3 s of silence, two tokens (``pipeline.warm``: after a
        few seconds idle the next transcription here was up to 1.5x slower)."""
        if self._model is not None:
            silence = np.zeros(_WARM_SAMPLES, dtype=np.float32)
            self._fitted(silence, fitted_frames(silence.size, 0.0), max_tokens=2)

    def _fitted(self, samples: np.ndarray, frames: int,
                max_tokens: int | None = None) -> Transcript:
        """CTranslate2's generate on features cut to the utterance (+ padding)."""
        import ctranslate2
        from faster_whisper.transcribe import get_suppressed_tokens

        assert self._model is not None
        model = self._model
        # The extractor appends one hop and yields one frame more than the audio holds;
        # faster-whisper drops that last frame too (content_frames = n - 1).
        features = model.feature_extractor(samples)[:, :-1]
        storage = ctranslate2.StorageView.from_array(
            fit_features(features, frames)[np.newaxis])
        language = self.language or "en"
        if self.language is None and model.model.is_multilingual:
            language = model.model.detect_language(storage)[0][0][0][2:-2]
        tokenizer = self._tokenizer(language)
        # Same prompt and options as faster-whisper's transcribe(without_timestamps=True,
        # temperature=0): start-of-transcript, language, task, no timestamps.
        prompt = [*tokenizer.sot_sequence, tokenizer.no_timestamps]
        result = model.model.generate(
            storage, [prompt], beam_size=self.beam_size, patience=1.0,
            max_length=len(prompt) + (max_tokens or decode_cap(samples.size)),
            return_scores=True, return_no_speech_prob=True, suppress_blank=True,
            # The logits of each step (a few ms): the last word's probability.
            return_logits_vocab=True,
            suppress_tokens=list(get_suppressed_tokens(tokenizer, [-1])),
            max_initial_timestamp_index=50)[0]
        tokens = list(result.sequences_ids[0])
        # As faster-whisper: scores are length-normalized sums; +1 counts the end token.
        avg_logprob = result.scores[0] * len(tokens) / (len(tokens) + 1)
        text = tokenizer.decode(tokens).strip()
        probs = [token_probability(np.asarray(step), t)
                 for step, t in zip(result.logits[0], tokens, strict=False)]
        pieces = [tokenizer.decode([t]) for t in tokens]
        word_prob = last_word_probability(pieces, probs)
        loop_end = None
        k = loop_start(tokens)
        if k is not None and k < len(result.logits[0]):
            end_p = token_probability(np.asarray(result.logits[0][k]), tokenizer.eot)
            logp = sum(math.log(max(p, 1e-12)) for p in [*probs[:k], end_p]) / (k + 1)
            loop_end = LoopEnd(k, tokenizer.decode(tokens[:k]).strip(), end_p, logp,
                               last_word_probability(pieces[:k], probs[:k]))
        return Transcript(text, "fitted", frames, float(result.no_speech_prob),
                          float(avg_logprob), len(tokens), raw_text=text,
                          last_word_prob=word_prob, loop_end=loop_end)

    def _full(self, samples: np.ndarray) -> Transcript:
        """faster-whisper's own path: features padded to 30 s windows."""
        assert self._model is not None
        segments, _info = self._model.transcribe(
            samples,
            language=self.language,
            beam_size=self.beam_size,
            # The utterance was already cut by the caller (VAD or a WAV file): a second VAD
            # pass only costs time.
            vad_filter=False,
            without_timestamps=True,
            # Each turn stands alone; conditioning on the previous turn's text invites
            # repetition loops for no accuracy gain on short questions.
            condition_on_previous_text=False,
            # One decode, no temperature fallback: a fallback re-runs the decoder up to five
            # times on unclear audio, multiplying what ASR already costs.
            temperature=0.0,
            max_new_tokens=decode_cap(min(samples.size, FULL_WINDOW_FRAMES * 160)),
        )
        # `segments` is lazy: decoding happens while we iterate.
        parts = list(segments)
        text = " ".join(s.text.strip() for s in parts).strip()
        tokens = sum(len(s.tokens) for s in parts)
        frames = FULL_WINDOW_FRAMES * max(1, math.ceil(samples.size / (FULL_WINDOW_FRAMES * 160)))
        if not parts:  # faster-whisper skipped every window as no speech
            return Transcript("", "full", frames, 1.0, -math.inf, 0)
        # Token-weighted log-probability; the most confident window's no-speech.
        logprob = sum(s.avg_logprob * len(s.tokens) for s in parts) / max(1, tokens)
        return Transcript(text, "full", frames, min(s.no_speech_prob for s in parts),
                          logprob, tokens, raw_text=text)
