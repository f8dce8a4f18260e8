// The dashboard's shell: who is signed in (GET /v1/whoami), hash routing, and the page lifecycle.
// Routes: #/resources, #/resources/<resource id>, #/threads/<thread id>, #/fleet.

import { api, ApiError, getKey, onUnauthorized, setKey } from "./api.js";
import { h, replace } from "./dom.js";
import { fleetPage } from "./fleet.js";
import { resourcesPage } from "./resources.js";
import { signinPage } from "./signin.js";
import { threadPage } from "./thread.js";

const main = document.getElementById("main");
const nav = document.getElementById("nav");
const who = document.getElementById("who");
const signout = document.getElementById("signout");

const session = { whoami: null, cleanup: null, signingIn: false };

function stopPage() {
  if (session.cleanup) {
    try {
      session.cleanup();
    } finally {
      session.cleanup = null;
    }
  }
}

function showSignin(message) {
  stopPage();
  session.whoami = null;
  nav.hidden = true;
  signout.hidden = true;
  who.textContent = "";
  const view = h("div", { class: "view" });
  replace(main, view);
  signinPage(view, message, async (key) => {
    setKey(key);
    session.signingIn = true; // a 401 here is the form's own answer, not a session that expired
    try {
      session.whoami = await api("/v1/whoami");
    } catch (error) {
      setKey(null);
      if (error instanceof ApiError && error.status === 401) return "That key was refused: check it and try again.";
      return `Could not reach the API: ${error.message}`;
    } finally {
      session.signingIn = false;
    }
    await route();
    return null;
  });
}

function updateHeader(path) {
  const whoami = session.whoami;
  nav.hidden = false;
  signout.hidden = whoami.auth !== "key";
  who.textContent = whoami.auth === "key" ? `tenant ${whoami.tenant_id ?? ""}` : "no authentication (om up)";
  for (const link of nav.querySelectorAll("a")) {
    if (link.dataset.nav === path) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

async function route() {
  const hash = location.hash || "#/resources";
  if (!hash.startsWith("#/")) return; // an in-page anchor, not a route
  stopPage();
  if (!session.whoami) {
    try {
      session.whoami = await api("/v1/whoami");
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) {
        showSignin(getKey() ? "Your key was refused: sign in again." : null);
      } else {
        replace(main, h("p", { class: "error", role: "alert", text: `Could not reach the API: ${error.message}` }));
      }
      return;
    }
  }
  const parts = hash.slice(2).split("/").map((p) => decodeURIComponent(p));
  const view = h("div", { class: "view" });
  replace(main, view);
  const ctx = {
    view,
    whoami: session.whoami,
    onCleanup(fn) {
      session.cleanup = fn;
    },
  };
  updateHeader(parts[0] || "resources");
  if (parts[0] === "threads" && parts[1]) threadPage(ctx, parts[1]);
  else if (parts[0] === "fleet") fleetPage(ctx);
  else if (parts[0] === "resources" || parts[0] === "") resourcesPage(ctx, parts[1] || null);
  else
    replace(
      view,
      h("div", { testid: "not-found", class: "notfound", role: "alert" }, h("h1", { text: "Not found" }),
        h("p", { text: "There is no such page. " }, h("a", { href: "#/resources", text: "Back to resources" }))),
    );
  main.focus({ preventScroll: true });
}

onUnauthorized(() => {
  if (session.signingIn) return;
  setKey(null);
  showSignin("Your key was refused (401): sign in again.");
});

signout.addEventListener("click", () => {
  setKey(null);
  showSignin("Signed out.");
});

window.addEventListener("hashchange", route);
route();
