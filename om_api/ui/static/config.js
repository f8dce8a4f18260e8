// The thread's config overrides: a form for the options people change most, and the rest as JSON.
// Validation is the server's (PUT /config answers 422 with the `field` to fix); the error is shown next
// to that field, so the user sees which value was refused and why, in the server's own words.

import { api, ApiError } from "./api.js";
import { h, replace } from "./dom.js";

/** The options the form shows, by their path in the overrides (camelCase, as the config spells them). */
const FIELDS = [
  { path: "enabled", label: "Memory enabled", type: "bool" },
  { path: "scope", label: "Scope", type: "choice", choices: ["thread", "resource"] },
  { path: "retrieval", label: "Retrieval (search index)", type: "bool" },
  { path: "observation.messageTokens", label: "Observe at (message tokens)", type: "number" },
  { path: "observation.bufferTokens", label: "Buffer every (tokens or ratio; false: off)", type: "number" },
  { path: "observation.bufferActivation", label: "Buffer activation", type: "number" },
  { path: "observation.blockAfter", label: "Observation blockAfter", type: "number" },
  { path: "reflection.observationTokens", label: "Reflect at (observation tokens)", type: "number" },
  { path: "reflection.blockAfter", label: "Reflection blockAfter", type: "number" },
  { path: "workingMemory.enabled", label: "Working memory", type: "bool" },
];
const OTHER = "__other__";

function getPath(object, path) {
  return path.split(".").reduce((o, k) => (o && typeof o === "object" && !Array.isArray(o) ? o[k] : undefined), object);
}

function setPath(object, path, value) {
  const keys = path.split(".");
  let target = object;
  for (const key of keys.slice(0, -1)) {
    if (!target[key] || typeof target[key] !== "object" || Array.isArray(target[key])) target[key] = {};
    target = target[key];
  }
  target[keys[keys.length - 1]] = value;
}

function isScalar(value) {
  return value === null || typeof value !== "object";
}

/** `object` without the form's paths (what the JSON box holds); empty objects left behind are dropped. */
function withoutFields(object) {
  const copy = JSON.parse(JSON.stringify(object || {}));
  for (const { path } of FIELDS) {
    const keys = path.split(".");
    const parent = keys.length > 1 ? getPath(copy, keys.slice(0, -1).join(".")) : copy;
    const value = parent && typeof parent === "object" ? parent[keys[keys.length - 1]] : undefined;
    // a block where the form has a scalar (`retrieval: {vector: true}`) stays in the JSON box, whole
    if (value !== undefined && !isScalar(value)) continue;
    if (parent && typeof parent === "object") delete parent[keys[keys.length - 1]];
    if (keys.length > 1 && parent && typeof parent === "object" && !Array.isArray(parent) && !Object.keys(parent).length) {
      delete copy[keys[0]];
    }
  }
  return copy;
}

/** A typed value from an input's text; text that is no number is sent as is, for the server to refuse. */
function parseValue(field, text) {
  if (field.type === "bool") return text === "true";
  if (field.type === "choice") return text;
  if (text === "false") return false;
  const number = Number(text);
  return text !== "" && Number.isFinite(number) ? number : text;
}

/** Which form field an API error's `field` names (`overrides.observation.messageTokens`), or OTHER. */
export function fieldFor(errorField) {
  if (!errorField) return OTHER;
  const at = errorField.indexOf("overrides.");
  const path = at >= 0 ? errorField.slice(at + "overrides.".length) : errorField;
  const norm = (p) => p.toLowerCase().replace(/_/g, "");
  const match = FIELDS.find((f) => norm(path) === norm(f.path) || norm(path).startsWith(`${norm(f.path)}.`));
  return match ? match.path : OTHER;
}

export function configEditor(base, onSaved) {
  let models = null;
  const inputs = new Map();
  const holders = new Map();
  const idOf = (path) => `cfg-${path.replace(/\./g, "-")}`;
  const error = h("p", { class: "error field-error", testid: "config-error", role: "alert", id: "config-error" });
  const status = h("p", { class: "muted small", role: "status" });
  const rows = FIELDS.map((field) => {
    const id = idOf(field.path);
    let input;
    if (field.type === "bool" || field.type === "choice") {
      const options = field.type === "bool" ? ["true", "false"] : field.choices;
      input = h("select", { id, name: field.path }, h("option", { value: "", text: "(inherit)" }), options.map((o) => h("option", { value: o, text: o })));
    } else {
      input = h("input", { id, name: field.path, type: "text", inputmode: "decimal", autocomplete: "off" });
    }
    inputs.set(field.path, input);
    const holder = h("div", { class: "field", "data-field": field.path }, h("label", { for: id, text: field.label }), h("code", { class: "field-path", text: field.path }), input);
    holders.set(field.path, holder);
    return holder;
  });
  const other = h("textarea", { id: "cfg-other", name: "other", rows: 4, spellcheck: "false" });
  const otherHolder = h("div", { class: "field wide", "data-field": OTHER }, h("label", { for: "cfg-other", text: "Other overrides (JSON object)" }), other);
  holders.set(OTHER, otherHolder);
  const save = h("button", { type: "submit", testid: "config-save", text: "Save overrides" });
  const effectiveView = h("pre", { class: "effective" });
  const form = h(
    "form",
    { testid: "config-editor", class: "config", novalidate: true },
    h("p", { class: "muted small", text: "Empty fields inherit the resource's and the service's values (shown as placeholders)." }),
    h("div", { class: "fields" }, rows, otherHolder),
    h("div", { class: "inline" }, save),
    status,
    h("details", {}, h("summary", { text: "Effective config" }), effectiveView),
  );

  function clearError() {
    error.remove();
    error.textContent = "";
    for (const input of [...inputs.values(), other]) {
      input.removeAttribute("aria-invalid");
      input.removeAttribute("aria-describedby");
    }
  }

  function showError(path, message) {
    clearError();
    const holder = holders.get(path) || otherHolder;
    const input = inputs.get(path) || other;
    error.textContent = message;
    holder.append(error);
    input.setAttribute("aria-invalid", "true");
    input.setAttribute("aria-describedby", "config-error");
    input.focus();
  }

  function fill(config) {
    for (const field of FIELDS) {
      const input = inputs.get(field.path);
      const value = getPath(config.overrides || {}, field.path);
      const inherited = getPath(config.effective || {}, field.path);
      const inJson = value !== undefined && !isScalar(value);
      input.disabled = inJson;
      input.title = inJson ? "Set as a block in the JSON box below" : "";
      input.value = value === undefined || value === null || inJson ? "" : String(value);
      if (input.tagName === "INPUT") input.placeholder = inherited === undefined ? "default" : String(inherited);
    }
    const rest = withoutFields(config.overrides);
    other.value = Object.keys(rest).length ? JSON.stringify(rest, null, 2) : "";
    replace(effectiveView, JSON.stringify(config.effective, null, 2));
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearError();
    let overrides = {};
    if (other.value.trim()) {
      try {
        overrides = JSON.parse(other.value);
      } catch (problem) {
        showError(OTHER, `Not valid JSON: ${problem.message}`);
        return;
      }
      if (!overrides || typeof overrides !== "object" || Array.isArray(overrides)) {
        showError(OTHER, "Give a JSON object, e.g. {\"temporalMarkers\": true}");
        return;
      }
    }
    for (const field of FIELDS) {
      const input = inputs.get(field.path);
      const text = input.value.trim();
      if (!input.disabled && text !== "") setPath(overrides, field.path, parseValue(field, text));
    }
    save.disabled = true;
    status.textContent = "Saving…";
    try {
      const saved = await api(`${base}/config`, {
        method: "PUT",
        body: { overrides: Object.keys(overrides).length ? overrides : null },
      });
      fill(saved);
      status.textContent = "Saved.";
      models = saved.models || null;
      onSaved(saved.effective);
    } catch (problem) {
      status.textContent = "";
      if (problem instanceof ApiError) showError(fieldFor(problem.field), problem.message);
      else showError(OTHER, problem.message);
    } finally {
      save.disabled = false;
    }
  });

  return {
    element: form,
    /** The Observer's and Reflector's models of the last config read or saved (`models` of the answer). */
    get models() {
      return models;
    },
    async load() {
      const config = await api(`${base}/config`);
      fill(config);
      models = config.models || null;
      return config.effective;
    },
  };
}
