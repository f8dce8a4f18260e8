// The fleet: queue depths and workers (operational facts of the deployment), this tenant's recent
// failures and model usage, and a link to Flower when the operator configured one (OM_FLOWER_URL).

import { api, seg } from "./api.js";
import { empty, h, replace, timeEl, usd } from "./dom.js";
import { spendPanel } from "./spend.js";

const REFRESH_MS = 5000;

function table(caption, head, rows) {
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      {},
      h("caption", { class: "sr-only", text: caption }),
      h("thead", {}, h("tr", {}, head.map((c) => h("th", { scope: "col", text: c })))),
      h("tbody", {}, rows),
    ),
  );
}

export function fleetPage(ctx) {
  const queues = h("div", { testid: "queue-depths" });
  const workers = h("div", { testid: "workers" });
  const failures = h("div", { testid: "recent-failures" });
  const usage = h("div", { testid: "usage" });
  const flower = h("div", {});
  const spend = spendPanel();
  const meta = h("p", { class: "muted small", role: "status" });
  let closed = false;
  let timer = null;

  function render(fleet) {
    meta.textContent = `executor: ${fleet.executor} · updated ${new Date().toLocaleTimeString()}`;
    replace(
      queues,
      fleet.queues.length
        ? table("Queue depths", ["Queue", "Waiting tasks"], fleet.queues.map((q) => h("tr", {}, h("td", {}, h("code", { text: q.name })), h("td", { class: "num", text: String(q.depth) }))))
        : empty(fleet.executor === "inline" ? "No queues: this server runs memory work in its own process (inline)." : "No queues."),
    );
    replace(
      workers,
      fleet.workers.length
        ? table("Workers", ["Worker", "Queues"], fleet.workers.map((w) => h("tr", {}, h("td", {}, h("code", { text: w.name })), h("td", { text: (w.queues || []).join(", ") }))))
        : empty(fleet.executor === "inline" ? "No workers: inline executor." : "No worker answered the ping."),
    );
    replace(
      failures,
      fleet.recent_failures.length
        ? table(
            "Recent failures",
            ["When", "Thread", "Type", "Error"],
            fleet.recent_failures.map((f) =>
              h(
                "tr",
                {},
                h("td", {}, timeEl(f.at)),
                h("td", {}, f.thread_id ? h("a", { href: `#/threads/${seg(f.thread_id)}`, text: f.thread_id }) : "—"),
                h("td", { text: f.type.replace(/^data-om-/, "") }),
                h("td", { class: "wrap", text: typeof f.error === "string" ? f.error : JSON.stringify(f.error) }),
              ),
            ),
          )
        : empty("No failures recently."),
    );
    const u = fleet.usage;
    const om = fleet.om_usage;
    replace(
      usage,
      h("h3", { text: "Memory (Observer and Reflector), this tenant" }),
      om
        ? h(
            "dl",
            { class: "kv" },
            h("dt", { text: "Cycles" }), h("dd", { text: String(om.cycles) }),
            h("dt", { text: "Tokens in / out" }), h("dd", { text: `${om.input_tokens.toLocaleString()} / ${om.output_tokens.toLocaleString()}` }),
            h("dt", { text: "Cost" }), h("dd", { text: usd(om.cost_usd) }),
          )
        : empty("Not reported by this server."),
      h("h3", { text: "Actor model through the proxy, this key" }),
      u
        ? h(
            "dl",
            { class: "kv" },
            h("dt", { text: "Actor calls" }), h("dd", { text: String(u.calls) }),
            h("dt", { text: "Prompt / completion tokens" }), h("dd", { text: `${u.prompt_tokens.toLocaleString()} / ${u.completion_tokens.toLocaleString()}` }),
            h("dt", { text: "Cost" }), h("dd", { text: usd(u.cost_usd) }),
          )
        : empty("Counted per API key; this server runs without keys."),
    );
    replace(
      flower,
      fleet.flower_url && /^https?:\/\//i.test(fleet.flower_url)
        ? h("a", { href: fleet.flower_url, testid: "flower-link", target: "_blank", rel: "noopener noreferrer", text: "Open Flower (task monitor)" })
        : h("p", { class: "muted", testid: "flower-link", text: "Flower is not linked: set OM_FLOWER_URL on the API to show a link here." }),
    );
  }

  async function load() {
    try {
      const fleet = await api("/v1/fleet");
      if (closed) return;
      render(fleet);
    } catch (error) {
      if (closed) return;
      meta.textContent = `Could not load the fleet: ${error.message}`;
    }
    if (!closed) timer = setTimeout(load, REFRESH_MS);
  }

  ctx.onCleanup(() => {
    closed = true;
    clearTimeout(timer);
  });

  const section = (title, ...body) =>
    h("section", { class: "panel", "aria-label": title }, h("h2", { text: title }), ...body);
  replace(
    ctx.view,
    h(
      "div",
      { testid: "fleet-page", class: "fleet" },
      h("h1", { text: "Fleet" }),
      meta,
      h(
        "div",
        { class: "grid" },
        section("Queues", queues),
        section("Workers", workers),
        section("Recent failures (this tenant)", failures),
        section("Model usage and cost", usage),
        section("Memory-model spend (this tenant)", spend.el),
        section("Flower", flower),
      ),
    ),
  );
  load();
  spend.load();
}
