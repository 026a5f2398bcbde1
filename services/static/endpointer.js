// Hands-free end of an utterance, one 20 ms frame at a time (pure: no DOM, no I/O, so
// tests/test_web_endpointer.py runs it in node). capture.js feeds it whether each frame was
// above the speech threshold and sends what it returns:
//   {type: "audio.gap", silence_ms, voiced_ms}    after gapMs of silence inside speech:
//                                                  the server starts Whisper on the audio so
//                                                  far, for the pause that may follow
//   {type: "audio.pause", pause: N, silence_ms, voiced_ms}
//                                                  after pauseMs of silence inside speech:
//                                                  the server speculates on the audio so far
//   {type: "audio.resume", pause: N, silence_ms}  the voice came back: that speculation is off
//   {type: "end", trailing_ms, endpoint_ms}       the silence reached the wait: end it
// The wait is the server's `endpoint` for the current pause (endpoint()), or fallbackMs
// until one arrives (and after the voice comes back). While the server holds the end
// (hold(): its speculative reply has no audio yet, so nothing could be played sooner) the
// wait passing does not end the utterance, until ready() or heldMaxMs of silence.
// voiced_ms (the voice heard in the utterance so far) names the words a gap or pause is
// about: a pause with the gap's voiced_ms had nothing voiced since, so the server's
// transcript from the gap is the pause's. Protocol: services/web_live.py.
export class Endpointer {
  // gapMs: 100 (five frames), the page's nearest to talk's 96 ms (three Silero windows);
  // 0 sends no gaps.
  constructor({ frameMs = 20, gapMs = 100, pauseMs = 200, fallbackMs = 700, minSpeechMs = 250,
                heldMaxMs = 3000 } = {}) {
    Object.assign(this, { frameMs, gapMs, pauseMs, fallbackMs, minSpeechMs, heldMaxMs });
    this.speculate = true; // false: no gap or pause messages (push-to-talk, --no-speculate)
    this.reset();
  }

  // A new utterance, ``voicedFrames`` of it already heard (the onset).
  reset(voicedFrames = 0) {
    this.voicedFrames = voicedFrames;
    this.silentFrames = 0;
    this.pauses = 0; // pauses reported in this utterance
    this.gapped = false; // the current silence was reported as a gap
    this.paused = false; // the current silence was reported as a pause
    this.waitMs = null; // the server's endpoint for that pause
    this.held = false; // the server holds the end until its reply is ready
  }

  get silenceMs() { return this.silentFrames * this.frameMs; }
  get voicedMs() { return this.voicedFrames * this.frameMs; }
  get endAfterMs() { return this.waitMs ?? this.fallbackMs; }

  frame(loud) {
    if (loud) {
      const resumed = this.paused
        ? { type: "audio.resume", pause: this.pauses, silence_ms: this.silenceMs } : null;
      this.voicedFrames += 1;
      this.silentFrames = 0;
      this.gapped = false;
      this.paused = false;
      this.waitMs = null; // the endpoint judged the words up to that pause only
      this.held = false; // and the reply it held for is abandoned
      return resumed;
    }
    this.silentFrames += 1;
    const held = this.held && this.silenceMs < this.heldMaxMs;
    if (this.silenceMs >= this.endAfterMs && !held) {
      return { type: "end", trailing_ms: this.silenceMs, endpoint_ms: this.waitMs };
    }
    // A cough is not worth a turn (nor Whisper).
    if (!this.speculate || this.voicedMs < this.minSpeechMs) return null;
    if (!this.paused && this.silenceMs >= this.pauseMs) {
      this.paused = true;
      this.pauses += 1;
      return { type: "audio.pause", pause: this.pauses, silence_ms: this.silenceMs,
               voiced_ms: this.voicedMs };
    }
    if (this.gapMs > 0 && !this.gapped && !this.paused && this.silenceMs >= this.gapMs) {
      this.gapped = true; // once per silence; a gap reported once the pause is due is moot
      return { type: "audio.gap", silence_ms: this.silenceMs, voiced_ms: this.voicedMs };
    }
    return null;
  }

  // The server's messages about pause ``pause``; each returns true if it applies (the
  // voice has not come back since, so it is about the words so far).
  // endpoint: the wait that ends the utterance after it.
  endpoint(pause, waitMs) {
    if (!this.current(pause)) return false;
    this.waitMs = waitMs;
    return true;
  }

  // hold: a speculative reply started on it; the end waits for ready (or heldMaxMs).
  hold(pause) {
    if (!this.current(pause)) return false;
    this.held = true;
    return true;
  }

  // ready: that reply's first audio is ready, or it ended without any. A wait already
  // passed ends the utterance at the next frame.
  ready(pause) {
    if (!this.current(pause)) return false;
    this.held = false;
    return true;
  }

  current(pause) { return this.paused && pause === this.pauses; }
}
