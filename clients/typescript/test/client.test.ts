// The client against a real `om serve` (OM_TS_BASE_URL, OM_TS_API_KEY: tests/client_ts starts one), and
// its retries against a small local HTTP server that answers 503 on purpose.
//
//   OM_TS_BASE_URL=http://127.0.0.1:8088 OM_TS_API_KEY=omk_... npm test
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server } from "node:http";
import { connect, createServer as createTcpServer, type AddressInfo, type Socket } from "node:net";
import { after, before, describe, test } from "node:test";

import {
  OMBadRequest,
  OMClient,
  type OMEvent,
  OMNotFound,
  OMRetriesExhausted,
  OMUnavailable,
  SSEParser,
  parseRetryAfter,
} from "../dist/index.js";

const BASE_URL = process.env.OM_TS_BASE_URL ?? "";
const API_KEY = process.env.OM_TS_API_KEY ?? "";
const live = { skip: BASE_URL === "" ? "OM_TS_BASE_URL is not set (no om server to test against)" : false };

const newId = (prefix: string) => `${prefix}-${randomUUID().slice(0, 12)}`;
const client = () => new OMClient(BASE_URL, { apiKey: API_KEY, timeoutMs: 60_000 });

async function collect(events: AsyncIterable<OMEvent>): Promise<OMEvent[]> {
  const out: OMEvent[] = [];
  for await (const event of events) out.push(event);
  return out;
}

/** A thread with a few stored events: two exchanges, so several data-om-status events. */
async function threadWithEvents(om: OMClient): Promise<string> {
  const threadId = newId("ts-events");
  for (let i = 0; i < 3; i++) {
    await om.postTurn(threadId, [{ role: "user", text: `question ${i} about the harbour` }], { context: "none" });
    await om.postTurn(threadId, [{ role: "assistant", text: `answer ${i}: the ferry leaves at ${i + 7}` }], {
      context: "none",
    });
  }
  return threadId;
}

describe("against om serve", live, () => {
  test("a turn round trip: user message with the openai context, reply with none", async () => {
    const om = client();
    const threadId = newId("ts-turn");
    const resourceId = newId("ts-user");
    const turn = await om.postTurn(threadId, [{ role: "user", text: "Hi, I'm Dana and I live in Porto" }], {
      resourceId,
      context: "openai",
    });
    assert.equal(turn.thread_id, threadId);
    assert.equal(turn.resource_id, resourceId);
    assert.ok(turn.context, "context: openai answers with a context");
    const sent = turn.context.openai_messages.map((m) => JSON.stringify(m));
    assert.ok(sent.some((m) => m.includes("I live in Porto")), `the user message is in ${sent.join(", ")}`);
    assert.deepEqual(turn.context.messages, [], "only the openai form was asked for");

    const reply = await om.postTurn(threadId, [{ id: "reply-1", role: "assistant", text: "Welcome, Dana!" }], {
      resourceId,
      context: "none",
    });
    assert.equal(reply.context, null);

    const page = await om.messages(threadId);
    const stored = page.messages.map((m) => [m.role, m.id]);
    assert.equal(stored.length, 2, JSON.stringify(stored));
    assert.ok(stored.some(([role, id]) => role === "user" && String(id).startsWith("msg-")), "client-given id");
    assert.ok(stored.some(([role, id]) => role === "assistant" && id === "reply-1"));

    // The same turn again (what a retry sends): stored once.
    await om.postTurn(threadId, [{ id: "reply-1", role: "assistant", text: "Welcome, Dana!" }], {
      resourceId,
      context: "none",
    });
    assert.equal((await om.messages(threadId)).messages.length, 2);
  });

  test("several people in one thread: a message's name is stored and given back", async () => {
    const om = client();
    const threadId = newId("ts-speakers");
    const turn = await om.postTurn(
      threadId,
      [
        { role: "user", name: "Alice", text: "I moved to Porto" },
        { role: "user", name: "Bob", text: "My dog is called Rufus" },
      ],
      { context: "openai" },
    );
    assert.ok(turn.context, "context: openai answers with a context");
    const named = turn.context.openai_messages.filter((m) => m.role === "user" && "name" in m);
    assert.deepEqual(
      named.map((m) => [m.name, m.content]),
      [
        ["Alice", "I moved to Porto"],
        ["Bob", "My dog is called Rufus"],
      ],
    );
    const stored = (await om.messages(threadId)).messages.map((m) => m.metadata?.["name"]);
    assert.deepEqual(stored, ["Alice", "Bob"], "stored as the message's metadata.name");
  });

  test("status and observations of the thread", async () => {
    const om = client();
    const threadId = newId("ts-status");
    await om.postTurn(threadId, [{ role: "user", text: "I collect old maps" }], { context: "none" });
    const status = await om.status(threadId);
    assert.ok(status.windows.active.messages.tokens > 0, JSON.stringify(status.windows));
    assert.ok(status.windows.active.messages.threshold > 0);
    const observations = await om.observations(threadId);
    assert.equal(typeof observations.active?.observations, "string");
    const thread = await om.thread(threadId);
    assert.equal(thread.thread_id, threadId);
  });

  test("events: a stream dropped after its first event resumes from the last cursor, every event once", async () => {
    const om = client();
    const threadId = await threadWithEvents(om);
    const all = await collect(om.events(threadId, { follow: false }));
    assert.ok(all.length >= 3, `a few events stored: ${all.map((e) => e.type)}`);
    assert.ok(all.every((e) => e.type.startsWith("data-om-") && typeof e.cursor === "string"));

    let first: OMEvent | undefined;
    for await (const event of om.events(threadId, { follow: false })) {
      first = event;
      break; // closes the connection
    }
    assert.ok(first?.cursor);
    const rest = await collect(om.events(threadId, { follow: false, lastEventId: first.cursor }));
    assert.deepEqual([first, ...rest].map((e) => e.id), all.map((e) => e.id));
  });

  test("events: a connection cut mid-stream reconnects by itself with Last-Event-ID", async () => {
    const om = client();
    const threadId = await threadWithEvents(om);
    const all = await collect(om.events(threadId, { follow: false }));
    const relay = await CuttingRelay.start(new URL(BASE_URL));
    try {
      const through = new OMClient(relay.url, { apiKey: API_KEY, retry: { baseDelayMs: 10 } });
      const got = await collect(through.events(threadId, { follow: false }));
      assert.deepEqual(got.map((e) => e.id), all.map((e) => e.id), "every event once");
      assert.equal(relay.requests.length, 2, "one cut connection, one resumed");
      assert.equal(relay.requests[0]?.lastEventId, null);
      assert.equal(relay.requests[1]?.lastEventId, all[0]?.cursor, "resumed after the first event");
    } finally {
      await relay.close();
    }
  });

  test("events: a live event arrives on a followed stream", async () => {
    const om = client();
    const threadId = await threadWithEvents(om);
    const stored = await collect(om.events(threadId, { follow: false }));
    const abort = new AbortController();
    const stream = om.events(threadId, { lastEventId: stored.at(-1)?.cursor ?? undefined, signal: abort.signal });
    const next = stream.next();
    await om.postTurn(threadId, [{ role: "user", text: "one more question" }], { context: "none" });
    const deadline = setTimeout(() => abort.abort(new Error("no live event within 30 s")), 30_000);
    try {
      const live = await next;
      assert.equal(live.done, false, "the stream delivered an event before the deadline");
      assert.ok(live.value.id > (stored.at(-1)?.id ?? 0), "a new event, not a replayed one");
    } finally {
      clearTimeout(deadline);
      abort.abort();
      await stream.return(undefined);
    }
  });

  test("errors carry the server's code and field", async () => {
    const om = client();
    await assert.rejects(om.status(newId("ts-missing")), (error: unknown) => {
      assert.ok(error instanceof OMNotFound, String(error));
      assert.equal(error.status, 404);
      assert.equal(error.code, "thread_not_found");
      return true;
    });
    const bad = [{ role: "robot", text: "beep" }] as unknown as Parameters<OMClient["postTurn"]>[1];
    await assert.rejects(om.postTurn(newId("ts-bad"), bad), (error: unknown) => {
      assert.ok(error instanceof OMBadRequest, String(error));
      assert.equal(error.status, 422);
      assert.equal(error.code, "invalid_request");
      assert.equal(error.field, "messages[0].role");
      return true;
    });
    const anonymous = new OMClient(BASE_URL, { apiKey: "omk_not-a-key", retry: { maxAttempts: 1 } });
    await assert.rejects(anonymous.status("t-1"), (error: unknown) => {
      assert.ok(error instanceof Error && "status" in error && error.status === 401, String(error));
      return true;
    });
  });
});

// ------------------------------------------------------------------------------------ retries, locally

/** A loopback server answering from a script, recording when each request arrived. */
class Scripted {
  readonly requests: Array<{ at: number; method: string; url: string; body: string }> = [];
  private constructor(private readonly server: Server) {}

  static async start(answer: (n: number, request: IncomingMessage) => [number, Record<string, string>, string]) {
    let scripted: Scripted | undefined;
    const server = createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on("data", (c: Buffer) => chunks.push(c));
      request.on("end", () => {
        const n = scripted!.requests.push({
          at: performance.now(),
          method: request.method ?? "",
          url: request.url ?? "",
          body: Buffer.concat(chunks).toString(),
        });
        const [status, headers, body] = answer(n, request);
        response.writeHead(status, { "content-type": "application/json", ...headers });
        response.end(body);
      });
    });
    scripted = new Scripted(server);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    return scripted;
  }

  get url(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

const unavailable = JSON.stringify({ error: { code: "database_unavailable", message: "the database is unreachable" } });

describe("retries", () => {
  let server: Scripted;
  before(async () => {
    server = await Scripted.start((n) =>
      n <= 2
        ? [503, { "retry-after": "1" }, unavailable]
        : [200, {}, JSON.stringify({ thread_id: "t", events: [], context: null })],
    );
  });
  after(() => server.close());

  test("a turn answered 503 with Retry-After is sent again no sooner, with the same message ids", async () => {
    const om = new OMClient(server.url, { retry: { baseDelayMs: 10 } });
    const turn = await om.postTurn("t", [{ role: "user", text: "hello" }], { context: "none" });
    assert.equal(turn.thread_id, "t");
    const times = server.requests.map((r) => r.at);
    assert.equal(times.length, 3, "two 503s, then the answer");
    for (let i = 1; i < times.length; i++) {
      const gap = times[i]! - times[i - 1]!;
      assert.ok(gap >= 990, `attempt ${i + 1} came ${gap.toFixed(0)} ms after the previous one (Retry-After: 1)`);
    }
    const bodies = new Set(server.requests.map((r) => r.body));
    assert.equal(bodies.size, 1, "every attempt sent the same body");
    const [body] = [...bodies];
    const sent = JSON.parse(body!) as { messages: Array<{ id: string }> };
    assert.match(sent.messages[0]!.id, /^msg-/, "the client gave the message an id before the first attempt");
  });

  test("the retry limits end in OMRetriesExhausted carrying the last answer", async () => {
    const always = await Scripted.start(() => [503, { "retry-after": "0" }, unavailable]);
    try {
      const om = new OMClient(always.url, { retry: { maxAttempts: 3, baseDelayMs: 5 } });
      await assert.rejects(om.status("t"), (error: unknown) => {
        assert.ok(error instanceof OMRetriesExhausted, String(error));
        assert.ok(error instanceof OMUnavailable);
        assert.equal(error.attempts, 3);
        assert.equal(error.status, 503);
        assert.equal(error.code, "database_unavailable");
        return true;
      });
      assert.equal(always.requests.length, 3);
    } finally {
      await always.close();
    }
  });

  test("errors that a retry cannot fix are not retried", async () => {
    const refusing = await Scripted.start(() => [
      422,
      {},
      JSON.stringify({ error: { code: "invalid_request", message: "messages: bad", field: "messages" } }),
    ]);
    try {
      const om = new OMClient(refusing.url, { retry: { baseDelayMs: 5 } });
      await assert.rejects(om.postTurn("t", [{ role: "user", text: "x" }]), OMBadRequest);
      assert.equal(refusing.requests.length, 1);
    } finally {
      await refusing.close();
    }
  });

  test("a refused connection is retried, then reported with the attempts", async () => {
    const gone = await Scripted.start(() => [200, {}, "{}"]);
    const url = gone.url;
    await gone.close();
    const om = new OMClient(url, { retry: { maxAttempts: 2, baseDelayMs: 5 } });
    await assert.rejects(om.status("t"), (error: unknown) => {
      assert.ok(error instanceof OMRetriesExhausted, String(error));
      assert.equal(error.attempts, 2);
      assert.equal(error.status, 0);
      return true;
    });
  });

  test("an event stream answered 503 is opened again after Retry-After", async () => {
    const sse = 'retry: 10\n\nid: 5\ndata: {"id":5,"type":"data-om-status","data":{}}\n\n';
    const flaky = await Scripted.start((n) =>
      n === 1 ? [503, { "retry-after": "1" }, unavailable] : [200, { "content-type": "text/event-stream" }, sse],
    );
    try {
      const om = new OMClient(flaky.url, { retry: { baseDelayMs: 5 } });
      const got = [];
      for await (const event of om.events("t", { follow: false })) got.push(event);
      assert.deepEqual(got, [{ id: 5, type: "data-om-status", data: {}, cursor: "5" }]);
      const [first, second] = flaky.requests;
      assert.equal(flaky.requests.length, 2);
      assert.ok(second!.at - first!.at >= 990, `reopened after ${(second!.at - first!.at).toFixed(0)} ms`);
      assert.match(second!.url, /^\/v1\/threads\/t\/events\?follow=false$/);
    } finally {
      await flaky.close();
    }
  });

  test("Retry-After as seconds or as an HTTP date", () => {
    assert.equal(parseRetryAfter("3"), 3);
    assert.equal(parseRetryAfter(null), null);
    const now = Date.parse("2026-01-01T00:00:00Z");
    assert.equal(parseRetryAfter("Thu, 01 Jan 2026 00:00:05 GMT", now), 5);
  });

  test("SSE framing: cursor, data, comments and retry, across chunk boundaries", () => {
    const parser = new SSEParser();
    const text = 'retry: 2000\n\n: keep-alive\n\nid: 7~1\ndata: {"id":8,"type":"data-om-status","data":{}}\r\n\n';
    const events = [...text].flatMap((c) => parser.feed(c));
    assert.equal(parser.retryMs, 2000);
    assert.deepEqual(events, [{ id: 8, type: "data-om-status", data: {}, cursor: "7~1" }]);
  });
});

// ----------------------------------------------------------------------------------- the cutting relay

/** A TCP relay to the server that cuts its first connection right after the first SSE message carrying
 * data has passed (a dropped connection, for real), and relays later connections untouched. It records
 * each request's Last-Event-ID. */
class CuttingRelay {
  readonly requests: Array<{ lastEventId: string | null }> = [];
  private readonly sockets = new Set<Socket>();
  private constructor(private readonly server: ReturnType<typeof createTcpServer>) {}

  static async start(target: URL): Promise<CuttingRelay> {
    let relay: CuttingRelay | undefined;
    let connections = 0;
    const server = createTcpServer((client) => {
      const cut = connections++ === 0;
      const upstream = connect(Number(target.port), target.hostname);
      relay!.sockets.add(client).add(upstream);
      let head = "";
      client.on("data", (chunk: Buffer) => {
        if (head.length < 65_536 && !head.includes("\r\n\r\n")) {
          head += chunk.toString("latin1");
          if (head.includes("\r\n\r\n")) {
            const match = /^last-event-id:\s*(.*)$/im.exec(head.split("\r\n\r\n")[0]!);
            relay!.requests.push({ lastEventId: match ? match[1]!.trim() : null });
          }
        }
        upstream.write(chunk);
      });
      let seen = "";
      upstream.on("data", (chunk: Buffer) => {
        if (!cut) return void client.write(chunk);
        const before = seen.length;
        seen += chunk.toString("latin1");
        const data = seen.indexOf("\ndata: ");
        const end = data === -1 ? -1 : seen.indexOf("\n\n", data);
        if (end === -1) return void client.write(chunk);
        client.write(chunk.subarray(0, end + 2 - before), () => {
          client.destroy();
          upstream.destroy();
        });
      });
      const close = () => {
        client.destroy();
        upstream.destroy();
      };
      client.on("error", close).on("close", close);
      upstream.on("error", close).on("close", close);
    });
    relay = new CuttingRelay(server);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    return relay;
  }

  get url(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}
