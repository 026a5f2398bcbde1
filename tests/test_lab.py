"""The lab: its arithmetic, first-sentence rule and report rendering (unit), and `lab ttft`,
`lab cache`, `lab barge-in` against the real llama-server (integration).

Integration tests assert behaviour (cache reuse, cancel in the log, ordering), never timing
thresholds: this 2-core machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from services.errors import UserError
from services.lab import cli, prefill, report, tables
from services.lab.context import load_docs
from services.lab.sentences import first_sentence, first_sentence_end
from services.lab.stats import fit_line, median
from services.server_http import ServerProps

# --- least squares -------------------------------------------------------------------


def test_fit_line_exact_line_has_r2_one() -> None:
    fit = fit_line([0, 10, 20, 30], [5, 25, 45, 65])
    assert fit.slope == pytest.approx(2.0)
    assert fit.intercept == pytest.approx(5.0)
    assert fit.r2 == pytest.approx(1.0)
    assert fit.predict(100) == pytest.approx(205.0)


def test_fit_line_matches_hand_computed_values() -> None:
    # x mean 2, y mean 3; Sxy = 7, Sxx = 10 -> slope 0.7, intercept 1.6;
    # residuals .4 -.3 0 -.7 .6 -> SS_res = 1.1; SS_tot = 6 -> r2 = 1 - 1.1/6
    fit = fit_line([0, 1, 2, 3, 4], [2, 2, 3, 3, 5])
    assert fit.slope == pytest.approx(0.7)
    assert fit.intercept == pytest.approx(1.6)
    assert fit.r2 == pytest.approx(1 - 1.1 / 6)


def test_fit_line_flat_data_and_bad_input() -> None:
    assert fit_line([1, 2, 3], [7, 7, 7]).r2 == 1.0
    with pytest.raises(ValueError):
        fit_line([3, 3, 3], [1, 2, 3])
    with pytest.raises(ValueError):
        fit_line([1, 2], [1])


def test_median_ignores_missing_values() -> None:
    assert median([3.0, None, 1.0, 2.0]) == 2.0
    assert median([None, None]) is None
    assert median([]) is None


def test_prefill_summary_fits_ttft_on_prompt_tokens() -> None:
    points = [{"docs": d, "prompt_n": n, "ttft_ms": 10 + 2 * n, "prompt_ms": 2 * n}
              for d, n in ((0, 40), (4, 420), (12, 1160), (0, 40), (4, 420), (12, 1160))]
    section = prefill.summarize(points)
    assert section["ms_per_token"] == pytest.approx(2.0)
    assert section["r2"] == pytest.approx(1.0)
    assert [s["docs"] for s in section["by_docs"]] == [0, 4, 12]
    assert section["by_docs"][1]["prompt_n"] == 420


def test_prefill_fit_uses_the_fastest_run_so_one_busy_moment_does_not_bend_it() -> None:
    points = [{"docs": d, "prompt_n": n, "ttft_ms": 10 + 2 * n, "prompt_ms": 2 * n}
              for d, n in ((0, 40), (4, 420), (12, 1160))] * 2
    points.append({"docs": 4, "prompt_n": 420, "ttft_ms": 9000.0, "prompt_ms": 8990.0})
    section = prefill.summarize(points)
    assert section["ms_per_token"] == pytest.approx(2.0)
    assert section["r2"] == pytest.approx(1.0)
    assert section["r2_all_runs"] < 0.5  # the spike is still reported, not hidden
    assert section["by_docs"][1]["min_ttft_ms"] == 850.0


def test_prefill_summary_without_enough_points_has_no_fit() -> None:
    section = prefill.summarize([{"docs": 0, "prompt_n": 40, "ttft_ms": 90.0,
                                  "prompt_ms": 80.0}])
    assert section["ms_per_token"] is None and section["r2"] is None


# --- first sentence ------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("Hello there. How are you", "Hello there."),
    ("Really? Yes", "Really?"),
    ("Wow!\nNext", "Wow!"),
    ("It costs 3.5 euros. Then", "It costs 3.5 euros."),   # no whitespace after "3."
    ('He said "no." Then he left', 'He said "no."'),        # closing quote kept
    ("1. Limit screens. 2. Sleep", "1. Limit screens."),     # list marker is not a sentence
    ("Tips:\n2. Stay hydrated. More", "Tips:\n2. Stay hydrated."),
    ("No end yet", None),
    ("Ends with a mark.", None),                             # undecided until whitespace
    ("  . leading", None),
])
def test_first_sentence(text: str, expected: str | None) -> None:
    assert first_sentence(text) == expected


def test_first_sentence_end_points_after_the_mark() -> None:
    text = "One. Two. "
    assert first_sentence_end(text) == 4
    assert first_sentence_end(text[:4]) is None


# --- report rendering ----------------------------------------------------------------

def _canned_result() -> dict[str, Any]:
    return {
        "measured_at": "2025-01-01T12:00:00",
        "server": {"url": "http://127.0.0.1:8080", "model": "SmolLM2-135M-Instruct.Q4_1.gguf",
                   "n_ctx": 4096, "total_slots": 1, "build": "b1234", "started_by_lab": True},
        "ttft": {"runs": [{"ttft_ms": 120.0, "prompt_n": 30, "prompt_ms": 100.0,
                           "overhead_ms": 20.0}] * 5,
                 "median_ttft_ms": 120.0, "median_prompt_ms": 100.0, "median_overhead_ms": 20.0},
        "prefill": prefill.summarize(
            [{"docs": d, "prompt_n": n, "ttft_ms": 20 + 2.5 * n, "prompt_ms": 2.5 * n}
             for d, n in ((0, 40), (4, 420), (12, 1160))]),
        "cache": {
            "repeat": {"first": {"prompt_n": 427, "cache_n": 3, "ttft_ms": 900.0},
                       "second": {"prompt_n": 1, "cache_n": 429, "ttft_ms": 17.0}},
            "volatile_first": [{"prompt_n": 415, "cache_n": 14, "ttft_ms": 850.0}] * 3,
            "volatile_last": [{"prompt_n": 23, "cache_n": 406, "ttft_ms": 80.0}] * 3,
        },
        "first_sentence": {
            "runs": [{"max_tokens": m, "ttft_ms": 100.0, "first_sentence_ms": 300.0,
                      "first_sentence_by": "mark", "total_ms": 3.0 * m * 10,
                      "completion_tokens": m} for m in (32, 64, 128)],
            "by_max_tokens": [{"max_tokens": m, "ttft_ms": 100.0, "first_sentence_ms": 300.0,
                               "total_ms": 3.0 * m * 10, "completion_tokens": m,
                               "decode_tps": 90.0} for m in (32, 64, 128)],
            "first_sentence": "A volcano is an opening in the crust.",
        },
        "barge_in": {
            "at_s": 0.5, "notes": [],
            "close": {"closed_at_ms": 502.0, "slot_idle_after_ms": 12.0, "slot_idle_ms": 514.0,
                      "cancel_logged": True, "id_task": 7, "received_tokens": 40},
            "hold": {"stopped_reading_ms": 501.0, "slot_busy_ms": 4800.0,
                     "slot_idle_ms": 5301.0, "predicted_n": 512, "received_before_stop": 40,
                     "wasted_tokens": 472},
        },
    }


def test_report_renders_every_section_with_references() -> None:
    text = report.render(_canned_result(), {"prefill": "prefill.png"})
    assert text.startswith("# voice-llm lab report")
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in text and "| n_ctx | 4096 |" in text
    assert "b1234" in text and "Qwen2.5-0.5B-Instruct Q4_0" in text
    for title in report.TITLES.values():
        assert f"## {title}" in text
    assert "| reference | 127 |" in text          # TTFT reference beside ours
    assert "| reference | 258 | 801 |" in text    # prefill reference
    assert "2.50 ms per prompt token, r² 1.000" in text
    assert "![" in text and "(prefill.png)" in text
    assert "| close (hang up) | 502 | 12 | 40 | – | yes |" in text


def test_checks_pass_on_good_results_and_flag_bad_ones() -> None:
    good = tables.checks(_canned_result())
    assert good.rows and all(row[-1] == "yes" for row in good.rows)
    bad = _canned_result()
    bad["cache"]["repeat"]["second"]["prompt_n"] = 400
    bad["barge_in"]["close"]["cancel_logged"] = None
    met = {row[0]: row[-1] for row in tables.checks(bad).rows}
    assert met["cache: repeated prompt, 2nd prompt_n"] == "NO"
    assert met["barge-in close: cancel in server log"] == "–"


def test_partial_result_renders_only_its_sections() -> None:
    result = {"ttft": _canned_result()["ttft"]}
    text = report.render(result)
    assert "## 1. Time to first token" in text and "## 2." not in text


def test_tables_fit_in_100_columns() -> None:
    from rich.console import Console

    console = Console(width=100, record=True)
    result = _canned_result()
    for name, build in tables.BUILDERS.items():
        console.print(tables.to_rich(build(result[name])))
    console.print(tables.to_rich(tables.checks(result)))
    assert max(len(line) for line in console.export_text().splitlines()) <= 100


def test_write_produces_json_report_and_figures(tmp_path: Path) -> None:
    written = report.write(tmp_path, _canned_result())
    names = {p.name for p in written}
    assert {"lab.json", "report.md", "prefill.png", "first_sentence.png",
            "barge_in.png"} <= names
    assert json.loads((tmp_path / "lab.json").read_text())["cache"]["repeat"]["second"][
        "prompt_n"] == 1
    assert (tmp_path / "prefill.png").read_bytes()[:4] == b"\x89PNG"


def test_describe_props_takes_the_file_name() -> None:
    props = {"model_alias": "/m/SmolLM2.gguf", "model_path": "/m/SmolLM2.gguf",
             "default_generation_settings": {"n_ctx": 4096}, "build_info": "b1",
             "total_slots": 1}
    assert ServerProps.parse(props).model == "SmolLM2.gguf"
    assert ServerProps.parse(props).n_ctx == 4096
    assert ServerProps.parse(props).total_slots == 1
    assert ServerProps.parse({}).model is None
    assert ServerProps.parse("not json").n_ctx is None


def test_shipped_documents() -> None:
    docs = load_docs()
    assert len(docs) == 12
    assert all(50 <= len(d.split()) <= 100 for d in docs)  # ~60-120 tokens each


# --- CLI -----------------------------------------------------------------------------

def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--llm-url", default="http://127.0.0.1:8080")
    cli.add_arguments(parser, "lab")
    return parser.parse_args(argv)


def test_cli_defaults() -> None:
    args = _parse("all")
    assert args.out == Path("out/lab") and args.at == 0.5 and args.runs is None


@pytest.mark.parametrize("argv", [("ttft", "--runs", "0"), ("barge-in", "--at", "0"),
                                  ("barge-in", "--server-log", "/nonexistent/log")])
def test_cli_rejects_bad_options_with_one_line(argv: tuple[str, ...]) -> None:
    with pytest.raises(UserError) as info:
        cli.run(_parse(*argv))
    assert "\n" not in str(info.value)


def test_cli_unreachable_remote_server_is_a_user_error(tmp_path: Path) -> None:
    # Not local, so the lab cannot start one there: a one-line error, no traceback.
    args = _parse("ttft", "--llm-url", "http://192.0.2.1:9", "--out", str(tmp_path))
    with pytest.raises(UserError):
        cli.run(args)


# --- against the real llama-server ---------------------------------------------------

@pytest.mark.integration
def test_lab_ttft_real_server(llama_server: Any, tmp_path: Path) -> None:
    assert cli.run(_parse("ttft", "--llm-url", llama_server.url, "--out", str(tmp_path))) == 0
    data = json.loads((tmp_path / "lab.json").read_text())
    runs = data["ttft"]["runs"]
    assert len(runs) == 5
    for run in runs:
        assert run["prompt_n"] > 10  # cold: the whole prompt is computed every time
        assert 0 < run["prompt_ms"] <= run["ttft_ms"]  # prefill happens before the token
    assert data["server"]["n_ctx"] == 4096
    assert "## 1. Time to first token" in (tmp_path / "report.md").read_text()


@pytest.mark.integration
def test_lab_cache_real_server(llama_server: Any, tmp_path: Path) -> None:
    assert cli.run(_parse("cache", "--llm-url", llama_server.url, "--out", str(tmp_path))) == 0
    cache = json.loads((tmp_path / "lab.json").read_text())["cache"]
    first, second = cache["repeat"]["first"], cache["repeat"]["second"]
    assert first["prompt_n"] > 100  # the nonce makes the first one cold
    assert second["prompt_n"] <= 2
    assert second["cache_n"] >= first["prompt_n"] - 1
    volatile_first = [r["cache_n"] for r in cache["volatile_first"]]
    volatile_last = [r["cache_n"] for r in cache["volatile_last"]]
    assert len(volatile_first) == len(volatile_last) == 3
    assert max(volatile_first) * 4 < min(volatile_last)
    assert all(r["prompt_n"] < r["cache_n"] for r in cache["volatile_last"])


@pytest.mark.integration
def test_lab_barge_in_real_server(llama_server: Any, tmp_path: Path) -> None:
    args = _parse("barge-in", "--llm-url", llama_server.url, "--out", str(tmp_path),
                  "--at", "0.3", "--hold-tokens", "96",
                  "--server-log", str(llama_server.log_path))
    assert cli.run(args) == 0
    barge = json.loads((tmp_path / "lab.json").read_text())["barge_in"]
    close, hold = barge["close"], barge["hold"]
    assert close["cancel_logged"] is True
    assert isinstance(close["id_task"], int)
    assert close["slot_idle_after_ms"] is not None and close["slot_idle_after_ms"] >= 0
    assert hold["predicted_n"] > close["received_tokens"]  # it kept generating for nobody
    assert hold["slot_busy_ms"] > 0
    assert (tmp_path / "barge_in.png").exists()


@pytest.mark.integration
def test_lab_barge_in_without_log_says_so(llama_server: Any, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # A server the lab did not start and whose log it was not given: no guessing.
    monkeypatch.setenv("VOICE_LLM_STATE", str(tmp_path / "state"))
    args = _parse("barge-in", "--llm-url", llama_server.url, "--out", str(tmp_path),
                  "--at", "0.2", "--hold-tokens", "32")
    assert cli.run(args) == 0
    barge = json.loads((tmp_path / "lab.json").read_text())["barge_in"]
    assert barge["close"]["cancel_logged"] is None
    assert any("--server-log" in note for note in barge["notes"])
