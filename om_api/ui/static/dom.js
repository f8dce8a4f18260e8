// DOM helpers. Every piece of data reaches the page as a text node (textContent): observation text,
// messages, ids and error messages are user-controlled, and nothing here ever parses them as HTML.

/**
 * Build an element. `attrs` values: strings/numbers become attributes (`text` sets textContent, `on*`
 * functions become listeners, `dataset`-style keys are written as attributes as given); children are
 * nodes or strings (strings become text nodes), null/false are skipped, arrays are flattened.
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "text") {
      el.textContent = String(value);
    } else if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2).toLowerCase(), value);
    } else if (key === "testid") {
      el.setAttribute("data-testid", String(value));
    } else if (value === true) {
      el.setAttribute(key, "");
    } else {
      el.setAttribute(key, String(value));
    }
  }
  append(el, children);
  return el;
}

/** Append children (nodes or strings as text) to `el`. */
export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** Replace all children of `el`. */
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

const dateTime = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });
const timeOnly = new Intl.DateTimeFormat(undefined, { timeStyle: "medium" });

/** A timestamp as local date and time, or "never". */
export function when(iso) {
  if (!iso) return "never";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : dateTime.format(d);
}

/** A timestamp as local clock time (the live feed). */
export function clock(iso) {
  const d = iso ? new Date(iso) : new Date();
  return Number.isNaN(d.getTime()) ? String(iso) : timeOnly.format(d);
}

/** A `<time>` element with the machine-readable value and a readable text. */
export function timeEl(iso) {
  return h("time", { datetime: iso || null, text: when(iso) });
}

export function tokens(n) {
  return `${Number(n || 0).toLocaleString()} tok`;
}

export function usd(n) {
  const value = Number(n || 0);
  return value === 0 ? "$0" : value < 0.01 ? `$${value.toFixed(4)}` : `$${value.toFixed(2)}`;
}

/** A section with a heading and an optional test id; `body` children follow the heading. */
export function panel(title, testid, ...body) {
  const id = `h-${title.toLowerCase().replace(/[^a-z0-9]+/g, "-")}`;
  return h("section", { class: "panel", "aria-labelledby": id, testid }, h("h2", { id, text: title }), ...body);
}

/** A muted "nothing here" line. */
export function empty(text) {
  return h("p", { class: "empty", text });
}
