// The status line: one state at a time, derived from what the page is doing.
import { capture } from "./capture.js";
import { ui } from "./dom.js";
import { player } from "./player.js";
import { busy, session } from "./session.js";

const TEXT = {
  connecting: "connecting…", disconnected: "disconnected, retrying…", ready: "ready",
  listening: "listening", hearing: "hearing you", thinking: "thinking",
  speaking: "speaking", interrupted: "interrupted",
};

let interruptedTimer = 0;

export function setState(state, detail = "") {
  session.state = state;
  ui.status.dataset.state = state;
  ui.statusText.textContent = TEXT[state] || state;
  ui.statusDetail.textContent = detail;
  ui.interrupt.disabled = !(busy() || player.active);
  if (state !== "interrupted") clearTimeout(interruptedTimer);
}

function idleState() {
  if (!session.connected) return "disconnected";
  if (capture.recording) return "hearing";
  if (player.active) return "speaking";
  if (busy()) return "thinking";
  return session.micOn ? "listening" : "ready";
}

export function refreshState(detail = "") {
  if (session.state === "interrupted" && !capture.recording) { // shown briefly, see below
    ui.interrupt.disabled = !(busy() || player.active);
    return;
  }
  setState(idleState(), detail);
}

export function showInterrupted() {
  setState("interrupted");
  clearTimeout(interruptedTimer);
  interruptedTimer = setTimeout(() => { session.state = ""; refreshState(); }, 1200);
}
