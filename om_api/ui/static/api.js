// The public JSON API, called with the signed-in key. The dashboard has no other data source: what it
// shows is exactly what this key may read through /v1.

const KEY = "om.key";

export function getKey() {
  return sessionStorage.getItem(KEY);
}

export function setKey(key) {
  if (key) sessionStorage.setItem(KEY, key);
  else sessionStorage.removeItem(KEY);
}

/** An error answer of the API: `status`, and the `code`, `message`, `field` of its error body. */
export class ApiError extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.code = error.code || null;
    this.field = error.field || null;
    this.errors = error.errors || null;
  }
}

/** Headers every call sends: the key, when signed in. */
export function authHeaders(extra = {}) {
  const key = getKey();
  return key ? { ...extra, Authorization: `Bearer ${key}` } : { ...extra };
}

/** Listeners told about a 401, so the app can return to the sign-in form with the message. */
const unauthorized = new Set();
export function onUnauthorized(fn) {
  unauthorized.add(fn);
}

/**
 * Call the API; resolves to the parsed JSON body (null for 204), throws `ApiError` for an error status.
 * A 401 also notifies the `onUnauthorized` listeners.
 */
export async function api(path, { method = "GET", body, signal, query } = {}) {
  let url = path;
  if (query) {
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) {
      if (v !== null && v !== undefined && v !== "") params.set(k, String(v));
    }
    const text = params.toString();
    if (text) url += `?${text}`;
  }
  const init = { method, signal, headers: authHeaders({ Accept: "application/json" }) };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(url, init);
  const parsed = response.status === 204 ? null : await response.json().catch(() => null);
  if (!response.ok) {
    const error = new ApiError(response.status, parsed);
    if (response.status === 401) unauthorized.forEach((fn) => fn(error));
    throw error;
  }
  return parsed;
}

/**
 * `api` for reads a thread may legitimately not have (no memory yet, working memory off, retrieval off):
 * resolves to `{data}` or, for a 404/409 answer, `{error}` so the page can say why; other errors throw.
 */
export async function attempt(path, options) {
  try {
    return { data: await api(path, options), error: null };
  } catch (error) {
    if (error instanceof ApiError && (error.status === 404 || error.status === 409)) {
      return { data: null, error };
    }
    throw error;
  }
}

/** A path segment: ids are restricted by the API's pattern, but encode anyway. */
export function seg(value) {
  return encodeURIComponent(value);
}
