// Follows a thread's event stream. EventSource cannot send the Authorization header, so this reads the
// stream with fetch() and parses Server-Sent Events itself. It keeps the last `id:` (the server's resume
// cursor) and, when the stream drops, reconnects with it as Last-Event-ID after 1 s, then 2, 4, 5, 5 s:
// the server replays exactly what the page missed, so no event is lost or shown twice.

import { authHeaders, seg } from "./api.js";

const MIN_DELAY_MS = 1000;
const MAX_DELAY_MS = 5000;

/** Parse SSE text blocks; calls `dispatch({id, data})` per message that has data. Returns the rest. */
export function parseBlocks(buffer, dispatch) {
  const normalised = buffer.replace(/\r\n?/g, "\n");
  const blocks = normalised.split("\n\n");
  const rest = blocks.pop();
  for (const block of blocks) {
    let id = null;
    const data = [];
    for (const line of block.split("\n")) {
      if (!line || line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "id") id = value;
      else if (field === "data") data.push(value);
    }
    if (data.length) dispatch({ id, data: data.join("\n") });
    else if (id !== null) dispatch({ id, data: null });
  }
  return rest;
}

/**
 * Follow `/v1/threads/{id}/events`. `onEvent(event, cursor)` gets each parsed `{id, type, data}`;
 * `onState(state)` gets "connecting", "live", "reconnecting", or "stopped" (404/401: nothing to follow).
 * Returns `{close(), cursor()}`.
 */
export function follow(threadId, { onEvent, onState, onUnauthorized }) {
  let cursor = null;
  let stopped = false;
  let controller = null;
  let delay = MIN_DELAY_MS;
  let wake = null;

  const pause = (ms) =>
    new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });

  async function readBody(body) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer = parseBlocks(buffer + value, ({ id, data }) => {
        if (data !== null) {
          let event = null;
          try {
            event = JSON.parse(data);
          } catch {
            event = null; // not one of ours: skip it, keep the stream
          }
          if (event) onEvent(event, id);
        }
        if (id !== null) cursor = id;
      });
    }
  }

  async function run() {
    onState("connecting");
    while (!stopped) {
      controller = new AbortController();
      try {
        const headers = authHeaders({ Accept: "text/event-stream" });
        if (cursor) headers["Last-Event-ID"] = cursor;
        const response = await fetch(`/v1/threads/${seg(threadId)}/events`, {
          headers,
          signal: controller.signal,
          cache: "no-store",
        });
        if (response.status === 401 || response.status === 404) {
          onState("stopped");
          if (response.status === 401 && onUnauthorized) onUnauthorized();
          return;
        }
        if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
        onState("live");
        delay = MIN_DELAY_MS;
        await readBody(response.body);
      } catch {
        // a dropped connection or a refused one: retried below, with the cursor
      }
      if (stopped) return;
      onState("reconnecting");
      await pause(delay);
      delay = Math.min(delay * 2, MAX_DELAY_MS);
    }
  }

  run();
  return {
    close() {
      stopped = true;
      if (controller) controller.abort();
      if (wake) wake();
      onState("stopped");
    },
    cursor: () => cursor,
  };
}
