// voice-llm browser client: microphone -> WebSocket -> gapless WebAudio playback.
// Plain script, no build step, no CDN (the machines have no internet).
// Protocol: see services/web_session.py. Test hooks: window.voiceLlm.
"use strict";

const $ = (id) => document.getElementById(id);
const ui = {
  status: $("status"), statusText: $("status-text"), statusDetail: $("status-detail"),
  start: $("start"), mode: $("mode"), talk: $("talk"), interrupt: $("interrupt"),
  level: $("level"), threshold: $("threshold"), typed: $("typed"), typedText: $("typed-text"),
  notice: $("notice"), conversation: $("conversation"), session: $("session"),
  template: $("turn-template"),
};

const STATUS_TEXT = {
  connecting: "connecting…", disconnected: "disconnected, retrying…", ready: "ready",
  listening: "listening", hearing: "hearing you", thinking: "thinking",
  speaking: "speaking", interrupted: "interrupted",
};

// Energy-based end-of-utterance detection, in 20 ms frames.
const VAD = {
  frameMs: 20,
  onsetFrames: 3,        // 60 ms above threshold: speech started
  bargeFrames: 5,        // while the assistant talks, demand 100 ms (echo / noise margin)
  hangoverMs: 700,       // this much silence ends the utterance
  minSpeechMs: 250,      // shorter bursts (clicks, coughs) are not turns
  preRollMs: 300,        // sent before the onset so the first syllable is not clipped
  minThreshold: 0.012,   // RMS; real rooms raise it through the noise floor
  floorRatio: 3.5,
  bargeRatio: 2,         // threshold multiplier while the assistant is speaking
};

const app = {
  state: "connecting", ws: null, connected: false, retryMs: 500,
  mode: localStorage.getItem("voice-llm-mode") || "auto",
  micOn: false, running: false, // a server turn is between turn.start and turn.result
  limits: { max_utterance_s: 60, max_text_chars: 2000 },
  turns: new Map(), pendings: [], current: null, // pendings: inputs sent, turn not started
  stats: { audioFrames: 0, samplesReceived: 0, samplesScheduled: 0, underruns: 0,
           interruptsSent: 0, utterancesSent: 0, errors: [] },
  log: [],
};
window.voiceLlm = app;
const busy = () => app.running || app.pendings.length > 0;

// --- status line ---------------------------------------------------------------------
let interruptedTimer = 0;
function setState(state, detail = "") {
  app.state = state;
  ui.status.dataset.state = state;
  ui.statusText.textContent = STATUS_TEXT[state] || state;
  ui.statusDetail.textContent = detail;
  ui.interrupt.disabled = !(busy() || player.active);
  if (state !== "interrupted") clearTimeout(interruptedTimer);
}
function idleState() {
  if (!app.connected) return "disconnected";
  if (capture.recording) return "hearing";
  if (player.active) return "speaking";
  if (busy()) return "thinking";
  return app.micOn ? "listening" : "ready";
}
function refreshState(detail = "") {
  if (app.state === "interrupted" && !capture.recording) { // shown briefly, see below
    ui.interrupt.disabled = !(busy() || player.active);
    return;
  }
  setState(idleState(), detail);
}
function showInterrupted() {
  setState("interrupted");
  clearTimeout(interruptedTimer);
  interruptedTimer = setTimeout(() => { app.state = ""; refreshState(); }, 1200);
}

// --- playback: int16 frames scheduled back to back on one AudioContext -----------------
const player = {
  ctx: null, rate: 22050, leadS: 0.08, nextTime: 0, sources: new Set(), muted: false,
  get active() { return this.sources.size > 0; },
  ensure() {
    if (!this.ctx) this.ctx = new AudioContext();
    if (this.ctx.state === "suspended") this.ctx.resume();
  },
  setFormat(msg) { this.rate = msg.sample_rate; this.leadS = (msg.lead_ms || 80) / 1000; },
  push(buffer) {
    app.stats.audioFrames += 1;
    const pcm = new Int16Array(buffer);
    app.stats.samplesReceived += pcm.length;
    if (this.muted || !pcm.length) return;
    this.ensure();
    const f32 = new Float32Array(pcm.length);
    for (let i = 0; i < pcm.length; i++) f32[i] = pcm[i] / 32768;
    const buf = this.ctx.createBuffer(1, f32.length, this.rate);
    buf.copyToChannel(f32, 0);
    const src = this.ctx.createBufferSource();
    src.buffer = buf;
    src.connect(this.ctx.destination);
    const now = this.ctx.currentTime;
    if (this.nextTime < now + 0.005) {
      // Ran dry (first block, or the network stalled): rebuild the jitter buffer.
      if (this.sources.size) app.stats.underruns += 1;
      this.nextTime = now + this.leadS;
    }
    src.start(this.nextTime);
    this.nextTime += buf.duration;
    this.sources.add(src);
    app.stats.samplesScheduled += pcm.length;
    src.onended = () => {
      this.sources.delete(src);
      if (!this.sources.size) refreshState();
    };
    if (app.state !== "speaking" && !capture.recording) setState("speaking");
  },
  flush() {
    for (const src of this.sources) { try { src.stop(); } catch (e) { /* not started */ } }
    this.sources.clear();
    this.nextTime = 0;
  },
};

// --- the connection ------------------------------------------------------------------
function connect() {
  const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`;
  const ws = new WebSocket(url);
  ws.binaryType = "arraybuffer";
  app.ws = ws;
  ws.onopen = () => { app.connected = true; app.retryMs = 500; refreshState(); };
  ws.onmessage = (e) => {
    if (typeof e.data === "string") onMessage(JSON.parse(e.data));
    else player.push(e.data);
  };
  ws.onclose = () => {
    const was = app.connected;
    app.connected = false;
    app.running = false;
    app.pendings = [];
    player.flush();
    capture.abort();
    setState("disconnected");
    if (was) addNote("Connection lost: a new conversation starts when it comes back.");
    setTimeout(connect, app.retryMs);
    app.retryMs = Math.min(app.retryMs * 2, 8000);
  };
}
function send(msg) {
  if (app.ws && app.ws.readyState === WebSocket.OPEN) {
    app.ws.send(typeof msg === "string" || msg instanceof ArrayBuffer ? msg : JSON.stringify(msg));
    return true;
  }
  return false;
}

function onMessage(msg) {
  app.log.push(msg);
  if (app.log.length > 500) app.log.shift();
  switch (msg.type) {
    case "hello":
      app.limits = msg.limits;
      ui.session.textContent = `session ${msg.session}`;
      break;
    case "audio.format": player.setFormat(msg); break;
    case "audio.stop": player.flush(); refreshState(); break;
    case "event": onEvent(msg.event); break;
    case "transcript": turnView(msg.turn).setTranscript(msg.text); break;
    case "sentence": turnView(msg.turn).addSentence(msg.index, msg.text); break;
    case "turn.result": onResult(msg); break;
    case "error": onError(msg.message); break;
  }
}

function onEvent(ev) {
  const name = `${ev.stage}.${ev.event}`;
  if (name === "turn.start") {
    player.muted = false; // audio after this belongs to the new turn
    app.current = ev.turn;
    turnView(ev.turn);
    app.running = true;
    if (!capture.recording) refreshState();
  } else if (name === "bargein.detected") {
    player.flush();
    showInterrupted();
  } else if (name === "playback.stopped") {
    turnView(ev.turn).markHeard(ev.index, ev.played_samples);
  } else if (name === "turn.error") {
    turnView(ev.turn).setError(ev.message);
  }
}

function onResult(msg) {
  const view = turnView(msg.turn);
  view.finish(msg);
  if (msg.turn === app.current) app.running = false;
  refreshState();
}

function onError(message) {
  app.stats.errors.push(message);
  // Errors come before a turn starts (bad audio, protocol): they belong to the oldest input
  // still waiting for its turn, if any, else they get a line of their own.
  const view = app.pendings.shift();
  if (view) view.setError(message); else addNote(message, true);
  refreshState();
}

// --- conversation view ---------------------------------------------------------------
class TurnView {
  constructor() {
    this.el = ui.template.content.firstElementChild.cloneNode(true);
    this.you = this.el.querySelector(".you .text");
    this.bot = this.el.querySelector(".bot .text");
    this.timeline = this.el.querySelector(".timeline");
    this.sentences = new Map();
    this.vadWaitMs = null;
    this.you.textContent = "…";
    this.you.classList.add("pending");
    this.bot.textContent = "";
    ui.conversation.prepend(this.el);
  }
  setTranscript(text) {
    this.you.classList.remove("pending");
    this.you.textContent = text || "(no speech heard)";
  }
  addSentence(index, text) {
    if (this.sentences.has(index)) return;
    const span = document.createElement("span");
    span.className = "sentence";
    span.textContent = (this.sentences.size ? " " : "") + text;
    this.sentences.set(index, span);
    this.bot.appendChild(span);
  }
  markHeard(index, played) {
    // Sentences after the one cut off were never heard; the cut one only in part.
    for (const [i, span] of this.sentences) {
      if (index === null || index === undefined || i > index) span.classList.add("unheard");
      else if (i === index && played >= 0) span.classList.add("partial");
    }
  }
  setError(message) {
    if (this.you.classList.contains("pending")) {
      this.you.textContent = "(not understood)";
    }
    let line = this.el.querySelector(".error-line");
    if (!line) {
      line = document.createElement("p");
      line.className = "error-line";
      this.el.querySelector(".bot").appendChild(line);
    }
    line.textContent = `⚠ ${message}`;
  }
  finish(msg) {
    if (msg.transcript) this.setTranscript(msg.transcript);
    if (!this.sentences.size && msg.reply) this.addSentence(0, msg.reply);
    if (msg.interrupted) {
      const tag = document.createElement("span");
      tag.className = "tag";
      tag.textContent = "interrupted";
      this.bot.appendChild(tag);
    }
    if (msg.error) this.setError(msg.error);
    renderTimeline(this.timeline, msg.timeline, msg.metrics, this.vadWaitMs);
  }
}

function turnView(turn) {
  let view = app.turns.get(turn);
  if (!view) {
    view = app.pendings.shift() || new TurnView();
    view.el.dataset.turn = turn;
    app.turns.set(turn, view);
  }
  return view;
}
function pendingView(text, vadWaitMs = null) {
  const view = new TurnView();
  if (text) view.setTranscript(text);
  view.vadWaitMs = vadWaitMs;
  app.pendings.push(view);
  return view;
}
function addNote(message, isError = false) {
  const p = document.createElement("p");
  p.className = isError ? "error-line" : "notice";
  p.textContent = isError ? `⚠ ${message}` : message;
  ui.conversation.prepend(p);
}

// --- timeline ------------------------------------------------------------------------
const ROWS = ["asr", "llm", "tts", "playback"];
function renderTimeline(el, tl, m, vadWaitMs) {
  if (!tl) return;
  el.hidden = false;
  el.textContent = "";
  const end = Math.max(tl.end, 0.001);
  const pct = (t) => `${Math.min(100, Math.max(0, (t / end) * 100)).toFixed(2)}%`;
  for (const stage of ROWS) {
    const row = div("tl-row");
    row.dataset.stage = stage;
    row.appendChild(div("tl-label", stage));
    const track = div("tl-track");
    let total = 0;
    for (const [a, b] of tl.spans[stage] || []) {
      const bar = div(`tl-bar ${stage}`);
      bar.style.left = pct(a);
      bar.style.width = pct(b - a);
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
  for (const f of [0, 0.25, 0.5, 0.75, 1]) ticks.appendChild(div("", `${(end * f).toFixed(2)} s`));
  axis.appendChild(ticks);
  axis.appendChild(div("", ""));
  el.appendChild(axis);
  el.appendChild(chips(m, vadWaitMs));
}
function chips(m, vadWaitMs) {
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
  if (vadWaitMs != null) add("end-of-speech wait (before t=0)", ms(vadWaitMs));
  if (m.interrupted) {
    add("barge-in → silence", ms(m.bargein_to_silence_ms));
    add("→ LLM closed", ms(m.bargein_to_llm_closed_ms));
    add("→ slot idle", ms(m.bargein_to_slot_idle_ms));
  }
  return box;
}
function div(cls, text) {
  const d = document.createElement("div");
  if (cls) d.className = cls;
  if (text !== undefined) d.textContent = text;
  return d;
}
function mark(left, glyph, title) {
  const s = div("tl-mark", glyph);
  s.style.left = left;
  s.title = title;
  return s;
}

// --- microphone capture, VAD and push-to-talk ----------------------------------------
const WORKLET = `
class Tap extends AudioWorkletProcessor {
  process(inputs) {
    const ch = inputs[0] && inputs[0][0];
    if (ch) this.port.postMessage(ch.slice(0));
    return true;
  }
}
registerProcessor("voice-llm-tap", Tap);`;

const capture = {
  ctx: null, stream: null, rate: 16000, frameLen: 320, partial: [], partialLen: 0,
  preRoll: [], recording: false, voicedFrames: 0, silentFrames: 0, aboveFrames: 0,
  frames: 0, floor: 0.004, threshold: VAD.minThreshold, startedAt: 0,

  async start() {
    try {
      this.ctx = new AudioContext({ sampleRate: 16000 }); // Whisper's rate: no resampling later
    } catch (e) {
      this.ctx = new AudioContext(); // the server resamples whatever rate we announce
    }
    this.rate = this.ctx.sampleRate;
    this.frameLen = Math.round(this.rate * VAD.frameMs / 1000);
    // The processing graph is ready before the microphone opens: no first syllable lost.
    let tap = null;
    if (this.ctx.audioWorklet) {
      const url = URL.createObjectURL(new Blob([WORKLET], { type: "text/javascript" }));
      await this.ctx.audioWorklet.addModule(url);
      tap = new AudioWorkletNode(this.ctx, "voice-llm-tap");
      tap.port.onmessage = (e) => this.onSamples(e.data);
    }
    try {
      this.stream = await navigator.mediaDevices.getUserMedia({
        audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true },
      });
    } catch (e) {
      this.ctx.close();
      throw e;
    }
    const source = this.ctx.createMediaStreamSource(this.stream);
    if (tap) {
      source.connect(tap);
    } else {
      // Older browsers: ScriptProcessor (deprecated, but everywhere).
      const node = this.ctx.createScriptProcessor(1024, 1, 1);
      node.onaudioprocess = (e) => this.onSamples(e.inputBuffer.getChannelData(0).slice(0));
      source.connect(node);
      node.connect(this.ctx.destination);
    }
  },

  onSamples(chunk) {
    if (!this.ctx) return; // a last message after stop()
    this.partial.push(chunk);
    this.partialLen += chunk.length;
    while (this.partialLen >= this.frameLen) this.onFrame(this.takeFrame());
  },
  takeFrame() {
    const frame = new Float32Array(this.frameLen);
    let filled = 0;
    while (filled < this.frameLen) {
      const head = this.partial[0];
      const n = Math.min(head.length, this.frameLen - filled);
      frame.set(head.subarray(0, n), filled);
      filled += n;
      if (n === head.length) this.partial.shift(); else this.partial[0] = head.subarray(n);
    }
    this.partialLen -= this.frameLen;
    return frame;
  },

  onFrame(frame) {
    this.frames += 1;
    let sum = 0;
    for (let i = 0; i < frame.length; i++) sum += frame[i] * frame[i];
    const rms = Math.sqrt(sum / frame.length);
    const speakingOver = busy() || player.active;
    const threshold = Math.max(VAD.minThreshold, this.floor * VAD.floorRatio)
      * (speakingOver ? VAD.bargeRatio : 1);
    this.threshold = threshold;
    const loud = rms > threshold;
    if (!this.recording && !loud) {
      // Track the room's noise floor only while nobody speaks; rise slowly, fall fast.
      this.floor = rms < this.floor ? 0.8 * this.floor + 0.2 * rms : 0.995 * this.floor + 0.005 * rms;
    }
    meter(rms, threshold);
    const pcm = toInt16(frame);
    if (this.recording) {
      send(pcm.buffer);
      if (loud) { this.voicedFrames += 1; this.silentFrames = 0; } else this.silentFrames += 1;
      const lengthMs = (performance.now() - this.startedAt);
      if (app.mode === "auto" && this.silentFrames * VAD.frameMs >= VAD.hangoverMs) this.end();
      else if (lengthMs > app.limits.max_utterance_s * 1000 - 500) this.end();
      return;
    }
    this.preRoll.push(pcm);
    if (this.preRoll.length > VAD.preRollMs / VAD.frameMs) this.preRoll.shift();
    if (app.mode !== "auto") return;
    this.aboveFrames = loud ? this.aboveFrames + 1 : 0;
    if (this.aboveFrames >= (speakingOver ? VAD.bargeFrames : VAD.onsetFrames)) {
      this.begin(this.aboveFrames);
    }
  },

  begin(voiced = 0) {
    if (!app.connected || this.recording) return;
    if (busy() || player.active) interrupt(); // the user talks over the assistant
    this.recording = true;
    this.voicedFrames = voiced;
    this.silentFrames = 0;
    this.aboveFrames = 0;
    this.startedAt = performance.now();
    send({ type: "audio.begin", sample_rate: this.rate });
    for (const pcm of this.preRoll) send(pcm.buffer);
    this.preRoll = [];
    setState("hearing");
  },
  end() {
    if (!this.recording) return;
    this.recording = false;
    // Hands-free: enough voiced frames; push-to-talk: the button was held long enough.
    const heldMs = performance.now() - this.startedAt;
    const enough = app.mode === "auto" ? this.voicedFrames * VAD.frameMs >= VAD.minSpeechMs
      : heldMs >= VAD.minSpeechMs;
    if (!enough) {
      send({ type: "audio.cancel" });
      refreshState("too short, ignored");
      return;
    }
    const trailing = app.mode === "auto" ? this.silentFrames * VAD.frameMs : 0;
    send({ type: "audio.end", trailing_silence_ms: trailing });
    app.stats.utterancesSent += 1;
    pendingView(null, app.mode === "auto" ? trailing : null);
    setState("thinking");
  },
  abort() { this.recording = false; this.preRoll = []; },
  stop() {
    this.abort();
    if (this.stream) for (const track of this.stream.getTracks()) track.stop();
    if (this.ctx) this.ctx.close();
    this.stream = null;
    this.ctx = null;
    this.partial = [];
    this.partialLen = 0;
  },
};

function toInt16(frame) {
  const out = new Int16Array(frame.length);
  for (let i = 0; i < frame.length; i++) {
    const v = Math.max(-1, Math.min(1, frame[i]));
    out[i] = v < 0 ? v * 32768 : v * 32767;
  }
  return out;
}
function meter(rms, threshold) {
  const scale = (v) => Math.min(100, Math.sqrt(v / 0.3) * 100); // sqrt: quiet speech visible
  ui.level.style.width = `${scale(rms)}%`;
  ui.threshold.style.left = `${scale(threshold)}%`;
}

function interrupt() {
  if (!(busy() || player.active)) return;
  player.flush();
  player.muted = true; // late frames of the interrupted turn stay silent
  send({ type: "interrupt" });
  app.stats.interruptsSent += 1;
  showInterrupted();
}

// --- controls ------------------------------------------------------------------------
async function startMic() {
  ui.start.disabled = true;
  player.ensure(); // a user gesture: the only moment browsers allow audio to start
  try {
    await capture.start();
  } catch (e) {
    ui.start.disabled = false;
    showNotice(`Microphone unavailable: ${e.message || e.name}. You can still type.`);
    return;
  }
  app.micOn = true;
  ui.start.disabled = false;
  ui.start.textContent = "Mute microphone";
  ui.start.classList.remove("primary");
  applyMode();
  refreshState();
}
function stopMic() {
  if (capture.recording) capture.end();
  capture.stop();
  app.micOn = false;
  ui.start.textContent = "Start microphone";
  ui.start.classList.add("primary");
  meter(0, 0);
  applyMode();
  refreshState();
}
function applyMode() {
  ui.talk.disabled = !app.micOn || app.mode !== "ptt";
  ui.talk.hidden = app.mode !== "ptt";
  for (const input of ui.mode.querySelectorAll("input")) input.checked = input.value === app.mode;
}
function showNotice(text) { ui.notice.textContent = text; ui.notice.hidden = false; }

ui.start.addEventListener("click", () => (app.micOn ? stopMic() : startMic()));
ui.mode.addEventListener("change", (e) => {
  app.mode = e.target.value;
  localStorage.setItem("voice-llm-mode", app.mode);
  if (capture.recording) capture.end();
  applyMode();
});
ui.interrupt.addEventListener("click", interrupt);

function pttDown(e) {
  if (app.mode !== "ptt" || !app.micOn || capture.recording) return;
  e.preventDefault();
  ui.talk.classList.add("active");
  capture.begin();
}
function pttUp() {
  if (!ui.talk.classList.contains("active")) return;
  ui.talk.classList.remove("active");
  capture.end();
}
ui.talk.addEventListener("pointerdown", pttDown);
window.addEventListener("pointerup", pttUp);
window.addEventListener("keydown", (e) => {
  if (e.code === "Space" && !e.repeat && document.activeElement !== ui.typedText) pttDown(e);
  if (e.code === "Escape") interrupt();
});
window.addEventListener("keyup", (e) => { if (e.code === "Space") pttUp(); });

ui.typed.addEventListener("submit", (e) => {
  e.preventDefault();
  const text = ui.typedText.value.trim();
  if (!text || !app.connected) return;
  player.ensure();
  if (busy() || player.active) interrupt();
  send({ type: "text", text });
  ui.typedText.value = "";
  pendingView(text);
  setState("thinking");
});

if (!window.isSecureContext || !navigator.mediaDevices) {
  ui.start.disabled = true;
  showNotice("The microphone needs https or http://localhost; this page is at "
    + `${location.origin}. Typed messages still work.`);
}
applyMode();
connect();
