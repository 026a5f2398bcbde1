// The conversation on the page: one view per turn, newest first. A view is created when
// the user's input is sent (pending) and bound to the server's turn number when that turn
// starts; both the turn's events and errors name the input id, so nothing is guessed.
// A speculative turn (started at a pause, services/web_live.py) gets a hidden view: shown
// when the server confirms it, dropped when the user went on talking.
import { ui } from "./dom.js";
import { session } from "./session.js";
import { renderTimeline } from "./timeline.js";

const turns = new Map(); // server turn number -> view
const failed = new Map(); // input id -> error that came before its view existed

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
  // rejoined: {text, turn} when this message begins with the words of a turn whose reply
  // was cut before it could be kept (the server joined them: text is the whole message).
  setTranscript(text, rejoined = null) {
    this.you.classList.remove("pending");
    this.you.textContent = text || "(no speech heard)";
    if (rejoined) {
      const note = document.createElement("span");
      note.className = "rejoined";
      note.textContent = ` [with turn ${rejoined.turn}'s words, cut off]`;
      this.you.appendChild(note);
    }
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
    if (msg.transcript) this.setTranscript(msg.transcript, msg.rejoined);
    if (!this.sentences.size && msg.reply) this.addSentence(0, msg.reply);
    if (msg.interrupted) {
      const tag = document.createElement("span");
      tag.className = "tag";
      tag.textContent = "interrupted";
      this.bot.appendChild(tag);
    }
    if (msg.error) this.setError(msg.error);
    renderTimeline(this.timeline, msg.timeline, msg.metrics, this.vadWaitMs, msg.speculation);
  }
}

// The view of server turn ``turn``; ``inputId`` (when the server names it) is the input the
// turn answers, whose pending view it takes over.
export function turnView(turn, inputId = null) {
  let view = turns.get(turn);
  if (!view) {
    view = session.pending.get(inputId) || new TurnView();
    session.pending.delete(inputId);
    view.el.dataset.turn = turn;
    turns.set(turn, view);
  }
  return view;
}

// A speculative turn's view: filled like any other, out of sight until revealView().
export function speculativeView(turn, inputId) {
  const view = new TurnView();
  view.el.hidden = true;
  view.el.dataset.turn = turn;
  view.el.dataset.speculative = "";
  view.inputId = inputId;
  turns.set(turn, view);
  return view;
}

export function revealView(turn) {
  const view = turns.get(turn);
  if (!view) return null;
  view.el.hidden = false;
  delete view.el.dataset.speculative;
  ui.conversation.prepend(view.el); // newest first: notes may have come since it started
  return view;
}

export function discardView(turn) {
  const view = turns.get(turn);
  if (view) { view.el.remove(); turns.delete(turn); }
  return view;
}

// A view for an input just sent (its turn has not started yet).
export function pendingView(inputId, text, vadWaitMs = null) {
  const view = new TurnView();
  if (text) view.setTranscript(text);
  view.vadWaitMs = vadWaitMs;
  const early = failed.get(inputId);
  failed.delete(inputId);
  if (early) view.setError(early); // it failed while still being sent: no turn will come
  else session.pending.set(inputId, view);
  return view;
}

// An error from the server: on its input's view, or kept for the view still to come (the
// utterance being recorded), or else a line of its own.
export function showError(message, inputId, viewComing = false) {
  const view = session.pending.get(inputId);
  if (view) {
    session.pending.delete(inputId);
    view.setError(message);
  } else if (inputId && viewComing) {
    failed.set(inputId, message);
  } else {
    addNote(message, true);
  }
}

export function forgetPending() { session.pending.clear(); failed.clear(); }

export function addNote(message, isError = false) {
  const p = document.createElement("p");
  p.className = isError ? "error-line" : "notice";
  p.textContent = isError ? `⚠ ${message}` : message;
  ui.conversation.prepend(p);
}
