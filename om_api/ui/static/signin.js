// The sign-in form: an om API key, kept in sessionStorage (this tab only) and sent as a Bearer token.

import { h, replace } from "./dom.js";

/** Render the form into `view`; `submit(key)` resolves to an error message, or null when signed in. */
export function signinPage(view, message, submit) {
  const error = h("p", { class: "error", testid: "signin-error", role: "alert", id: "signin-error" });
  if (message) error.textContent = message;
  else error.hidden = true;
  const input = h("input", {
    id: "signin-key",
    name: "key",
    type: "password",
    autocomplete: "off",
    required: true,
    spellcheck: "false",
    testid: "signin-key",
    "aria-describedby": "signin-help signin-error",
  });
  const button = h("button", { type: "submit", text: "Sign in" });
  const form = h(
    "form",
    { class: "signin panel", testid: "signin-form", "aria-labelledby": "signin-title" },
    h("h1", { id: "signin-title", text: "Sign in" }),
    h("label", { for: "signin-key", text: "API key" }),
    input,
    h("p", { id: "signin-help", class: "muted", text: "An om key (om keys create TENANT). It stays in this browser tab." }),
    button,
    error,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const key = input.value.trim();
    if (!key) return;
    button.disabled = true;
    const problem = await submit(key);
    button.disabled = false;
    if (problem) {
      error.hidden = false;
      error.textContent = problem;
      input.focus();
    }
  });
  replace(view, form);
  input.focus();
}
