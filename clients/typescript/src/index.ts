/**
 * TypeScript client for the om API (Node 20+, or any runtime with `fetch`; no runtime dependencies).
 *
 *     import { OMClient } from "@om/client";
 *
 *     const om = new OMClient("http://127.0.0.1:8088", { apiKey: "omk_..." });
 *     const turn = await om.postTurn("t-43", [{ role: "user", text: "Hi, I'm Dana" }], {
 *       resourceId: "user-7",
 *       context: "openai",
 *     });
 *     const reply = await myModel(turn.context!.openai_messages);
 *     await om.postTurn("t-43", [{ role: "assistant", text: reply }], { resourceId: "user-7", context: "none" });
 *     for await (const event of om.events("t-43", { follow: false })) console.log(event.id, event.type);
 *
 * Request and answer types come from `./schema.ts`, generated from the server's OpenAPI document; they are
 * looked up by path and method here, so a schema renamed on the server does not break this surface.
 */
import type { paths } from "./schema.js";

export type { components, operations, paths } from "./schema.js";

// ------------------------------------------------------------------------------------------- the types

type Json<T> = T extends { content: { "application/json": infer Body } } ? Body : never;
/** The JSON answer (200 or 201) of `method` on `path`. */
export type ResponseOf<P extends keyof paths, M extends keyof paths[P]> = paths[P][M] extends {
  responses: infer R;
}
  ? R extends { 200: infer OK }
    ? Json<OK>
    : R extends { 201: infer Created }
      ? Json<Created>
      : never
  : never;
/** The JSON request body of `method` on `path`. */
export type RequestOf<P extends keyof paths, M extends keyof paths[P]> = paths[P][M] extends {
  requestBody?: infer B;
}
  ? Json<NonNullable<B>>
  : never;

export type TurnRequest = RequestOf<"/v1/threads/{thread_id}/turns", "post">;
export type TurnResponse = ResponseOf<"/v1/threads/{thread_id}/turns", "post">;
/** A new message of a turn: `text` for the common case or `parts`; `id` makes resending it safe (the
 * client gives every message without one a random id before the first attempt). */
export type TurnMessage = NonNullable<TurnRequest["messages"]>[number];
/** `Omit` over each member of a union (the schema's text-xor-parts `oneOf` makes `TurnMessage` one). */
type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;
export type MessageInput = DistributiveOmit<TurnMessage, "id"> & { id?: string | null };
/** What the turn answers with: both forms (`full`), one (`openai`, `messages`) or no context (`none`). */
export type ContextForm = NonNullable<TurnRequest["context"]>;
export type StatusPayload = ResponseOf<"/v1/threads/{thread_id}/status", "get">;
export type ObservationsResponse = ResponseOf<"/v1/threads/{thread_id}/observations", "get">;
export type MessagesResponse = ResponseOf<"/v1/threads/{thread_id}/messages", "get">;
export type ThreadDetail = ResponseOf<"/v1/threads/{thread_id}", "get">;
export type SearchRequest = RequestOf<"/v1/resources/{resource_id}/search", "post">;
export type SearchResponse = ResponseOf<"/v1/resources/{resource_id}/search", "post">;
export type RecallResponse = ResponseOf<"/v1/threads/{thread_id}/recall", "post">;
export type HealthResponse = ResponseOf<"/healthz", "get">;
/** One `data-om-*` part of the thread's outbox, as the event stream and turns deliver it. */
export type OMEventBody = TurnResponse["events"][number];
/** An event read from the stream: `cursor` is the stream's resume cursor after it (pass the last one
 * handled as `lastEventId` to pick up later, in this process or another). */
export type OMEvent = Omit<OMEventBody, "cursor"> & { cursor: string | null };
/** The `error` object of every error answer. */
export type ErrorDetail = Json<
  paths["/v1/threads/{thread_id}/status"]["get"]["responses"][404]
>["error"];

// ------------------------------------------------------------------------------------------ the errors

/** An error answer of the API: `status`, and the body's `code`, `message`, `field`, `limit`, `errors`. */
export class OMAPIError extends Error {
  readonly status: number;
  readonly code: string;
  readonly field: string | null;
  readonly limit: number | null;
  readonly errors: ErrorDetail["errors"];
  /** Seconds the server asked to wait (`Retry-After`), when it said. */
  readonly retryAfter: number | null;

  constructor(
    status: number,
    code: string,
    message: string,
    options: {
      field?: string | null;
      limit?: number | null;
      errors?: ErrorDetail["errors"];
      retryAfter?: number | null;
      cause?: unknown;
    } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.status = status;
    this.code = code;
    this.field = options.field ?? null;
    this.limit = options.limit ?? null;
    this.errors = options.errors ?? null;
    this.retryAfter = options.retryAfter ?? null;
  }
}

/** 400/422: a field is invalid (`field` names it, `errors` lists every problem). */
export class OMBadRequest extends OMAPIError {}
/** 401: missing, unknown or revoked API key. */
export class OMUnauthorized extends OMAPIError {}
/** 404: the thread or resource does not exist for this key. */
export class OMNotFound extends OMAPIError {}
/** 409: the request conflicts with stored data (a message id reused with another role...). */
export class OMConflict extends OMAPIError {}
/** 413: a message or the request is over a limit (`limit` says which). */
export class OMPayloadTooLarge extends OMAPIError {}
/** 429: too many requests; `retryAfter` says when to come back. */
export class OMRateLimited extends OMAPIError {}
/** 503: the database or broker is down (or, with status 0, the server could not be reached). */
export class OMUnavailable extends OMAPIError {}
/** The retry limits passed: `attempts` tries, `lastError` the last failure (an answer or no answer). */
export class OMRetriesExhausted extends OMUnavailable {
  readonly attempts: number;
  readonly lastError: unknown;

  constructor(attempts: number, lastError: unknown) {
    const last = lastError instanceof OMAPIError ? lastError : null;
    const why = last ? `${last.status} ${last.code}: ${last.message}` : describe(lastError);
    super(last?.status ?? 0, last?.code ?? "unreachable", `gave up after ${attempts} attempts: ${why}`, {
      field: last?.field,
      limit: last?.limit,
      retryAfter: last?.retryAfter,
      cause: lastError,
    });
    this.attempts = attempts;
    this.lastError = lastError;
  }
}

const ERRORS: Record<number, typeof OMAPIError> = {
  400: OMBadRequest,
  401: OMUnauthorized,
  404: OMNotFound,
  409: OMConflict,
  413: OMPayloadTooLarge,
  422: OMBadRequest,
  429: OMRateLimited,
  503: OMUnavailable,
};

function describe(error: unknown): string {
  if (error instanceof Error) {
    const cause = (error as { cause?: unknown }).cause;
    const code = cause && typeof cause === "object" && "code" in cause ? ` (${String(cause.code)})` : "";
    return `${error.message}${code}`;
  }
  return String(error);
}

/** Seconds of a `Retry-After` header (delay-seconds or an HTTP date), or null. */
export function parseRetryAfter(value: string | null, now: number = Date.now()): number | null {
  if (value === null || value.trim() === "") return null;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(0, seconds);
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, (at - now) / 1000);
}

async function errorFor(response: Response): Promise<OMAPIError> {
  const text = await response.text().catch(() => "");
  let detail: Partial<ErrorDetail> = {};
  try {
    const body = JSON.parse(text) as { error?: Partial<ErrorDetail> };
    if (body && typeof body.error === "object" && body.error !== null) detail = body.error;
  } catch {
    // not JSON: the text becomes the message
  }
  const ErrorType = ERRORS[response.status] ?? OMAPIError;
  return new ErrorType(response.status, detail.code ?? "error", detail.message ?? text.slice(0, 500), {
    field: detail.field ?? null,
    limit: detail.limit ?? null,
    errors: detail.errors ?? null,
    retryAfter: parseRetryAfter(response.headers.get("retry-after")),
  });
}

// ------------------------------------------------------------------------------------------ the retries

/** When calls are sent again: after no answer (connection refused or cut), a 429 or a 503, with an
 * exponential backoff with jitter (never shorter than the answer's `Retry-After`), until `maxAttempts`
 * tries or `maxWaitMs` of waiting in all. `{ maxAttempts: 1 }` turns retries off. */
export interface RetryPolicy {
  maxAttempts: number;
  baseDelayMs: number;
  maxDelayMs: number;
  maxWaitMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { maxAttempts: 5, baseDelayMs: 500, maxDelayMs: 15_000, maxWaitMs: 30_000 };

/** How safe a call is to send twice: `idempotent` calls (reads, PUT, DELETE, turns: their message ids
 * make a resent turn store nothing twice) are retried after any transient failure; `once` calls only when
 * the request cannot have reached the server (connection refused, or a 429). */
type Safety = "idempotent" | "once";

const RETRY_STATUSES = new Set([429, 503]);
const NOT_SENT_CODES = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "UND_ERR_CONNECT_TIMEOUT"]);

function errorCode(error: unknown): string | undefined {
  for (let e: unknown = error, depth = 0; e && typeof e === "object" && depth < 4; depth++) {
    if ("code" in e && typeof e.code === "string") return e.code;
    e = (e as { cause?: unknown }).cause;
  }
  return undefined;
}

function isTransportError(error: unknown): boolean {
  // fetch rejects with a TypeError ("fetch failed", "terminated") when the connection fails or is cut,
  // and with a TimeoutError when the client's own timeout passed.
  if (error instanceof Error && error.name === "TimeoutError") return true;
  return error instanceof TypeError || errorCode(error) !== undefined;
}

function retryable(error: unknown, safety: Safety): boolean {
  if (error instanceof OMAPIError) {
    return safety === "idempotent" ? RETRY_STATUSES.has(error.status) : error.status === 429;
  }
  if (!isTransportError(error)) return false;
  return safety === "idempotent" || NOT_SENT_CODES.has(errorCode(error) ?? "");
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** Counts attempts and waiting against a policy; `delay` says how long to wait before the next try, or
 * null when the limits are reached. */
class Backoff {
  attempts = 0;
  waitedMs = 0;

  constructor(private readonly policy: RetryPolicy) {}

  delay(retryAfterS: number | null, floorMs = 0): number | null {
    if (this.attempts >= this.policy.maxAttempts) return null;
    const exponential = Math.min(this.policy.maxDelayMs, this.policy.baseDelayMs * 2 ** (this.attempts - 1));
    const jittered = exponential / 2 + Math.random() * (exponential / 2);
    const wait = Math.max(jittered, floorMs, (retryAfterS ?? 0) * 1000);
    if (this.waitedMs + wait > this.policy.maxWaitMs) return null;
    this.waitedMs += wait;
    return wait;
  }

  reset(): void {
    this.attempts = 0;
    this.waitedMs = 0;
  }
}

// ---------------------------------------------------------------------------------------- the client

export interface OMClientOptions {
  /** The API key (`omk_...`), sent as `Authorization: Bearer`. */
  apiKey?: string;
  /** Per-request timeout of calls (not of a followed event stream); default 120 s. */
  timeoutMs?: number;
  headers?: Record<string, string>;
  retry?: Partial<RetryPolicy>;
  /** Another fetch (a proxy agent, a test double); default the global one. */
  fetch?: typeof fetch;
}

export interface PostTurnOptions {
  /** The user or entity the thread belongs to (defaults to the thread id on the server). */
  resourceId?: string;
  /** The chat model answering this turn (`provider/model`). */
  actorModel?: string;
  stepNumber?: number;
  turnEnd?: boolean;
  actorProviderOptions?: TurnRequest["actor_provider_options"];
  /** `openai`, `messages`, `full` (both), or `none` for a call whose answer goes to no model. Omitted, the
   * server answers a call that ends the turn (`turnEnd`, by default when the last message is the
   * assistant's reply) with `none` and any other with `openai`. */
  context?: ContextForm;
  signal?: AbortSignal;
}

export interface EventsOptions {
  /** Keep the stream open for live events (default true); false ends after the stored ones. */
  follow?: boolean;
  /** Resume after this cursor (an event's `cursor`, or an event id). */
  lastEventId?: string | number;
  /** Ends the stream (the iterator returns). */
  signal?: AbortSignal;
}

export interface SearchOptions {
  limit?: number;
  threadIds?: string[];
  after?: Date | string;
  before?: Date | string;
  kinds?: Array<"group" | "message">;
  signal?: AbortSignal;
}

interface CallOptions {
  body?: unknown;
  query?: Record<string, string | number | boolean | undefined>;
  safety?: Safety;
  signal?: AbortSignal;
}

const thread = (id: string, tail = "") => `/v1/threads/${encodeURIComponent(id)}${tail}`;
const resource = (id: string, tail = "") => `/v1/resources/${encodeURIComponent(id)}${tail}`;
const iso = (value: Date | string | undefined) => (value instanceof Date ? value.toISOString() : value);

export class OMClient {
  readonly baseUrl: string;
  private readonly headers: Record<string, string>;
  private readonly timeoutMs: number;
  private readonly retry: RetryPolicy;
  private readonly fetch: typeof fetch;

  constructor(baseUrl: string, options: OMClientOptions = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.headers = { ...options.headers };
    if (options.apiKey) this.headers.authorization = `Bearer ${options.apiKey}`;
    this.timeoutMs = options.timeoutMs ?? 120_000;
    this.retry = { ...DEFAULT_RETRY, ...options.retry };
    this.fetch = options.fetch ?? ((input, init) => fetch(input, init));
  }

  /** Store the turn's messages; the answer carries the actor's context in `context` form. Messages
   * without an id get a random one first, so a retried turn stores each message once. */
  postTurn(threadId: string, messages: MessageInput[], options: PostTurnOptions = {}): Promise<TurnResponse> {
    const body: Partial<TurnRequest> & { messages: TurnMessage[] } = {
      messages: messages.map((m) => ({ ...m, id: m.id ?? `msg-${crypto.randomUUID()}` })),
    };
    if (options.resourceId !== undefined) body.resource_id = options.resourceId;
    if (options.actorModel !== undefined) body.actor_model = options.actorModel;
    if (options.stepNumber !== undefined) body.step_number = options.stepNumber;
    if (options.turnEnd !== undefined) body.turn_end = options.turnEnd;
    if (options.actorProviderOptions !== undefined) body.actor_provider_options = options.actorProviderOptions;
    if (options.context !== undefined) body.context = options.context;
    return this.call("POST", thread(threadId, "/turns"), { body, safety: "idempotent", signal: options.signal });
  }

  /** Where the thread stands against its thresholds (the data-om-status payload). */
  status(threadId: string, options: { signal?: AbortSignal } = {}): Promise<StatusPayload> {
    return this.call("GET", thread(threadId, "/status"), options);
  }

  /** The active log, buffered chunks, buffered reflection and past generations. */
  observations(
    threadId: string,
    options: { historyLimit?: number; historyOffset?: number; signal?: AbortSignal } = {},
  ): Promise<ObservationsResponse> {
    const query = { history_limit: options.historyLimit, history_offset: options.historyOffset };
    return this.call("GET", thread(threadId, "/observations"), { query, signal: options.signal });
  }

  /** One page of stored messages, newest page first (`next_cursor` for the older page). */
  messages(
    threadId: string,
    options: { limit?: number; cursor?: string; signal?: AbortSignal } = {},
  ): Promise<MessagesResponse> {
    const query = { limit: options.limit, cursor: options.cursor };
    return this.call("GET", thread(threadId, "/messages"), { query, signal: options.signal });
  }

  /** The thread with its title, metadata and counts. */
  thread(threadId: string, options: { signal?: AbortSignal } = {}): Promise<ThreadDetail> {
    return this.call("GET", thread(threadId), options);
  }

  deleteThread(threadId: string, options: { signal?: AbortSignal } = {}): Promise<void> {
    return this.call("DELETE", thread(threadId), options);
  }

  /** Search the resource's raw messages and observation groups (its config needs `retrieval`). */
  search(resourceId: string, query: string, options: SearchOptions = {}): Promise<SearchResponse> {
    return this.call("POST", resource(resourceId, "/search"), {
      body: searchBody(query, options),
      signal: options.signal,
    });
  }

  /** Search one thread's raw messages and observation groups. */
  searchThread(threadId: string, query: string, options: Omit<SearchOptions, "threadIds"> = {}): Promise<SearchResponse> {
    return this.call("POST", thread(threadId, "/search"), { body: searchBody(query, options), signal: options.signal });
  }

  /** Answer a recall tool call on the thread: `params` are the call's arguments as the model wrote them
   * (`mode`, `cursor`, `threadId`, `page`, `partIndex`, ...). */
  recall(threadId: string, params: Record<string, unknown>, options: { signal?: AbortSignal } = {}): Promise<RecallResponse> {
    return this.call("POST", thread(threadId, "/recall"), { body: params, signal: options.signal });
  }

  health(options: { signal?: AbortSignal } = {}): Promise<HealthResponse> {
    return this.call("GET", "/healthz", options);
  }

  /**
   * The thread's events: those the cursor has not seen (all without one), then, with `follow` (the
   * default), live ones. When the connection drops the stream reconnects by itself with `Last-Event-ID`
   * set to the last cursor it delivered, so no event is lost or repeated; it waits like a retried call (at
   * least the server's `retry:` delay) and gives up with `OMRetriesExhausted` when the retry limits pass
   * without a connection succeeding. Breaking out of the loop (or `signal`) closes the connection.
   */
  async *events(threadId: string, options: EventsOptions = {}): AsyncGenerator<OMEvent, void, undefined> {
    const follow = options.follow ?? true;
    let cursor = options.lastEventId === undefined ? null : String(options.lastEventId);
    let reconnectMs = 0;
    const backoff = new Backoff(this.retry);
    for (;;) {
      const abort = new AbortController();
      const stop = () => abort.abort(options.signal?.reason);
      if (options.signal?.aborted) return;
      options.signal?.addEventListener("abort", stop, { once: true });
      let failure: unknown = null;
      try {
        backoff.attempts += 1;
        const headers: Record<string, string> = { ...this.headers, accept: "text/event-stream" };
        if (cursor !== null) headers["last-event-id"] = cursor;
        const url = this.url(thread(threadId, "/events"), { follow });
        const response = await this.fetch(url, { headers, signal: abort.signal });
        if (!response.ok) throw await errorFor(response);
        if (response.body === null) throw new TypeError("the event stream has no body");
        backoff.reset(); // connected: the limits count failed reconnects in a row
        const parser = new SSEParser();
        const decoder = new TextDecoder();
        for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
          for (const event of parser.feed(decoder.decode(chunk, { stream: true }))) {
            cursor = event.cursor ?? cursor;
            yield event;
          }
          if (parser.retryMs !== null) reconnectMs = parser.retryMs;
        }
        if (!follow) return; // the replay is complete
        // A followed stream ended by the server (a restart, a deploy): reconnect after its retry delay.
        failure = new TypeError("the server ended the event stream");
      } catch (error) {
        if (options.signal?.aborted) return;
        failure = error;
      } finally {
        options.signal?.removeEventListener("abort", stop);
        abort.abort(); // breaking out of the loop lands here too: the connection is closed
      }
      if (!retryable(failure, "idempotent")) throw failure;
      const retryAfter = failure instanceof OMAPIError ? failure.retryAfter : null;
      const wait = backoff.delay(retryAfter, reconnectMs);
      if (wait === null) throw new OMRetriesExhausted(backoff.attempts, failure);
      try {
        await sleep(wait, options.signal);
      } catch {
        return;
      }
    }
  }

  // ----------------------------------------------------------------------------------- the plumbing

  private url(path: string, query?: CallOptions["query"]): string {
    const url = new URL(this.baseUrl + path);
    for (const [key, value] of Object.entries(query ?? {})) {
      if (value !== undefined) url.searchParams.set(key, String(value));
    }
    return url.toString();
  }

  /** One call with the retry policy: JSON in and out, error answers thrown as `OMAPIError`s. */
  async call<T>(method: string, path: string, options: CallOptions = {}): Promise<T> {
    const safety = options.safety ?? (method !== "POST" || READ_POSTS.test(path) ? "idempotent" : "once");
    const url = this.url(path, options.query);
    const headers: Record<string, string> = { ...this.headers, accept: "application/json" };
    const body = options.body === undefined ? undefined : JSON.stringify(options.body);
    if (body !== undefined) headers["content-type"] = "application/json";
    const backoff = new Backoff(this.retry);
    for (;;) {
      backoff.attempts += 1;
      const signals = [AbortSignal.timeout(this.timeoutMs), ...(options.signal ? [options.signal] : [])];
      let failure: unknown;
      try {
        const response = await this.fetch(url, { method, headers, body, signal: AbortSignal.any(signals) });
        if (response.ok) {
          if (response.status === 204) return undefined as T;
          return (await response.json()) as T;
        }
        failure = await errorFor(response);
      } catch (error) {
        if (options.signal?.aborted) throw error;
        failure = error;
      }
      if (!retryable(failure, safety)) throw failure;
      const wait = backoff.delay(failure instanceof OMAPIError ? failure.retryAfter : null);
      if (wait === null) throw new OMRetriesExhausted(backoff.attempts, failure);
      await sleep(wait, options.signal);
    }
  }
}

/** POSTs that only read (search, recall): as safe to resend as a GET. */
const READ_POSTS = /\/(search|recall)$/;

function searchBody(query: string, options: SearchOptions): Partial<SearchRequest> & { query: string } {
  const body: Partial<SearchRequest> & { query: string } = { query };
  if (options.limit !== undefined) body.limit = options.limit;
  if (options.threadIds !== undefined) body.thread_ids = options.threadIds;
  if (options.after !== undefined) body.after = iso(options.after);
  if (options.before !== undefined) body.before = iso(options.before);
  if (options.kinds !== undefined) body.kinds = options.kinds;
  return body;
}

// ------------------------------------------------------------------------------------- the SSE framing

/** Server-Sent Events framing (the subset om sends, lines end with LF, CRLF tolerated): `id:` is the
 * resume cursor, `data:` a JSON event, `retry:` the reconnect delay, `:` lines are keep-alive comments; a
 * blank line ends a message. */
export class SSEParser {
  private buffer = "";
  private data: string[] = [];
  private cursor: string | null = null;
  retryMs: number | null = null;

  feed(text: string): OMEvent[] {
    this.buffer += text;
    const events: OMEvent[] = [];
    for (let end = this.buffer.indexOf("\n"); end !== -1; end = this.buffer.indexOf("\n")) {
      const line = this.buffer.slice(0, end).replace(/\r$/, "");
      this.buffer = this.buffer.slice(end + 1);
      const event = this.line(line);
      if (event !== null) events.push(event);
    }
    return events;
  }

  private line(line: string): OMEvent | null {
    if (line === "") {
      if (this.data.length === 0) return null;
      const payload = this.data.join("\n");
      this.data = [];
      const body = JSON.parse(payload) as OMEventBody;
      return { ...body, cursor: this.cursor };
    }
    if (line.startsWith(":")) return null;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") this.data.push(value);
    else if (field === "id") this.cursor = value;
    else if (field === "retry" && /^\d+$/.test(value)) this.retryMs = Number(value);
    return null;
  }
}
