// The microphone: 16 kHz capture through an AudioWorklet, 20 ms frames, an energy VAD that
// cuts utterances (hands-free) or follows the push-to-talk button, and the PCM sent on.
// Hands-free, the end of an utterance listens (endpointer.js): its gaps and pauses go to the
// server, which starts Whisper at a gap, speculates on a pause, answers with the silence
// that ends this utterance and holds the end until its speculative reply is ready.
// What an utterance means for the conversation is the caller's: see the hooks below.
import { Endpointer } from "./endpointer.js";
import { player } from "./player.js";
import { busy, nextInputId, session } from "./session.js";

// Energy-based end-of-utterance detection, in 20 ms frames.
const VAD = {
  frameMs: 20,
  onsetFrames: 3,        // 60 ms above threshold: speech started
  bargeFrames: 5,        // while the assistant talks, demand 100 ms (echo / noise margin)
  hangoverMs: 700,       // this much silence ends the utterance, unless the server says
  gapMs: 100,            // a gap this long is reported (the server starts Whisper on it)
  pauseMs: 200,          // a pause this long is reported (the server speculates on it)
  minSpeechMs: 250,      // shorter bursts (clicks, coughs) are not turns
  preRollMs: 300,        // sent before the onset so the first syllable is not clipped
  minThreshold: 0.012,   // RMS; real rooms raise it through the noise floor
  floorRatio: 3.5,
  bargeRatio: 2,         // threshold multiplier while the assistant is speaking
};

const WORKLET = `
class Tap extends AudioWorkletProcessor {
  process(inputs) {
    const ch = inputs[0] && inputs[0][0];
    if (ch) this.port.postMessage(ch.slice(0));
    return true;
  }
}
registerProcessor("voice-llm-tap", Tap);`;

export const capture = {
  ctx: null, stream: null, rate: 16000, frameLen: 320, partial: [], partialLen: 0,
  preRoll: [], recording: false, aboveFrames: 0,
  frames: 0, floor: 0.004, threshold: VAD.minThreshold, startedAt: 0, inputId: null,
  endpointer: new Endpointer({ frameMs: VAD.frameMs, gapMs: VAD.gapMs, pauseMs: VAD.pauseMs,
                               fallbackMs: VAD.hangoverMs, minSpeechMs: VAD.minSpeechMs }),
  // Hooks (set by app.js): send a message or PCM; an utterance began (the user may be
  // talking over the assistant); it ended (trailingMs: silence after it, null for
  // push-to-talk) or was too short; the level meter.
  send: () => false,
  onBegin: () => {},
  onEnd: (inputId, trailingMs) => {},
  onTooShort: () => {},
  onLevel: (rms, threshold) => {},

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
    this.onLevel(rms, threshold);
    const pcm = toInt16(frame);
    if (this.recording) {
      this.send(pcm.buffer);
      const act = this.endpointer.frame(loud);
      const lengthMs = (performance.now() - this.startedAt);
      if (session.mode === "auto" && act && act.type === "end") this.end();
      else if (lengthMs > session.limits.max_utterance_s * 1000 - 500) this.end();
      else if (session.mode === "auto" && act) {
        this.send({ ...act, input_id: this.inputId }); // audio.gap / .pause / .resume
        if (act.type === "audio.pause") session.stats.pausesSent += 1;
        if (act.type === "audio.gap") session.stats.gapsSent += 1;
      }
      return;
    }
    this.preRoll.push(pcm);
    if (this.preRoll.length > VAD.preRollMs / VAD.frameMs) this.preRoll.shift();
    if (session.mode !== "auto") return;
    this.aboveFrames = loud ? this.aboveFrames + 1 : 0;
    if (this.aboveFrames >= (speakingOver ? VAD.bargeFrames : VAD.onsetFrames)) {
      this.begin(this.aboveFrames);
    }
  },

  begin(voiced = 0) {
    if (!session.connected || this.recording) return;
    this.onBegin();
    this.recording = true;
    this.endpointer.reset(voiced);
    this.endpointer.speculate = session.speculate && session.mode === "auto";
    this.aboveFrames = 0;
    this.startedAt = performance.now();
    this.inputId = nextInputId();
    this.send({ type: "audio.begin", sample_rate: this.rate, input_id: this.inputId });
    for (const pcm of this.preRoll) this.send(pcm.buffer);
    this.preRoll = [];
  },
  end() {
    if (!this.recording) return;
    this.recording = false;
    // Hands-free: enough voiced frames; push-to-talk: the button was held long enough.
    const heldMs = performance.now() - this.startedAt;
    const ep = this.endpointer;
    const enough = session.mode === "auto" ? ep.voicedMs >= VAD.minSpeechMs
      : heldMs >= VAD.minSpeechMs;
    if (!enough) {
      this.send({ type: "audio.cancel" });
      this.onTooShort();
      return;
    }
    const trailing = session.mode === "auto" ? ep.silenceMs : 0;
    this.send({ type: "audio.end", trailing_silence_ms: trailing });
    session.stats.utterancesSent += 1;
    session.lastEnd = { inputId: this.inputId, trailingMs: trailing, endpointMs: ep.waitMs,
                        pauses: ep.pauses };
    this.onEnd(this.inputId, session.mode === "auto" ? trailing : null);
  },
  // The server's `endpoint` message: the silence that ends the utterance being recorded.
  onEndpoint(msg) {
    if (!this.recording || msg.input_id !== this.inputId) return false;
    const used = this.endpointer.endpoint(msg.pause, msg.wait_ms);
    if (used) session.stats.endpointsUsed += 1;
    return used;
  },
  // `hold` / `ready`: the server's speculative reply on that pause has no audio yet, so
  // the end waits for it / it is ready (or ended without audio), so the end may come.
  onHold(msg) {
    return this.recording && msg.input_id === this.inputId && this.endpointer.hold(msg.pause);
  },
  onReady(msg) {
    return this.recording && msg.input_id === this.inputId && this.endpointer.ready(msg.pause);
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
