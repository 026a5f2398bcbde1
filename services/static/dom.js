// The page's elements and two small element builders.
const $ = (id) => document.getElementById(id);

export const ui = {
  status: $("status"), statusText: $("status-text"), statusDetail: $("status-detail"),
  start: $("start"), mode: $("mode"), talk: $("talk"), interrupt: $("interrupt"),
  level: $("level"), threshold: $("threshold"), typed: $("typed"), typedText: $("typed-text"),
  notice: $("notice"), conversation: $("conversation"), session: $("session"),
  template: $("turn-template"),
};

export function div(cls, text) {
  const d = document.createElement("div");
  if (cls) d.className = cls;
  if (text !== undefined) d.textContent = text;
  return d;
}

export function mark(left, glyph, title) {
  const s = div("tl-mark", glyph);
  s.style.left = left;
  s.title = title;
  return s;
}
