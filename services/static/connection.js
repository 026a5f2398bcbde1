// The WebSocket: connect (and reconnect with back-off), send, hand messages on.
// Protocol: services/web_session.py.
import { session } from "./session.js";

let ws = null;
let retryMs = 500;

// handlers: {message(msg), audio(arrayBuffer), open(), lost(wasConnected)}
export function connect(handlers) {
  // serve --api-key: the page is public, the WebSocket is not; open the page as /?key=KEY
  // (browsers cannot set an Authorization header on a WebSocket).
  const key = new URLSearchParams(location.search).get("key");
  const query = key ? `?key=${encodeURIComponent(key)}` : "";
  const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws${query}`;
  ws = new WebSocket(url);
  ws.binaryType = "arraybuffer";
  ws.onopen = () => { session.connected = true; retryMs = 500; handlers.open(); };
  ws.onmessage = (e) => {
    if (typeof e.data === "string") handlers.message(JSON.parse(e.data));
    else handlers.audio(e.data);
  };
  ws.onclose = () => {
    const was = session.connected;
    session.connected = false;
    handlers.lost(was);
    setTimeout(() => connect(handlers), retryMs);
    retryMs = Math.min(retryMs * 2, 8000);
  };
}

export function send(msg) {
  if (ws && ws.readyState === WebSocket.OPEN) {
    ws.send(typeof msg === "string" || msg instanceof ArrayBuffer ? msg : JSON.stringify(msg));
    return true;
  }
  return false;
}
