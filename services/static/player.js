// Playback: the server's int16 frames scheduled back to back on one AudioContext, so the
// reply plays gaplessly; flush() silences it at once (barge-in).
import { session } from "./session.js";

export const player = {
  ctx: null, rate: 22050, leadS: 0.08, nextTime: 0, sources: new Set(), muted: false,
  onBlock: () => {}, // a block was scheduled to play
  onIdle: () => {}, // the last scheduled block has played
  get active() { return this.sources.size > 0; },

  ensure() {
    if (!this.ctx) this.ctx = new AudioContext();
    if (this.ctx.state === "suspended") this.ctx.resume();
  },
  setFormat(msg) { this.rate = msg.sample_rate; this.leadS = (msg.lead_ms || 80) / 1000; },
  push(buffer) {
    session.stats.audioFrames += 1;
    const pcm = new Int16Array(buffer);
    session.stats.samplesReceived += pcm.length;
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
      if (this.sources.size) session.stats.underruns += 1;
      this.nextTime = now + this.leadS;
    }
    src.start(this.nextTime);
    this.nextTime += buf.duration;
    this.sources.add(src);
    session.stats.samplesScheduled += pcm.length;
    src.onended = () => {
      this.sources.delete(src);
      if (!this.sources.size) this.onIdle();
    };
    this.onBlock();
  },
  flush() {
    for (const src of this.sources) { try { src.stop(); } catch (e) { /* not started */ } }
    this.sources.clear();
    this.nextTime = 0;
  },
};
