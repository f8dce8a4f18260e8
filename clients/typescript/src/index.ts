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
export type ReadinessResponse = ResponseOf<"/readyz", "get">;
export type OperationResponse = ResponseOf<"/v1/threads/{thread_id}/observe", "post">;
export type ConfigResponse = ResponseOf<"/v1/threads/{thread_id}/config", "get">;
/** The config overrides of a thread or resource (camelCase keys, as in the original's options). */
export type ConfigOverrides = NonNullable<RequestOf<"/v1/threads/{thread_id}/config", "put">["overrides"]>;
export type ResourceConfigResponse = ResponseOf<"/v1/resources/{resource_id}/config", "get">;
export type ThreadPatch = RequestOf<"/v1/threads/{thread_id}", "patch">;
export type ThreadsResponse = ResponseOf<"/v1/resources/{resource_id}/threads", "get">;
export type ThreadPage = ResponseOf<"/v1/threads", "get">;
export type ResourcePage = ResponseOf<"/v1/resources", "get">;
export type ObservationEditResponse = ResponseOf<"/v1/threads/{thread_id}/observations/{line}", "patch">;
export type WorkingMemoryResponse = ResponseOf<"/v1/threads/{thread_id}/working-memory", "get">;
/** Markdown text, or an object for a working memory with a JSON schema. */
export type WorkingMemoryContent = RequestOf<"/v1/threads/{thread_id}/working-memory", "put">["content"];
export type GenerationDiffResponse = ResponseOf<"/v1/threads/{thread_id}/generations/{generation}/diff", "get">;
export type ModelList = ResponseOf<"/v1/models", "get">;
export type KeyUsageResponse = ResponseOf<"/v1/usage", "get">;
export type WhoAmI = ResponseOf<"/v1/whoami", "get">;
export type FleetResponse = ResponseOf<"/v1/fleet", "get">;
export type WebhookCreate = RequestOf<"/v1/webhooks", "post">;
/** A new webhook: its `secret` (signing key) is shown only in this answer. */
export type WebhookCreated = ResponseOf<"/v1/webhooks", "post">;
export type WebhookInfo = ResponseOf<"/v1/webhooks/{endpoint_id}", "get">;
export type WebhookPatch = RequestOf<"/v1/webhooks/{endpoint_id}", "patch">;
export type WebhookPage = ResponseOf<"/v1/webhooks", "get">;
export type WebhookDeliveries = ResponseOf<"/v1/webhooks/{endpoint_id}/deliveries", "get">;
export type WebhookRotate = RequestOf<"/v1/webhooks/{endpoint_id}/rotate-secret", "post">;
export type SpendResponse = ResponseOf<"/v1/usage/spend", "get">;
export type ImportResponse = ResponseOf<"/v1/import", "post">;
/** One line of an export (docs/guide/export-import.md): a JSON object whose `kind` says what it holds. */
export type TransferLine = { kind: string } & Record<string, unknown>;
export type ChatCompletionRequest = RequestOf<"/v1/chat/completions", "post">;
export type ChatCompletionResponse = ResponseOf<"/v1/chat/completions", "post">;
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
  /** The server's URL, when not given as the first argument; default `$OM_BASE_URL`. */
  baseUrl?: string;
  /** The API key (`omk_...`), sent as `Authorization: Bearer`; default `$OM_API_KEY`. */
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
  /** The memory models (and extractors) of the background work this turn starts, within what the server
   * allows (`OM_REQUEST_MODELS`, `OM_REQUEST_EXTRACTORS`): `{ model: "openai/gpt-5-mini" }`. */
  memoryOptions?: TurnRequest["memory_options"];
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
  /** A body sent as is with its content type, instead of `body` as JSON. */
  content?: { text: string; type: string };
  query?: Record<string, string | number | boolean | null | undefined>;
  headers?: Record<string, string>;
  safety?: Safety;
  signal?: AbortSignal;
  /** Statuses besides 2xx whose JSON body is an answer, not an error (503 of /readyz). */
  accept?: number[];
}

/** Only `signal`: what every call takes. */
export interface RequestOptions {
  signal?: AbortSignal;
}

/** A page of a list: at most `limit` items after `cursor` (the previous page's `next_cursor`). */
export interface PageOptions extends RequestOptions {
  limit?: number;
  cursor?: string;
}

/** A call's answer with the HTTP response it came from (status, headers; its body already read). */
export interface WithResponse<T> {
  data: T;
  response: Response;
}

/**
 * What every call returns: a Promise of the parsed answer which also gives the raw HTTP response,
 * `await om.status(id).withResponse()` → `{ data, response }` (headers such as `x-request-id`,
 * the status). The request is sent once, whichever of the two is awaited.
 */
export class APIPromise<T> extends Promise<T> {
  static override get [Symbol.species](): PromiseConstructor {
    return Promise;
  }

  readonly #raw: Promise<WithResponse<T>>;

  constructor(raw: Promise<WithResponse<T>>) {
    super(() => {}); // never settles: `then` below reads `raw` instead
    this.#raw = raw;
  }

  /** The answer and the HTTP response it came from. */
  withResponse(): Promise<WithResponse<T>> {
    return this.#raw;
  }

  override then<A = T, B = never>(
    onFulfilled?: ((value: T) => A | PromiseLike<A>) | null,
    onRejected?: ((reason: unknown) => B | PromiseLike<B>) | null,
  ): Promise<A | B> {
    return this.#raw.then((raw) => raw.data).then(onFulfilled, onRejected);
  }
}

const env = (name: string): string | undefined => {
  const value = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env?.[name];
  return value === undefined || value === "" ? undefined : value;
};

const thread = (id: string, tail = "") => `/v1/threads/${encodeURIComponent(id)}${tail}`;
const resource = (id: string, tail = "") => `/v1/resources/${encodeURIComponent(id)}${tail}`;
const iso = (value: Date | string | undefined) => (value instanceof Date ? value.toISOString() : value);

export class OMClient {
  readonly baseUrl: string;
  private readonly headers: Record<string, string>;
  private readonly timeoutMs: number;
  private readonly retry: RetryPolicy;
  private readonly fetch: typeof fetch;

  /** `new OMClient()` reads `OM_BASE_URL` and `OM_API_KEY` from the environment; an argument wins over
   * them (`new OMClient(url, { apiKey })`, or `new OMClient({ baseUrl, apiKey })`). */
  constructor(baseUrl?: string | OMClientOptions, options: OMClientOptions = {}) {
    if (typeof baseUrl === "object") [baseUrl, options] = [baseUrl.baseUrl, baseUrl];
    const url = baseUrl ?? options.baseUrl ?? env("OM_BASE_URL");
    if (url === undefined) {
      throw new TypeError("no om server URL: pass it (new OMClient(url)) or set OM_BASE_URL");
    }
    this.baseUrl = url.replace(/\/+$/, "");
    this.headers = { ...options.headers };
    const apiKey = options.apiKey ?? env("OM_API_KEY");
    if (apiKey) this.headers.authorization = `Bearer ${apiKey}`;
    this.timeoutMs = options.timeoutMs ?? 120_000;
    this.retry = { ...DEFAULT_RETRY, ...options.retry };
    this.fetch = options.fetch ?? ((input, init) => fetch(input, init));
  }

  /** Store the turn's messages; the answer carries the actor's context in `context` form. Messages
   * without an id get a random one first, so a retried turn stores each message once. */
  postTurn(threadId: string, messages: MessageInput[], options: PostTurnOptions = {}): APIPromise<TurnResponse> {
    const body: Partial<TurnRequest> & { messages: TurnMessage[] } = {
      messages: messages.map((m) => ({ ...m, id: m.id ?? `msg-${crypto.randomUUID()}` })),
    };
    if (options.resourceId !== undefined) body.resource_id = options.resourceId;
    if (options.actorModel !== undefined) body.actor_model = options.actorModel;
    if (options.stepNumber !== undefined) body.step_number = options.stepNumber;
    if (options.turnEnd !== undefined) body.turn_end = options.turnEnd;
    if (options.actorProviderOptions !== undefined) body.actor_provider_options = options.actorProviderOptions;
    if (options.context !== undefined) body.context = options.context;
    if (options.memoryOptions !== undefined) body.memory_options = options.memoryOptions;
    return this.call("POST", thread(threadId, "/turns"), { body, safety: "idempotent", signal: options.signal });
  }

  /** Where the thread stands against its thresholds (the data-om-status payload). */
  status(threadId: string, options: { signal?: AbortSignal } = {}): APIPromise<StatusPayload> {
    return this.call("GET", thread(threadId, "/status"), options);
  }

  /** The active log, buffered chunks, buffered reflection and past generations. */
  observations(
    threadId: string,
    options: { historyLimit?: number; historyOffset?: number; signal?: AbortSignal } = {},
  ): APIPromise<ObservationsResponse> {
    const query = { history_limit: options.historyLimit, history_offset: options.historyOffset };
    return this.call("GET", thread(threadId, "/observations"), { query, signal: options.signal });
  }

  /** One page of stored messages, newest page first (`next_cursor` for the older page). */
  messages(
    threadId: string,
    options: { limit?: number; cursor?: string; signal?: AbortSignal } = {},
  ): APIPromise<MessagesResponse> {
    const query = { limit: options.limit, cursor: options.cursor };
    return this.call("GET", thread(threadId, "/messages"), { query, signal: options.signal });
  }

  /** The thread with its title, metadata and counts. */
  thread(threadId: string, options: { signal?: AbortSignal } = {}): APIPromise<ThreadDetail> {
    return this.call("GET", thread(threadId), options);
  }

  deleteThread(threadId: string, options: { signal?: AbortSignal } = {}): APIPromise<void> {
    return this.call("DELETE", thread(threadId), options);
  }

  /** Search the resource's raw messages and observation groups (its config needs `retrieval`). */
  search(resourceId: string, query: string, options: SearchOptions = {}): APIPromise<SearchResponse> {
    return this.call("POST", resource(resourceId, "/search"), {
      body: searchBody(query, options),
      signal: options.signal,
    });
  }

  /** Search one thread's raw messages and observation groups. */
  searchThread(threadId: string, query: string, options: Omit<SearchOptions, "threadIds"> = {}): APIPromise<SearchResponse> {
    return this.call("POST", thread(threadId, "/search"), { body: searchBody(query, options), signal: options.signal });
  }

  /** Answer a recall tool call on the thread: `params` are the call's arguments as the model wrote them
   * (`mode`, `cursor`, `threadId`, `page`, `partIndex`, ...). */
  recall(threadId: string, params: Record<string, unknown>, options: { signal?: AbortSignal } = {}): APIPromise<RecallResponse> {
    return this.call("POST", thread(threadId, "/recall"), { body: params, signal: options.signal });
  }

  health(options: { signal?: AbortSignal } = {}): APIPromise<HealthResponse> {
    return this.call("GET", "/healthz", options);
  }

  /** Whether the server can serve (its database, and its broker when distributed): the answer of a
   * server that cannot (503) is returned too, with `status: "unavailable"`. */
  ready(options: RequestOptions = {}): APIPromise<ReadinessResponse> {
    return this.call("GET", "/readyz", { ...options, accept: [503] });
  }

  // ------------------------------------------------------------------------- threads and their memory

  /** Set the thread's title and/or the caller's metadata (null clears one; one left out is kept). */
  updateThread(threadId: string, patch: ThreadPatch, options: RequestOptions = {}): APIPromise<ThreadDetail> {
    return this.call("PATCH", thread(threadId), { body: patch, signal: options.signal });
  }

  /** One page of this key's threads (by id), or of one resource's; `q` filters by id or title. */
  listThreads(options: PageOptions & { resourceId?: string; q?: string } = {}): APIPromise<ThreadPage> {
    const query = { limit: options.limit, cursor: options.cursor, resource_id: options.resourceId, q: options.q };
    return this.call("GET", "/v1/threads", { query, signal: options.signal });
  }

  /** Every thread of `listThreads`, page after page. */
  async *iterThreads(
    options: Omit<PageOptions, "cursor"> & { resourceId?: string; q?: string } = {},
  ): AsyncGenerator<ThreadPage["items"][number], void, undefined> {
    let cursor: string | undefined;
    do {
      const page = await this.listThreads({ ...options, cursor });
      yield* page.items;
      cursor = page.next_cursor ?? undefined;
    } while (cursor !== undefined);
  }

  /** Run the observer on the thread's unobserved messages now (`wait: false` queues it). */
  observe(threadId: string, options: RequestOptions & { wait?: boolean } = {}): APIPromise<OperationResponse> {
    return this.call("POST", thread(threadId, "/observe"), { body: { wait: options.wait ?? true }, signal: options.signal });
  }

  /** Run the reflector on the thread's log now, with an extra `prompt` if given. */
  reflect(
    threadId: string,
    options: RequestOptions & { wait?: boolean; prompt?: string } = {},
  ): APIPromise<OperationResponse> {
    const body: { wait: boolean; prompt?: string } = { wait: options.wait ?? true };
    if (options.prompt !== undefined) body.prompt = options.prompt;
    return this.call("POST", thread(threadId, "/reflect"), { body, signal: options.signal });
  }

  /** The thread's config: its own overrides and the effective config. */
  getConfig(threadId: string, options: RequestOptions = {}): APIPromise<ConfigResponse> {
    return this.call("GET", thread(threadId, "/config"), options);
  }

  /** Replace the thread's overrides (null removes them). */
  setConfig(
    threadId: string,
    overrides: ConfigOverrides | null,
    options: RequestOptions & { resourceId?: string } = {},
  ): APIPromise<ConfigResponse> {
    const body: { overrides: ConfigOverrides | null; resource_id?: string } = { overrides };
    if (options.resourceId !== undefined) body.resource_id = options.resourceId;
    return this.call("PUT", thread(threadId, "/config"), { body, signal: options.signal });
  }

  /** Replace line `line` (0-based, of `active.observations`) whose text you read as `expected`; an
   * `OMConflict` when the log changed since. */
  async editObservation(
    threadId: string,
    line: number,
    text: string,
    options: RequestOptions & { expected: string },
  ): Promise<ObservationEditResponse> {
    const body = { text, expected_sha256: await lineSha256(options.expected) };
    // Not resent: after a lost answer the edit is done and a second try would answer 409.
    return this.call("PATCH", thread(threadId, `/observations/${line}`), { body, safety: "once", signal: options.signal });
  }

  /** Forget line `line` (read as `expected`): gone from the log and every copy of its memory. */
  async deleteObservation(
    threadId: string,
    line: number,
    options: RequestOptions & { expected: string },
  ): Promise<ObservationEditResponse> {
    const query = { expected_sha256: await lineSha256(options.expected) };
    // Not resent: after a lost answer the line below would move up into its place.
    return this.call("DELETE", thread(threadId, `/observations/${line}`), { query, safety: "once", signal: options.signal });
  }

  /** What changed in the log from generation `generation` - 1 to `generation`. */
  generationDiff(threadId: string, generation: number, options: RequestOptions = {}): APIPromise<GenerationDiffResponse> {
    return this.call("GET", thread(threadId, `/generations/${generation}/diff`), options);
  }

  /** The thread's working memory (or the resource's, when its scope is `resource`). */
  workingMemory(threadId: string, options: RequestOptions = {}): APIPromise<WorkingMemoryResponse> {
    return this.call("GET", thread(threadId, "/working-memory"), options);
  }

  /** Replace the thread's working memory; with `expectedVersion`, an `OMConflict` when it changed since. */
  setWorkingMemory(
    threadId: string,
    content: WorkingMemoryContent,
    options: RequestOptions & { expectedVersion?: number } = {},
  ): APIPromise<WorkingMemoryResponse> {
    const body = { content, expectedVersion: options.expectedVersion ?? null };
    return this.call("PUT", thread(threadId, "/working-memory"), { body, signal: options.signal });
  }

  // ---------------------------------------------------------------------------------- the resources

  /** One page of this key's resources; `q` filters by id. */
  listResources(options: PageOptions & { q?: string } = {}): APIPromise<ResourcePage> {
    const query = { limit: options.limit, cursor: options.cursor, q: options.q };
    return this.call("GET", "/v1/resources", { query, signal: options.signal });
  }

  /** One page of the resource's threads, oldest first. */
  threads(resourceId: string, options: PageOptions = {}): APIPromise<ThreadsResponse> {
    const query = { limit: options.limit, cursor: options.cursor };
    return this.call("GET", resource(resourceId, "/threads"), { query, signal: options.signal });
  }

  getResourceConfig(resourceId: string, options: RequestOptions = {}): APIPromise<ResourceConfigResponse> {
    return this.call("GET", resource(resourceId, "/config"), options);
  }

  /** Overrides for every thread of the resource (a thread's own are merged over them). */
  setResourceConfig(
    resourceId: string,
    overrides: ConfigOverrides | null,
    options: RequestOptions = {},
  ): APIPromise<ResourceConfigResponse> {
    return this.call("PUT", resource(resourceId, "/config"), { body: { overrides }, signal: options.signal });
  }

  /** Delete the resource with all its threads, its shared log and its config. */
  deleteResource(resourceId: string, options: RequestOptions = {}): APIPromise<void> {
    return this.call("DELETE", resource(resourceId), options);
  }

  resourceWorkingMemory(resourceId: string, options: RequestOptions = {}): APIPromise<WorkingMemoryResponse> {
    return this.call("GET", resource(resourceId, "/working-memory"), options);
  }

  setResourceWorkingMemory(
    resourceId: string,
    content: WorkingMemoryContent,
    options: RequestOptions & { expectedVersion?: number } = {},
  ): APIPromise<WorkingMemoryResponse> {
    const body = { content, expectedVersion: options.expectedVersion ?? null };
    return this.call("PUT", resource(resourceId, "/working-memory"), { body, signal: options.signal });
  }

  // ------------------------------------------------------------------------------------ the webhooks

  /** Register an endpoint for `events` (or `["*"]`); the answer's `secret` is shown only this once. The
   * server refuses URLs on loopback or private addresses (422 `webhook_target_refused`). */
  createWebhook(webhook: WebhookCreate, options: RequestOptions = {}): APIPromise<WebhookCreated> {
    return this.call("POST", "/v1/webhooks", { body: webhook, signal: options.signal });
  }

  webhooks(options: PageOptions = {}): APIPromise<WebhookPage> {
    const query = { limit: options.limit, cursor: options.cursor };
    return this.call("GET", "/v1/webhooks", { query, signal: options.signal });
  }

  webhook(endpointId: string, options: RequestOptions = {}): APIPromise<WebhookInfo> {
    return this.call("GET", `/v1/webhooks/${encodeURIComponent(endpointId)}`, options);
  }

  /** Change the URL, events, description, or `enabled` (enabling a disabled one resets its failures). */
  updateWebhook(endpointId: string, patch: WebhookPatch, options: RequestOptions = {}): APIPromise<WebhookInfo> {
    return this.call("PATCH", `/v1/webhooks/${encodeURIComponent(endpointId)}`, { body: patch, signal: options.signal });
  }

  deleteWebhook(endpointId: string, options: RequestOptions = {}): APIPromise<void> {
    return this.call("DELETE", `/v1/webhooks/${encodeURIComponent(endpointId)}`, options);
  }

  /** The endpoint's recent delivery attempts, newest first. */
  webhookDeliveries(endpointId: string, options: PageOptions = {}): APIPromise<WebhookDeliveries> {
    const query = { limit: options.limit, cursor: options.cursor };
    const path = `/v1/webhooks/${encodeURIComponent(endpointId)}/deliveries`;
    return this.call("GET", path, { query, signal: options.signal });
  }

  /** A new signing secret (shown once, in `secret`); the previous one keeps signing beside it for
   * `keepPreviousS` seconds (default one day), so receivers switch without losing a delivery. */
  rotateWebhookSecret(
    endpointId: string,
    options: RequestOptions & { keepPreviousS?: number } = {},
  ): APIPromise<WebhookCreated> {
    const body: Partial<NonNullable<WebhookRotate>> = {};
    if (options.keepPreviousS !== undefined) body.keep_previous_s = options.keepPreviousS;
    const path = `/v1/webhooks/${encodeURIComponent(endpointId)}/rotate-secret`;
    return this.call("POST", path, { body, signal: options.signal });
  }

  /** Stop signing with the previous secret now (every receiver has the new one). */
  endWebhookRotation(endpointId: string, options: RequestOptions = {}): APIPromise<WebhookInfo> {
    return this.call("DELETE", `/v1/webhooks/${encodeURIComponent(endpointId)}/previous-secret`, options);
  }

  // ------------------------------------------------------------------------------ export and import

  /** The thread's memory as export lines, read as they stream (docs/guide/export-import.md). */
  exportThread(threadId: string, options: RequestOptions = {}): AsyncGenerator<TransferLine, void, undefined> {
    return this.exportLines(thread(threadId, "/export"), options);
  }

  /** The resource's memory (its shared log, working memory and every thread) as export lines. */
  exportResource(resourceId: string, options: RequestOptions = {}): AsyncGenerator<TransferLine, void, undefined> {
    return this.exportLines(resource(resourceId, "/export"), options);
  }

  /** Import export lines (objects, or JSON text lines such as an export's) into this key's tenant; the
   * answer counts what was added. Idempotent (by ids), so it is retried like a read. */
  importRecords(lines: Iterable<TransferLine | string>, options: RequestOptions = {}): APIPromise<ImportResponse> {
    const text = Array.from(lines, (line) => (typeof line === "string" ? line.trim() : JSON.stringify(line)))
      .filter((line) => line !== "")
      .join("\n");
    return this.call("POST", "/v1/import", {
      content: { text: `${text}\n`, type: "application/x-ndjson" },
      safety: "idempotent",
      signal: options.signal,
    });
  }

  private async *exportLines(path: string, options: RequestOptions): AsyncGenerator<TransferLine, void, undefined> {
    const headers: Record<string, string> = { ...this.headers, accept: "application/x-ndjson" };
    const response = await this.fetch(this.url(path), { headers, signal: options.signal });
    if (!response.ok) throw await errorFor(response);
    if (response.body === null) throw new TypeError("the export has no body");
    const decoder = new TextDecoder();
    let pending = "";
    for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
      pending += decoder.decode(chunk, { stream: true });
      const lines = pending.split("\n");
      pending = lines.pop() ?? "";
      for (const line of lines) if (line.trim() !== "") yield JSON.parse(line) as TransferLine;
    }
    pending += decoder.decode();
    if (pending.trim() !== "") yield JSON.parse(pending) as TransferLine;
  }

  // ---------------------------------------------------------------------- the key, its models, usage

  /** Whether keys are required, the caller's tenant, where Flower is. */
  whoami(options: RequestOptions = {}): APIPromise<WhoAmI> {
    return this.call("GET", "/v1/whoami", options);
  }

  /** The actor models the proxy may call for this key (OpenAI's list shape). */
  models(options: RequestOptions = {}): APIPromise<ModelList> {
    return this.call("GET", "/v1/models", options);
  }

  /** What this key spent on actor models through the proxy. */
  usage(options: RequestOptions = {}): APIPromise<KeyUsageResponse> {
    return this.call("GET", "/v1/usage", options);
  }

  /** What om's own models (Observer, Reflector, extractors) spent for this key's tenant per UTC day and
   * per thread per day, with today's budget state; `threadId`: that thread's only. */
  spend(options: RequestOptions & { days?: number; threadId?: string } = {}): APIPromise<SpendResponse> {
    const query = { days: options.days, thread: options.threadId };
    return this.call("GET", "/v1/usage/spend", { query, signal: options.signal });
  }

  /** Queue depths, workers seen, the caller's recent failures and usage. */
  fleet(options: RequestOptions = {}): APIPromise<FleetResponse> {
    return this.call("GET", "/v1/fleet", options);
  }

  /** One non-streaming call through om's chat-completions proxy, with memory on `threadId` (sent as
   * `X-OM-Thread-Id`). For streaming, point an OpenAI client at `${baseUrl}/v1`. */
  chatCompletions(
    request: Omit<ChatCompletionRequest, "stream"> & { stream?: false },
    options: RequestOptions & { threadId?: string; resourceId?: string } = {},
  ): APIPromise<ChatCompletionResponse> {
    const headers: Record<string, string> = {};
    if (options.threadId !== undefined) headers["x-om-thread-id"] = options.threadId;
    if (options.resourceId !== undefined) headers["x-om-resource-id"] = options.resourceId;
    return this.call("POST", "/v1/chat/completions", {
      body: { ...request, stream: false },
      headers,
      signal: options.signal,
    });
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
      if (value !== undefined && value !== null) url.searchParams.set(key, String(value));
    }
    return url.toString();
  }

  /** One call with the retry policy: JSON in and out, error answers thrown as `OMAPIError`s. Any route
   * without a method of its own: `om.call("GET", "/v1/whoami")`. */
  call<T>(method: string, path: string, options: CallOptions = {}): APIPromise<T> {
    return new APIPromise(this.send<T>(method, path, options));
  }

  private async send<T>(method: string, path: string, options: CallOptions): Promise<WithResponse<T>> {
    const safety = options.safety ?? (method !== "POST" || READ_POSTS.test(path) ? "idempotent" : "once");
    const url = this.url(path, options.query);
    const headers: Record<string, string> = { ...this.headers, accept: "application/json", ...options.headers };
    const body = options.content?.text ?? (options.body === undefined ? undefined : JSON.stringify(options.body));
    if (body !== undefined) headers["content-type"] = options.content?.type ?? "application/json";
    const backoff = new Backoff(this.retry);
    for (;;) {
      backoff.attempts += 1;
      const signals = [AbortSignal.timeout(this.timeoutMs), ...(options.signal ? [options.signal] : [])];
      let failure: unknown;
      try {
        const response = await this.fetch(url, { method, headers, body, signal: AbortSignal.any(signals) });
        if (response.ok || options.accept?.includes(response.status)) {
          if (response.status === 204) return { data: undefined as T, response };
          const type = response.headers.get("content-type") ?? "";
          const data = type.includes("json") ? await response.json() : await response.text();
          return { data: data as T, response };
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

/** The precondition of an observation line edit: SHA-256 (hex) of the line's text as read. */
export async function lineSha256(line: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(line));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
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
