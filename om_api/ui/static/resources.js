// Resources and their threads: search by id (resources) or id/title (threads), page through with the
// API's cursors, and show each row's counts, last activity and cost.

import { api, seg } from "./api.js";
import { empty, h, replace, timeEl, usd } from "./dom.js";

const PAGE = 20;

/**
 * A paged, searchable list. `load(q, cursor)` returns a Page `{items, next_cursor}`; `row(item)` renders
 * an item (possibly filling details in later). Keeps the cursors of the pages before, for "Previous".
 */
function pagedList({ title, testid, searchTestid, searchLabel, load, row, emptyText }) {
  const list = h("ul", { class: "rows", testid, "aria-live": "polite" });
  const status = h("p", { class: "muted small", role: "status" });
  const prev = h("button", { type: "button", class: "secondary", text: "Previous page", disabled: true });
  const next = h("button", { type: "button", class: "secondary", text: "Next page", disabled: true });
  const inputId = `${testid}-q`;
  const input = h("input", { id: inputId, type: "search", testid: searchTestid, autocomplete: "off" });
  let cursors = [null];
  let nextCursor = null;
  let query = "";
  let ticket = 0;

  async function show(cursor) {
    const mine = ++ticket;
    status.textContent = "Loading…";
    try {
      const page = await load(query, cursor);
      if (mine !== ticket) return;
      nextCursor = page.next_cursor;
      replace(list, page.items.length ? page.items.map(row) : h("li", {}, empty(emptyText)));
      status.textContent = `${page.items.length} shown${query ? ` matching “${query}”` : ""}${nextCursor ? ", more on the next page" : ""}`;
      next.disabled = !nextCursor;
      prev.disabled = cursors.length < 2;
    } catch (error) {
      if (mine !== ticket) return;
      status.textContent = "";
      replace(list, h("li", { class: "error", role: "alert", text: error.message }));
    }
  }

  let timer = null;
  input.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      query = input.value.trim();
      cursors = [null];
      show(null);
    }, 250);
  });
  next.addEventListener("click", () => {
    if (!nextCursor) return;
    cursors.push(nextCursor);
    show(nextCursor);
  });
  prev.addEventListener("click", () => {
    if (cursors.length < 2) return;
    cursors.pop();
    show(cursors[cursors.length - 1]);
  });

  const section = h(
    "section",
    { class: "panel", "aria-label": title },
    h("h2", { text: title }),
    h("form", { class: "search", role: "search", onsubmit: (e) => e.preventDefault() },
      h("label", { for: inputId, text: searchLabel }), input),
    status,
    list,
    h("div", { class: "pager" }, prev, next),
  );
  show(null);
  return section;
}

function stat(label, value) {
  return h("span", { class: "stat" }, h("span", { class: "stat-label", text: label }), " ", value);
}

function resourceRow(resource) {
  return h(
    "li",
    { testid: "resource-row", class: "row" },
    h("a", { href: `#/resources/${seg(resource.id)}`, class: "row-title", text: resource.id }),
    h(
      "span",
      { class: "row-stats" },
      stat("threads", String(resource.threads)),
      stat("messages", String(resource.messages)),
      stat("last activity", timeEl(resource.last_activity_at)),
      stat("cost", usd(resource.cost_usd)),
    ),
  );
}

/** Counts and cost of a thread: from the list item when the API gives them, else its detail (max 20). */
function threadRow(thread) {
  const stats = h("span", { class: "row-stats" });
  const fill = (messages, lastActivity, cost) =>
    replace(
      stats,
      stat("resource", thread.resource_id),
      stat("messages", String(messages)),
      stat("last activity", timeEl(lastActivity)),
      stat("cost", usd(cost)),
    );
  if (thread.messages !== undefined && thread.cost_usd !== undefined) {
    fill(thread.messages, thread.last_activity_at, thread.cost_usd);
  } else {
    fill("…", thread.last_activity_at, 0);
    api(`/v1/threads/${seg(thread.thread_id)}`)
      .then((detail) => fill(detail.counts.messages, detail.last_activity_at, detail.usage.cost_usd))
      .catch(() => {});
  }
  return h(
    "li",
    { testid: "thread-row", class: "row" },
    h(
      "a",
      { href: `#/threads/${seg(thread.thread_id)}`, class: "row-title" },
      thread.title ? h("span", { text: thread.title }) : null,
      h("code", { text: thread.thread_id }),
    ),
    stats,
  );
}

export function resourcesPage(ctx, resourceId) {
  const resources = pagedList({
    title: "Resources",
    testid: "resource-list",
    searchTestid: "resource-search",
    searchLabel: "Search resources by id",
    emptyText: "No resources yet: post a turn to create one.",
    load: (q, cursor) => api("/v1/resources", { query: { limit: PAGE, cursor, q } }),
    row: resourceRow,
  });
  const threads = pagedList({
    title: resourceId ? `Threads of ${resourceId}` : "All threads",
    testid: "thread-list",
    searchTestid: "thread-search",
    searchLabel: "Search threads by id or title",
    emptyText: "No threads match.",
    load: (q, cursor) => api("/v1/threads", { query: { limit: PAGE, cursor, q, resource_id: resourceId } }),
    row: threadRow,
  });
  replace(
    ctx.view,
    h("h1", { text: resourceId ? `Resource ${resourceId}` : "Resources and threads" }),
    resourceId ? h("p", {}, h("a", { href: "#/resources", text: "← All resources and threads" })) : null,
    h("div", { class: "columns" }, resources, threads),
  );
}
