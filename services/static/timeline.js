// A finished turn's timeline: one row of bars per stage on a shared time axis (t = 0 at
// the end of the utterance; the endpoint wait, from the last voiced sound, is the span
// before it), marks for the first token, sentences and barge-in, and the turn's key
// numbers as chips. A speculative turn's t = 0 is the pause it started on: its endpoint
// span runs on past t = 0 to the moment the end was confirmed, over the work done meanwhile.
import { div, mark } from "./dom.js";

const ROWS = ["endpoint", "asr", "llm", "tts", "playback"];

export function renderTimeline(el, tl, m, vadWaitMs, speculation = null) {
  if (!tl) return;
  el.hidden = false;
  el.textContent = "";
  const start = Math.min(tl.start || 0, 0);
  const end = Math.max(tl.end, start + 0.001);
  const span = end - start;
  const pct = (t) => `${Math.min(100, Math.max(0, ((t - start) / span) * 100)).toFixed(2)}%`;
  const width = (d) => `${Math.min(100, Math.max(0, (d / span) * 100)).toFixed(2)}%`;
  for (const stage of ROWS) {
    if (stage === "endpoint" && !tl.spans.endpoint) continue; // push-to-talk, typed turns
    const row = div("tl-row");
    row.dataset.stage = stage;
    row.appendChild(div("tl-label", stage));
    const track = div("tl-track");
    let total = 0;
    for (const [a, b] of tl.spans[stage] || []) {
      const bar = div(`tl-bar ${stage}`);
      bar.style.left = pct(a);
      bar.style.width = width(b - a);
      bar.title = `${stage} ${(a * 1000).toFixed(0)}–${(b * 1000).toFixed(0)} ms`;
      track.appendChild(bar);
      total += b - a;
    }
    if (stage === "llm") {
      for (const t of tl.marks["first token"] || []) track.appendChild(mark(pct(t), "▾", "first token"));
      for (const t of tl.marks.sentence || []) track.appendChild(mark(pct(t), "▲", "sentence released"));
    }
    if (stage === "playback") {
      for (const t of tl.marks["barge-in"] || []) track.appendChild(mark(pct(t), "✕", "barge-in"));
      if (m.first_audio_ms != null) {
        const line = div("tl-line");
        line.style.left = pct(m.first_audio_ms / 1000);
        line.title = `first audio ${m.first_audio_ms.toFixed(0)} ms`;
        track.appendChild(line);
      }
    }
    row.appendChild(track);
    row.appendChild(div("tl-ms", `${(total * 1000).toFixed(0)} ms`));
    el.appendChild(row);
  }
  const axis = div("tl-axis");
  axis.appendChild(div("", ""));
  const ticks = div("ticks");
  for (const f of [0, 0.25, 0.5, 0.75, 1]) {
    ticks.appendChild(div("", `${(start + span * f).toFixed(2)} s`));
  }
  axis.appendChild(ticks);
  axis.appendChild(div("", ""));
  el.appendChild(axis);
  el.appendChild(chips(m, vadWaitMs, speculation));
}

function chips(m, vadWaitMs, speculation) {
  const box = div("chips");
  const ms = (v) => (v == null ? "–" : `${Math.round(v)} ms`);
  const add = (label, value, key = false) => {
    const c = div(key ? "chip key" : "chip");
    c.innerHTML = `${label} <b></b>`;
    c.querySelector("b").textContent = value;
    box.appendChild(c);
  };
  add("first audio", ms(m.first_audio_ms), true);
  add("asr", ms(m.asr_ms));
  add("ttft", ms(m.ttft_ms));
  add("1st sentence", ms(m.first_sentence_ms));
  add("tts 1st", ms(m.tts_first_ms));
  add("overhead", ms(m.overhead_ms));
  add("turn", ms(m.turn_ms));
  // llama-server: prompt_n tokens were evaluated, cache_n reused from the slot's KV cache.
  if (m.prompt_n != null) {
    const cached = m.cache_n || 0;
    add("prompt cached", `${cached}/${cached + m.prompt_n} tok`);
  }
  const speculative = speculation && speculation.state === "confirmed";
  if (speculative) {
    // learned: the wait after finished-looking words is this user's own pauses' (pauses.py)
    const reason = speculation.reason && speculation.reason.replace(/_/g, " ")
      + (speculation.learned ? ", from your pauses" : "");
    const why = reason ? ` (${reason})` : "";
    add("speculative, endpoint", speculation.wait_ms == null ? "700 ms (page default)"
      : `${speculation.wait_ms} ms${why}`, true);
  }
  if (speculation && speculation.cancelled) add("speculations dropped", `${speculation.cancelled}`);
  if (vadWaitMs != null) {
    add(speculative ? "end-of-speech wait" : "end-of-speech wait (before t=0)", ms(vadWaitMs));
  }
  if (m.first_audio_from_speech_end_ms != null) {
    add("first audio from your last sound", ms(m.first_audio_from_speech_end_ms));
  }
  if (m.interrupted) {
    add("barge-in → silence", ms(m.bargein_to_silence_ms));
    add("→ LLM closed", ms(m.bargein_to_llm_closed_ms));
    add("→ slot idle", ms(m.bargein_to_slot_idle_ms));
  }
  return box;
}
