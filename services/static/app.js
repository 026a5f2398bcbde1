// voice-llm browser client: microphone -> WebSocket -> gapless WebAudio playback.
// Native ES modules, no build step, no CDN (the machines have no internet). This module
// wires them together and owns the controls; protocol: services/web_session.py.
// Test hooks: window.voiceLlm (the session).
import { capture } from "./capture.js";
import { connect, send } from "./connection.js";
import {
  addNote, discardView, forgetPending, pendingView, revealView, showError, speculativeView,
  turnView,
} from "./conversation.js";
import { ui } from "./dom.js";
import { player } from "./player.js";
import { busy, nextInputId, session } from "./session.js";
import { refreshState, setState, showInterrupted } from "./status.js";

window.voiceLlm = session;

// --- messages from the server ----------------------------------------------------------
function onMessage(msg) {
  session.log.push(msg);
  if (session.log.length > 500) session.log.shift();
  switch (msg.type) {
    case "hello":
      session.limits = msg.limits;
      session.speculate = msg.speculate === true;
      ui.session.textContent = `session ${msg.session}`;
      break;
    case "audio.format": player.setFormat(msg); break;
    case "audio.stop": player.flush(); refreshState(); break;
    case "event": onEvent(msg.event, msg.input_id, msg.speculative === true); break;
    case "endpoint": capture.onEndpoint(msg); break;
    case "hold": capture.onHold(msg); break;
    case "ready": capture.onReady(msg); break;
    case "transcript": // joined: the words of a cut turn went before these (rejoined)
      turnView(msg.turn).setTranscript(msg.joined ?? msg.text, msg.rejoined);
      break;
    case "sentence": turnView(msg.turn).addSentence(msg.index, msg.text); break;
    case "turn.result": onResult(msg); break;
    case "error": restoreLabel(); onError(msg.message, msg.input_id); break;
    case "queued": // every LLM slot is held by another conversation (services/api_slots.py)
      session.label ??= ui.session.textContent; // restored when the turn starts or fails
      ui.session.textContent = `waiting for a free LLM slot (position ${msg.position})`;
      break;
  }
}

function restoreLabel() {
  if (session.label != null) { ui.session.textContent = session.label; session.label = null; }
}

function onEvent(ev, inputId, speculative) {
  const name = `${ev.stage}.${ev.event}`; // event names: docs/contracts.md
  if (speculative) { // nothing audible yet, and it may never be: keep it out of sight
    if (name === "turn.start") {
      session.speculating = { turn: ev.turn, inputId };
      speculativeView(ev.turn, inputId);
    } else if (name === "speculation.cancelled" && session.speculating?.turn === ev.turn) {
      session.speculating = null;
    }
    return;
  }
  if (name === "speculation.confirmed" && session.speculating?.turn === ev.turn) {
    session.speculating = null;
    session.stats.speculationsConfirmed += 1;
    restoreLabel();
    player.muted = false;
    session.current = ev.turn;
    revealView(ev.turn);
    session.running = true;
    if (!capture.recording) refreshState();
  } else if (name === "turn.start") {
    restoreLabel();
    player.muted = false; // audio after this belongs to the new turn
    session.current = ev.turn;
    turnView(ev.turn, inputId);
    session.running = true;
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
  const dropped = msg.speculation && ["cancelled", "dropped"].includes(msg.speculation.state);
  if (dropped) { // a speculation never confirmed: it was never the answer
    if (session.speculating?.turn === msg.turn) session.speculating = null;
    const view = discardView(msg.turn);
    session.stats.speculationsDropped += 1;
    // It failed after the utterance ended: the turn on the whole utterance comes next.
    const ended = !(capture.recording && capture.inputId === msg.input_id);
    if (msg.speculation.state === "dropped" && ended && !session.pending.has(msg.input_id)) {
      pendingView(msg.input_id, null, view ? view.vadWaitMs : null);
    }
    return;
  }
  turnView(msg.turn, msg.input_id).finish(msg);
  if (msg.turn === session.current) session.running = false;
  refreshState();
}

function onError(message, inputId) {
  session.stats.errors.push(message);
  showError(message, inputId, capture.recording && inputId === capture.inputId);
  refreshState();
}

function onLost(wasConnected) {
  session.running = false;
  session.speculating = null;
  forgetPending();
  player.flush();
  capture.abort();
  setState("disconnected");
  if (wasConnected) addNote("Connection lost: a new conversation starts when it comes back.");
}

// --- the parts' hooks ------------------------------------------------------------------
player.onBlock = () => { if (session.state !== "speaking" && !capture.recording) setState("speaking"); };
player.onIdle = () => refreshState();

capture.send = send;
capture.onBegin = () => {
  if (busy() || player.active) interrupt("voice"); // the user talks over the assistant
  setState("hearing");
};
capture.onEnd = (inputId, trailingMs) => {
  const spec = session.speculating;
  if (spec && spec.inputId === inputId) {
    turnView(spec.turn).vadWaitMs = trailingMs; // the server confirms it on audio.end
  } else {
    pendingView(inputId, null, trailingMs);
  }
  setState("thinking");
};
capture.onTooShort = () => refreshState("too short, ignored");
capture.onLevel = meter;

function meter(rms, threshold) {
  const scale = (v) => Math.min(100, Math.sqrt(v / 0.3) * 100); // sqrt: quiet speech visible
  ui.level.style.width = `${scale(rms)}%`;
  ui.threshold.style.left = `${scale(threshold)}%`;
}

// by: "voice" when the user began to speak over the reply (a turn it cuts before enough
// was heard to keep it leaves its words for this utterance); none for the button.
function interrupt(by = null) {
  if (!(busy() || player.active)) return;
  player.flush();
  player.muted = true; // late frames of the interrupted turn stay silent
  send(by ? { type: "interrupt", by } : { type: "interrupt" });
  session.stats.interruptsSent += 1;
  showInterrupted();
}

// --- controls --------------------------------------------------------------------------
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
  session.micOn = true;
  ui.start.disabled = false;
  ui.start.textContent = "Mute microphone";
  ui.start.classList.remove("primary");
  applyMode();
  refreshState();
}
function stopMic() {
  if (capture.recording) capture.end();
  capture.stop();
  session.micOn = false;
  ui.start.textContent = "Start microphone";
  ui.start.classList.add("primary");
  meter(0, 0);
  applyMode();
  refreshState();
}
function applyMode() {
  ui.talk.disabled = !session.micOn || session.mode !== "ptt";
  ui.talk.hidden = session.mode !== "ptt";
  for (const input of ui.mode.querySelectorAll("input")) input.checked = input.value === session.mode;
}
function showNotice(text) { ui.notice.textContent = text; ui.notice.hidden = false; }

ui.start.addEventListener("click", () => (session.micOn ? stopMic() : startMic()));
ui.mode.addEventListener("change", (e) => {
  session.mode = e.target.value;
  localStorage.setItem("voice-llm-mode", session.mode);
  if (capture.recording) capture.end();
  applyMode();
});
ui.interrupt.addEventListener("click", () => interrupt());

function pttDown(e) {
  if (session.mode !== "ptt" || !session.micOn || capture.recording) return;
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
  if (!text || !session.connected) return;
  player.ensure();
  if (busy() || player.active) interrupt();
  const inputId = nextInputId();
  send({ type: "text", text, input_id: inputId });
  ui.typedText.value = "";
  pendingView(inputId, text);
  setState("thinking");
});

if (!window.isSecureContext || !navigator.mediaDevices) {
  ui.start.disabled = true;
  showNotice("The microphone needs https or http://localhost; this page is at "
    + `${location.origin}. Typed messages still work.`);
}
applyMode();
connect({ message: onMessage, audio: (data) => player.push(data), open: () => refreshState(),
          lost: onLost });
