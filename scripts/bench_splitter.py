#!/usr/bin/env python3
"""Accuracy and release delay of our SentenceSplitter and the published peers, in one run.

    .venv/bin/python scripts/bench_splitter.py [--corpus main|heldout|hard|PATH] [--out FILE]
                                               [--pipecat-path DIR]

Every splitter gets every corpus reply in three chunkings (--corpus: ``main`` =
tests/splitter_corpus.py, the author's corpus; ``heldout`` = tests/splitter_heldout.py, written
independently of the splitter's code; ``hard`` = tests/splitter_hard.py, the harder held-out
set of issue 15; or a ``.py`` file / dotted module defining ``CORPUS``, ``HELDOUT`` or
``HARD``, a list of ``Case``):
LLM-like tokens, whole words, single characters. Columns:

- exact: share of replies whose sentences equal the expected ones (after normalising
  whitespace and removing markdown ``*``, which sentence-stream strips on purpose);
- delay: for each boundary between two expected sentences, the number of chunks fed after
  the chunk at which the boundary became decidable (definition in docs/splitter.md) until
  the splitter had released all the text up to it; a release by ``flush`` counts as one
  past the last chunk. Mean and max over all boundaries, LLM-like tokens;
- us/chunk: CPU time per fed chunk (feed + flush, LLM-like tokens), informative only.

Peers that take a language get the reply's language (from the case id); ours runs twice:
with its default (language=None: every language's lists) and with the reply's language.
The peers are measurement references, never product dependencies. A peer that cannot be
imported is reported as "not run" with the reason. pipecat-ai is heavy, so it is looked up
in --pipecat-path (a ``pip install --target`` folder) when it is not installed:
    pip install --no-deps --target /tmp/peer_pipecat/site pipecat-ai loguru wait_for2
    pip install --target /tmp/peer_pipecat/site sentencex
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import json
import logging
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.splitter import ABBREVIATIONS, NUMERIC_PREFIXES, SentenceSplitter  # noqa: E402
from tests.splitter_corpus import CHUNKINGS, CORPUS, Case  # noqa: E402

Released = list[tuple[int, str]]  # (index of the chunk that released it, sentence)
Runner = Callable[[list[str], str], Released]  # (chunks, language code) -> releases

# -- decidability: when could a perfect streaming splitter know a boundary? ------------------
NEWLINES = "\n\r\u2028\u2029\x85\x0b\x0c"
CLOSE_HOLD = "\"'”’“‘»)]}」』）】》〉〕"  # a quotation may close mid-sentence: 'asked "Why?" and'
OPEN = "\"'“‘«([{*_¿¡<`~"
SPEC_AMBIGUOUS = {"a.m", "p.m", "etc", "e.g", "i.e", "no"} | ABBREVIATIONS | NUMERIC_PREFIXES
DOTTED = re.compile(r"(?:[^\W\d_]\.)+[^\W\d_]")


def needs_next_char(sentence: str) -> bool:
    """True when the whitespace after this sentence does not decide the boundary yet: the
    next non-space character is needed (abbreviations, ellipses, closing quotes)."""
    s = sentence.rstrip("*_")
    if s.count("«") > s.count("»"):
        return True
    core = s.rstrip(CLOSE_HOLD)
    if core != s and core and core[-1] in ".!?…‽":
        return True
    if core.endswith(("..", "…")):
        return True
    if core.endswith(".") and not core.endswith("!.") and not core.endswith("?."):
        word = core.split()[-1][:-1].lstrip(OPEN)
        return word.lower() in SPEC_AMBIGUOUS or bool(DOTTED.fullmatch(word)) or (
            len(word) == 1 and word.islower())
    return False


def decision_points(case: Case) -> list[tuple[int, int]]:
    """(index in text at which each boundary is decidable, non-space chars up to it)."""
    text, points, pos = case.text, [], 0
    for sentence in case.sentences[:-1]:
        end = text.find(sentence, pos) + len(sentence)
        pos = end
        # The character right after the sentence decides (the whitespace after a terminal,
        # the newline, the character after 。), unless the sentence needs the next word's
        # first character: then that character, or a newline before it, decides.
        d = end
        if needs_next_char(sentence):
            while d < len(text) and text[d] not in NEWLINES and (
                    text[d].isspace() or text[d] in "*_~`"):
                d += 1
        points.append((d, count(text[:end])))
    return points


def count(s: str) -> int:
    return sum(1 for ch in s if not ch.isspace() and ch != "*")


def normalise(sentences: list[str]) -> list[str]:
    out = [" ".join(s.replace("*", "").split()) for s in sentences]
    return [s for s in out if s]


def delays(case: Case, chunks: list[str], released: Released) -> list[int]:
    starts, acc = [], 0
    for c in chunks:
        starts.append(acc)
        acc += len(c)
    cumulative, total = [], 0
    for k, s in released:
        total += count(s)
        cumulative.append((k, total))
    out = []
    for d, need in decision_points(case):
        decidable = max(i for i, st in enumerate(starts) if st <= d)
        release = next((k for k, tot in cumulative if tot >= need), len(chunks))
        out.append(max(0, release - decidable))
    return out


# -- splitters under test ------------------------------------------------------------------
LANGUAGES = {"zh", "ja", "es", "fr", "de", "ru", "it", "ar", "hi"}


def language_of(case: Case) -> str:
    """The reply's language, from its id ("zh-quote" -> "zh"); handed to the peers that
    take one (pysbd, pipecat, stream2sentence) and to our ``language=`` row."""
    lang = case.id.split("-")[0]
    return "ja" if case.id == "fullwidth-decimal" else lang if lang in LANGUAGES else "en"


def run_ours(chunks: list[str], lang: str, *, use_language: bool = False) -> Released:
    s = SentenceSplitter(language=lang if use_language else None)
    out = [(k, x) for k, c in enumerate(chunks) for x in s.feed(c)]
    return out + [(len(chunks), x) for x in s.flush()]


def make_sentence_stream() -> Runner:
    from sentence_stream import SentenceBoundaryDetector

    def run(chunks: list[str], lang: str) -> Released:
        d = SentenceBoundaryDetector()
        out = [(k, x) for k, c in enumerate(chunks) for x in list(d.add_chunk(c))]
        last = d.finish()
        return out + ([(len(chunks), last)] if last else [])
    return run


def make_stream2sentence(**options: Any) -> Runner:
    import stream2sentence

    def run(chunks: list[str], lang: str) -> Released:
        s = stream2sentence.SentenceSplitter(language=lang, **options)
        out: Released = []
        for k, c in enumerate(chunks):
            s.add(c)
            out += [(k, x) for x in s.stream()]
        return out + [(len(chunks), x) for x in s.flush()]
    return run


def make_pipecat(path: str | None) -> Runner:
    if path and Path(path).is_dir():
        sys.path.append(path)
    logging.getLogger("pipecat").setLevel(logging.ERROR)
    try:
        from loguru import logger
        logger.remove()
    except ImportError:
        pass
    from pipecat.utils.text.simple_text_aggregator import SimpleTextAggregator

    async def arun(chunks: list[str], lang: str) -> Released:
        agg = SimpleTextAggregator(language=lang)
        out: Released = []
        for k, c in enumerate(chunks):
            async for a in agg.aggregate(c):
                out.append((k, a.text))
        last = await agg.flush()
        return out + ([(len(chunks), last.text)] if last and last.text.strip() else [])

    loop = asyncio.new_event_loop()
    return lambda chunks, lang: loop.run_until_complete(arun(chunks, lang))


def make_pysbd() -> Runner:
    import pysbd
    segmenters: dict[str, Any] = {}

    def run(chunks: list[str], lang: str) -> Released:  # offline: it only sees the whole text
        seg = segmenters.setdefault(lang, pysbd.Segmenter(language=lang, clean=False))
        text = "".join(chunks)
        return [(len(chunks), s.strip()) for s in seg.segment(text) if s.strip()]
    return run


def peers(pipecat_path: str | None) -> list[tuple[str, str, Callable[[], Runner]]]:
    return [
        ("voice-llm SentenceSplitter", "defaults", lambda: run_ours),
        ("voice-llm SentenceSplitter", "language=reply's",
         lambda: lambda chunks, lang: run_ours(chunks, lang, use_language=True)),
        ("sentence-stream", "SentenceBoundaryDetector", make_sentence_stream),
        ("stream2sentence", "defaults", make_stream2sentence),
        ("stream2sentence", "minimum_sentence_length=0, minimum_first_fragment_length=0, "
         "context_size=4, auto_context=True",
         lambda: make_stream2sentence(minimum_sentence_length=0, minimum_first_fragment_length=0,
                                      context_size=4, auto_context=True)),
        ("pipecat SimpleTextAggregator", "defaults", lambda: make_pipecat(pipecat_path)),
        ("pysbd (offline, whole text)", "clean=False", make_pysbd),
    ]


def version(name: str) -> str:
    from importlib import metadata
    dist = {"voice-llm SentenceSplitter": "voice-llm", "sentence-stream": "sentence-stream",
            "stream2sentence": "stream2sentence", "pipecat SimpleTextAggregator": "pipecat-ai",
            "pysbd (offline, whole text)": "pysbd"}[name]
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        if dist == "pipecat-ai":
            try:
                import pipecat
                return str(getattr(pipecat, "__version__", "?"))
            except ImportError:
                pass
        return "?"


CORPORA = {"main": "tests.splitter_corpus", "heldout": "tests.splitter_heldout",
           "hard": "tests.splitter_hard"}


def load_corpus(name: str) -> list[Case]:
    """``main``, ``heldout``, ``hard``, a dotted module or a ``.py`` path defining CORPUS,
    HELDOUT or HARD."""
    target = CORPORA.get(name, name)
    if target.endswith(".py"):
        spec = importlib.util.spec_from_file_location("bench_corpus", target)
        if spec is None or spec.loader is None:
            raise SystemExit(f"cannot load corpus file {target}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    for attr in ("CORPUS", "HELDOUT", "HARD"):
        if hasattr(module, attr):
            return list(getattr(module, attr))
    raise SystemExit(f"{target} defines none of CORPUS, HELDOUT, HARD")


def measure(run: Runner, corpus: list[Case] = CORPUS) -> dict[str, Any]:
    result: dict[str, Any] = {"exact": {}, "failures": {}}
    outputs: dict[str, dict[str, list[str]]] = {}
    for chunking, chunker in CHUNKINGS.items():
        good, fails, outs = 0, [], {}
        all_delays: list[int] = []
        t_total, n_chunks = 0.0, 0
        for case in corpus:
            chunks = chunker(case.text)
            t0 = time.perf_counter()
            released = run(chunks, language_of(case))
            t_total += time.perf_counter() - t0
            n_chunks += len(chunks)
            got = [s for _, s in released]
            outs[case.id] = got
            if normalise(got) == normalise(case.sentences):
                good += 1
            else:
                fails.append({"id": case.id, "got": got, "expected": case.sentences})
            all_delays += delays(case, chunks, released)
        result["exact"][chunking] = good / len(corpus)
        result["failures"][chunking] = fails
        outputs[chunking] = outs
        if chunking == "llm_tokens":
            result["delay_mean"] = statistics.fmean(all_delays)
            result["delay_max"] = max(all_delays)
            result["boundaries"] = len(all_delays)
            result["us_per_chunk"] = 1e6 * t_total / n_chunks
    first = outputs["llm_tokens"]
    result["same_in_all_chunkings"] = sum(
        all(outputs[c][case.id] == first[case.id] for c in outputs)
        for case in corpus) / len(corpus)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="write the full results (with failures) as JSON here")
    ap.add_argument("--pipecat-path", default="/tmp/peer_pipecat/site",
                    help="pip --target folder holding pipecat-ai when it is not installed")
    ap.add_argument("--corpus", default="main",
                    help="main (tests/splitter_corpus.py), heldout (tests/splitter_heldout.py), "
                         "hard (tests/splitter_hard.py), a dotted module or a .py file defining "
                         "CORPUS, HELDOUT or HARD")
    args = ap.parse_args(argv)
    corpus = load_corpus(args.corpus)
    rows: list[dict[str, Any]] = []
    for name, config, factory in peers(args.pipecat_path):
        row: dict[str, Any] = {"splitter": name, "config": config}
        try:
            run = factory()
            run(["Warm up. ", "Now."], "en")
        except Exception as e:  # a peer that cannot run offline is reported, not dropped
            row["not_run"] = f"{type(e).__name__}: {e}"
            rows.append(row)
            continue
        row["version"] = version(name)
        row.update(measure(run, corpus))
        rows.append(row)
    print_table(rows, len(corpus))
    if args.out:
        meta = {"corpus": args.corpus, "replies": len(corpus), "chunkings": list(CHUNKINGS),
                "command": " ".join(["scripts/bench_splitter.py", *(argv or sys.argv[1:])])}
        Path(args.out).write_text(json.dumps({"meta": meta, "results": rows}, indent=1,
                                             ensure_ascii=False))
    return 0


def print_table(rows: list[dict[str, Any]], replies: int) -> None:
    head = ("| splitter | exact: LLM tokens | words | chars | same in all 3 | "
            "delay mean / max (LLM tokens) | us/chunk |")
    print(head)
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        name = f"{r['splitter']} {r.get('version', '')}".strip()
        if r["config"] != "defaults":
            name += f" ({r['config']})"
        if "not_run" in r:
            print(f"| {name} | could not run: {r['not_run']} | | | | | |")
            continue
        e = r["exact"]
        print(f"| {name} | {e['llm_tokens']:.3f} | {e['words']:.3f} | {e['chars']:.3f} | "
              f"{r['same_in_all_chunkings']:.3f} | {r['delay_mean']:.2f} / {r['delay_max']} | "
              f"{r['us_per_chunk']:.1f} |")
    print(f"\n{replies} replies, {rows[0].get('boundaries', '?')} boundaries each chunking")


if __name__ == "__main__":
    raise SystemExit(main())
