// The spend panel of the fleet page: this tenant's memory-model tokens and cost per UTC day, its costliest
// threads per day, and the daily budget the operator set (GET /v1/usage/spend).

import { api, seg } from "./api.js";
import { empty, h, replace, usd } from "./dom.js";

const DAYS = 14;

function bar(value, max) {
  // A <meter>, not a styled span: the page's CSP refuses inline style attributes.
  return h("meter", { class: "spend-bar", min: 0, max: max > 0 ? max : 1, value, "aria-label": usd(value) });
}

function budgetLine(budget) {
  const limit = budget.daily_budget_usd === null ? "no daily budget" : `budget ${usd(budget.daily_budget_usd)} a day`;
  const state = budget.paused ? ` · observation paused until ${new Date(budget.resets_at).toLocaleString()}` : "";
  return h("p", { testid: "spend-budget", class: budget.paused ? "error" : "muted", text: `Today ${usd(budget.spent_today_usd)} · ${limit}${state}` });
}

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

/** The panel's element and its `load()`, which reads the spend again and redraws. */
export function spendPanel() {
  const el = h("div", { testid: "spend" });
  async function load() {
    let spend;
    try {
      spend = await api("/v1/usage/spend", { query: { days: DAYS } });
    } catch (error) {
      replace(el, h("p", { class: "muted", text: `Could not load the spend: ${error.message}` }));
      return;
    }
    const max = Math.max(0, ...spend.days.map((d) => d.cost_usd));
    replace(
      el,
      budgetLine(spend.budget),
      h("h3", { text: `Per day, last ${DAYS} days (UTC)` }),
      spend.days.length
        ? table(
            "Memory-model spend per day",
            ["Day", "Tokens in / out", "Cost", ""],
            spend.days.map((d) =>
              h(
                "tr",
                {},
                h("td", { text: d.day }),
                h("td", { class: "num", text: `${d.input_tokens.toLocaleString()} / ${d.output_tokens.toLocaleString()}` }),
                h("td", { class: "num", text: usd(d.cost_usd) }),
                h("td", { class: "spend-cell" }, bar(d.cost_usd, max)),
              ),
            ),
          )
        : empty("No memory-model usage in these days."),
      h("h3", { text: "Per thread per day" }),
      spend.threads.length
        ? table(
            "Memory-model spend per thread per day",
            ["Day", "Thread", "Tokens", "Cost"],
            spend.threads.map((t) =>
              h(
                "tr",
                {},
                h("td", { text: t.day }),
                h("td", {}, h("a", { href: `#/threads/${seg(t.thread_id)}`, text: t.thread_id })),
                h("td", { class: "num", text: t.total_tokens.toLocaleString() }),
                h("td", { class: "num", text: usd(t.cost_usd) }),
              ),
            ),
          )
        : empty("No thread has memory-model usage in these days."),
      spend.truncated ? h("p", { class: "muted small", text: "More threads than this server lists (OM_USAGE_MAX_ROWS)." }) : null,
    );
  }
  return { el, load };
}
