// The one conversation this tab holds with the server: connection and turn state, limits,
// counters. It is also the tests' window onto the page (window.voiceLlm).
export const session = {
  state: "connecting", connected: false,
  mode: localStorage.getItem("voice-llm-mode") || "auto",
  micOn: false, running: false, // a server turn is between turn.start and turn.result
  current: null, // that turn's number
  speculate: false, // the server speculates on pauses (hello.speculate; serve --no-speculate)
  speculating: null, // {turn, inputId}: a speculative turn runs, unseen until confirmed
  lastEnd: null, // how the last utterance ended: {inputId, trailingMs, endpointMs, pauses}
  pending: new Map(), // input id -> its turn's view, for inputs whose turn has not started
  limits: { max_utterance_s: 60, max_text_chars: 2000 },
  stats: { audioFrames: 0, samplesReceived: 0, samplesScheduled: 0, underruns: 0,
           interruptsSent: 0, utterancesSent: 0, gapsSent: 0, pausesSent: 0, endpointsUsed: 0,
           speculationsConfirmed: 0, speculationsDropped: 0, errors: [] },
  log: [],
};

// The assistant is working on something: a turn runs, or an input waits for its turn.
export const busy = () => session.running || session.pending.size > 0;

// Client input ids: every utterance or typed message carries one, and the server names it
// in the turn's events and in errors, so both land on the right turn.
let inputs = 0;
export const nextInputId = () => `c${++inputs}`;
