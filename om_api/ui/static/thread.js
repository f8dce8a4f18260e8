// One thread: its memory windows, the observation log and what waits to join it, the generations and what
// each reflection changed, the values around the log, the recent messages, a live feed of its events, and
// the actions (observe, reflect with guidance, config overrides, search). Everything comes from /v1 with
// the signed-in key; another tenant's thread answers 404 there, and this page then says "not found".

import { api, ApiError, attempt, seg } from "./api.js";
import { clock, empty, h, panel, replace, timeEl, tokens, usd, when } from "./dom.js";
import { renderLineParts, renderLog } from "./obslog.js";
import { follow } from "./sse.js";
import { configEditor } from "./config.js";

/** Event types after which the page reads the thread again. */
const REFRESH_ON = /^data-om-(buffering|observation|activation|reflection|thread-update|working-memory|extraction|status)/;
const FEED_MAX = 200;

/** `blockAfter` in tokens, as om_core.config.options resolves it; null when buffering is off (nothing blocks). */
export function blockAfterTokens(raw, threshold, asyncEnabled) {
  if (!asyncEnabled || !threshold) return null;
  const value = raw === undefined || raw === null ? 1.2 : Number(raw);
  if (value >= 100) return Math.round(value);
  if (value >= 1) return Math.round(threshold * value);
  return null;
}

/** Whether async buffering is on for an effective config (om_core.config.options._async_buffering_enabled). */
export function asyncBuffering(effective) {
  const obs = (effective && effective.observation) || {};
  const refl = (effective && effective.reflection) || {};
  if (obs.bufferTokens === false) return false;
  if ((effective && effective.scope) !== "resource") return true;
  return obs.bufferTokens != null || obs.bufferActivation != null || refl.bufferActivation != null;
}

/** A model option as a short line: a model, a fallback list (with each entry's retries), or input tiers. */
export function describeModel(spec) {
  if (spec == null) return "";
  if (typeof spec === "string") return spec;
  if (Array.isArray(spec)) return spec.map(describeModel).join(", then ");
  if (typeof spec.model === "string") return `${spec.model} (${spec.maxRetries} ${spec.maxRetries === 1 ? "retry" : "retries"})`;
  if (spec.upTo && typeof spec.upTo === "object") {
    const tiers = Object.entries(spec.upTo).sort((a, b) => Number(a[0]) - Number(b[0]));
    return `by input size: ${tiers.map(([t, m]) => `up to ${Number(t).toLocaleString("en")} ${describeModel(m)}`).join("; ")}`;
  }
  return JSON.stringify(spec);
}

/** A token bar: the window's tokens against its threshold, the buffered share, the blockAfter line, and the
 * model that works on the window (the Observer's or the Reflector's) when known. */
function tokenBar({ testid, label, used, threshold, buffered, bufferedLabel, blockAfter, model, modelRole }) {
  const scale = Math.max(used, threshold, blockAfter || 0, 1) * 1.04;
  const pct = (n) => `${Math.min(100, (100 * n) / scale).toFixed(2)}%`;
  const fill = h("div", { class: `bar-fill${used >= threshold ? " over" : ""}` });
  fill.style.width = pct(used);
  const share = h("div", { class: "bar-buffered", title: `${bufferedLabel}: ${buffered} tokens` });
  share.style.width = pct(Math.min(buffered, used || buffered));
  share.hidden = !buffered;
  const line = h("div", { class: "bar-threshold", title: `threshold ${threshold}` });
  line.style.left = pct(threshold);
  const block = blockAfter ? h("div", { class: "bar-block", title: `blockAfter ${blockAfter}` }) : null;
  if (block) block.style.left = pct(blockAfter);
  const percent = threshold ? Math.round((100 * used) / threshold) : 0;
  return h(
    "div",
    { class: "bar-wrap", testid },
    h("div", { class: "bar-head" }, h("strong", { text: label }), h("span", { class: "bar-value", text: `${tokens(used)} of ${tokens(threshold)} (${percent}%)` })),
    model ? h("p", { class: "bar-model muted small", testid: `${testid}-model`, text: `${modelRole}: ${describeModel(model)}` }) : null,
    h(
      "div",
      {
        class: "bar",
        role: "meter",
        "aria-label": label,
        "aria-valuemin": 0,
        "aria-valuemax": threshold,
        "aria-valuenow": used,
        "aria-valuetext": `${used} of ${threshold} tokens; ${bufferedLabel} ${buffered}${blockAfter ? `; blockAfter ${blockAfter}` : ""}`,
      },
      fill,
      share,
      line,
      block,
    ),
    h(
      "ul",
      { class: "legend" },
      h("li", {}, h("span", { class: "key key-fill", "aria-hidden": "true" }), `${label}: ${used.toLocaleString()}`),
      h("li", {}, h("span", { class: "key key-buffered", "aria-hidden": "true" }), `${bufferedLabel}: ${buffered.toLocaleString()}`),
      h("li", {}, h("span", { class: "key key-threshold", "aria-hidden": "true" }), `threshold: ${threshold.toLocaleString()}`),
      blockAfter
        ? h("li", {}, h("span", { class: "key key-block", "aria-hidden": "true" }), `blockAfter: ${blockAfter.toLocaleString()}`)
        : h("li", { class: "muted", text: "blockAfter: none (buffering off)" }),
    ),
  );
}

function kv(pairs) {
  return h(
    "dl",
    { class: "kv" },
    pairs.filter(Boolean).map(([k, v]) => [h("dt", { text: k }), h("dd", {}, v)]),
  );
}

/** Text of a message's parts: text parts as they are, others named by type. */
function messageText(message) {
  return (message.parts || [])
    .map((part) => (part.type === "text" || part.type === "reasoning" ? part.text || "" : `[${part.type}]`))
    .join("\n");
}

/** A one-line summary of an event's payload for the feed. */
export function eventSummary(event) {
  const d = event.data || {};
  const bits = [];
  if (d.operationType) bits.push(d.operationType);
  for (const key of ["tokensToBuffer", "tokensToObserve", "tokensActivated", "observationTokens", "generationCount", "triggeredBy", "newTitle"]) {
    if (d[key] !== undefined && d[key] !== null) bits.push(`${key} ${d[key]}`);
  }
  if (d.error) bits.push(`error: ${typeof d.error === "string" ? d.error : JSON.stringify(d.error)}`);
  return bits.join(" · ");
}

export function threadPage(ctx, threadId) {
  const base = `/v1/threads/${seg(threadId)}`;
  const live = h("span", { class: "live connecting", testid: "live-status", role: "status", text: "connecting" });
  const header = h("div", { class: "thread-head" });
  const bars = h("div", { class: "bars" });
  const log = h("div", { testid: "observation-log", class: "log" });
  const logMeta = h("div", { class: "muted small" });
  const chunks = h("div", { testid: "buffered-chunks" });
  const reflection = h("div", { testid: "buffered-reflection" });
  const generations = h("ol", { testid: "generation-list", class: "generations", reversed: true });
  const diff = h("div", { testid: "generation-diff", class: "diff", "aria-live": "polite" });
  const task = h("div", { testid: "current-task" });
  const suggested = h("div", { testid: "suggested-response" });
  const extracted = h("div", { testid: "extracted" });
  const memory = h("div", { testid: "working-memory" });
  const messages = h("ol", { testid: "recent-messages", class: "messages" });
  const feed = h("ol", { testid: "event-feed", class: "feed", "aria-live": "polite", "aria-relevant": "additions" });
  const actionStatus = h("p", { class: "action-status", role: "status" });
  let diffShown = null; // the generation whose diff is open
  let closed = false;

  // --------------------------------------------------------------------------------------- reading

  function renderStatus(status, effective, models) {
    if (!status) {
      replace(bars, empty("No memory record yet: post a turn first."));
      return;
    }
    const active = status.windows.active;
    const buffered = status.windows.buffered;
    const asyncOn = asyncBuffering(effective);
    const obsCfg = (effective && effective.observation) || {};
    const reflCfg = (effective && effective.reflection) || {};
    replace(
      bars,
      tokenBar({
        testid: "bar-messages",
        label: "Unobserved messages",
        used: active.messages.tokens,
        threshold: active.messages.threshold,
        buffered: buffered.observations.messageTokens,
        bufferedLabel: `buffered in ${buffered.observations.chunks} chunk(s)`,
        blockAfter: blockAfterTokens(obsCfg.blockAfter, active.messages.threshold, asyncOn),
        model: models && models.observer,
        modelRole: "Observer",
      }),
      tokenBar({
        testid: "bar-observations",
        label: "Observations",
        used: active.observations.tokens,
        threshold: active.observations.threshold,
        buffered: buffered.reflection.inputObservationTokens,
        bufferedLabel: `covered by buffered reflection (${buffered.reflection.status})`,
        blockAfter: blockAfterTokens(reflCfg.blockAfter, active.observations.threshold, asyncOn),
        model: models && models.reflector,
        modelRole: "Reflector",
      }),
      h("p", { class: "muted small", text: `generation ${status.generationCount} · step ${status.stepNumber} · buffering ${buffered.observations.status}` }),
    );
  }

  function renderObservations(view) {
    if (view.active) {
      replace(log, renderLog(view.active.observations));
      replace(
        logMeta,
        `generation ${view.active.generation_count} · ${tokens(view.active.observation_tokens)} · last observed ${when(view.active.last_observed_at)} · observed through part ${view.active.observed_through_seq}`,
      );
    } else {
      replace(log, empty("No observations yet."));
      replace(logMeta);
    }
    replace(
      chunks,
      view.buffered_chunks.length
        ? h(
            "ol",
            { class: "chunks" },
            view.buffered_chunks.map((c) =>
              h(
                "li",
                { class: "chunk" },
                h("p", { class: "muted small" }, `parts ${c.from_seq}–${c.to_seq} · ${tokens(c.message_tokens)} of messages → ${tokens(c.observation_tokens)} · `, timeEl(c.created_at)),
                renderLog(c.observations),
              ),
            ),
          )
        : empty("No buffered chunks waiting for activation."),
    );
    const br = view.buffered_reflection;
    replace(
      reflection,
      br
        ? [h("p", { class: "muted small", text: `${tokens(br.input_observation_tokens)} of the log (${br.reflected_line_count} lines) → ${tokens(br.observation_tokens)}` }), renderLog(br.observations)]
        : empty("No buffered reflection."),
    );
    const gens = [];
    if (view.active) gens.push({ n: view.active.generation_count, tokens: view.active.observation_tokens, from: null, until: null, current: true });
    for (const g of view.generations) gens.push({ n: g.generation_count, tokens: g.observation_tokens, from: g.created_at, until: g.retired_at });
    replace(
      generations,
      gens.length
        ? gens.map((g) =>
            h(
              "li",
              { class: "generation", "data-generation": g.n },
              h("span", { class: "gen-label", text: `Generation ${g.n}${g.current ? " (active)" : ""}` }),
              h("span", { class: "muted small" }, ` ${tokens(g.tokens)}`, g.until ? [" · retired ", timeEl(g.until)] : null),
              g.n > 0
                ? h("button", { type: "button", class: "secondary small", text: "What changed", "aria-controls": "generation-diff", onclick: () => showDiff(g.n) })
                : null,
            ),
          )
        : h("li", {}, empty("No generations yet.")),
    );
    replace(task, view.current_task ? h("p", { class: "prose", text: view.current_task }) : empty("None."));
    replace(suggested, view.suggested_response ? h("p", { class: "prose", text: view.suggested_response }) : empty("None."));
  }

  async function showDiff(generation) {
    diffShown = generation;
    diff.id = "generation-diff";
    replace(diff, h("p", { class: "muted", text: `Loading the diff of generation ${generation}…` }));
    try {
      const body = await api(`${base}/generations/${generation}/diff`);
      const counts = { added: 0, removed: 0, kept: 0 };
      for (const line of body.lines) counts[line.op] = (counts[line.op] || 0) + 1;
      replace(
        diff,
        h("h3", { text: `Generation ${body.generation} against ${body.previous_generation ?? "nothing"}` }),
        h("p", { class: "muted small", text: `${counts.added} added, ${counts.removed} removed, ${counts.kept} kept` }),
        h(
          "ol",
          { class: "diff-lines" },
          body.lines.map((line) =>
            h(
              "li",
              { class: `diff-${line.op}` },
              h("span", { class: "diff-op", "aria-hidden": "true", text: line.op === "added" ? "+" : line.op === "removed" ? "−" : " " }),
              line.op === "kept" ? null : h("span", { class: "sr-only", text: `${line.op}: ` }),
              h("span", { class: "diff-text" }, renderLineParts(line.text)),
            ),
          ),
        ),
      );
    } catch (error) {
      replace(diff, h("p", { class: "error", role: "alert", text: error.message }));
    }
  }

  function renderDetail(detail) {
    replace(
      header,
      h("h1", {}, detail.title ? [h("span", { text: detail.title }), " "] : null, h("code", { text: detail.thread_id })),
      kv([
        ["Resource", h("a", { href: `#/resources/${seg(detail.resource_id)}`, text: detail.resource_id })],
        ["Scope", detail.scope],
        ["Messages", `${detail.counts.messages} (${detail.counts.unobserved_messages} unobserved)`],
        ["Last activity", timeEl(detail.last_activity_at)],
        ["OM cost", `${usd(detail.usage.cost_usd)} · ${detail.usage.total_tokens.toLocaleString()} tokens in ${detail.usage.cycles} cycles`],
        detail.last_actor_model ? ["Actor model", detail.last_actor_model] : null,
      ]),
    );
    const entries = Object.entries(detail.extracted || {});
    replace(
      extracted,
      entries.length
        ? kv(entries.map(([k, v]) => [k, h("pre", { text: typeof v === "string" ? v : JSON.stringify(v, null, 2) })]))
        : empty("No extracted values (no extractors configured, or none ran yet)."),
    );
  }

  function renderMemory(result) {
    if (result.error) {
      replace(memory, empty(result.error.code === "working_memory_disabled" ? "Working memory is off for this thread." : result.error.message));
      return;
    }
    const wm = result.data;
    const content = typeof wm.content === "string" ? wm.content : JSON.stringify(wm.content, null, 2);
    replace(
      memory,
      h("p", { class: "muted small" }, `${wm.scope} scope · ${wm.format} · version ${wm.version} · updated by ${wm.updated_by ?? "nobody"} `, timeEl(wm.updated_at)),
      h("pre", { class: "prose", text: content || "(empty)" }),
    );
  }

  function renderMessages(page) {
    const items = [...(page.items || [])].reverse(); // newest first
    replace(
      messages,
      items.length
        ? items.map((m) =>
            h(
              "li",
              { class: `message role-${m.role}` },
              h("span", { class: "msg-role", text: m.role }),
              m.createdAt ? h("span", { class: "muted small" }, " ", timeEl(m.createdAt)) : null,
              h("p", { class: "prose", text: messageText(m) }),
            ),
          )
        : h("li", {}, empty("No messages yet.")),
    );
  }

  let effective = null;
  let refreshing = null;
  let again = false;

  async function refresh() {
    if (refreshing) {
      again = true;
      return refreshing;
    }
    refreshing = (async () => {
      do {
        again = false;
        const [detail, status, view, page, wm] = await Promise.all([
          api(base),
          attempt(`${base}/status`),
          api(`${base}/observations`),
          api(`${base}/messages`, { query: { limit: 20 } }),
          attempt(`${base}/working-memory`),
        ]);
        if (closed) return;
        renderDetail(detail);
        renderStatus(status.data, effective, editor.models);
        renderObservations(view);
        renderMessages(page);
        renderMemory(wm);
        if (diffShown !== null && view.active && diffShown !== view.active.generation_count) {
          // a newer generation arrived: show what it changed
          await showDiff(view.active.generation_count);
        }
      } while (again && !closed);
    })().finally(() => {
      refreshing = null;
    });
    return refreshing;
  }

  let timer = null;
  function refreshSoon() {
    clearTimeout(timer);
    timer = setTimeout(() => refresh().catch(showError), 250);
  }

  function showError(error) {
    if (error instanceof ApiError && error.status === 401) return; // the shell shows the sign-in form
    actionStatus.textContent = `Could not refresh: ${error.message}`;
  }

  // ---------------------------------------------------------------------------------------- live

  function addEvent(event) {
    const item = h(
      "li",
      { class: `event ${/failed$/.test(event.type) ? "event-failed" : ""}`, "data-event-id": event.id, "data-event-type": event.type },
      h("span", { class: "event-time", text: clock(event.data && (event.data.activatedAt || event.data.completedAt || event.data.startedAt || event.data.failedAt || event.data.timestamp)) }),
      h("span", { class: "event-type", text: event.type.replace(/^data-om-/, "") }),
      h("span", { class: "event-summary", text: eventSummary(event) }),
    );
    feed.prepend(item);
    while (feed.children.length > FEED_MAX) feed.lastElementChild.remove();
    if (REFRESH_ON.test(event.type) || /failed$/.test(event.type)) refreshSoon();
  }

  // -------------------------------------------------------------------------------------- actions

  const observe = h("button", { type: "button", testid: "observe-now", text: "Observe now" });
  const guidance = h("textarea", { id: "reflect-guidance", testid: "reflect-guidance", rows: 1, placeholder: "e.g. keep every date and amount" });
  const reflect = h("button", { type: "button", testid: "reflect-now", text: "Reflect now" });

  async function operate(button, what, body) {
    button.disabled = true;
    actionStatus.textContent = `${what}…`;
    try {
      const result = await api(`${base}/${what === "Observing" ? "observe" : "reflect"}`, { method: "POST", body });
      actionStatus.textContent = result.error
        ? `${what} failed: ${result.error}`
        : result.applied
          ? `${what} done: the memory changed.`
          : result.completed
            ? `${what} done: nothing to change.`
            : `${what} is still running in the background.`;
      await refresh();
    } catch (error) {
      actionStatus.textContent = `${what} refused: ${error.message}`;
    } finally {
      button.disabled = false;
    }
  }
  observe.addEventListener("click", () => operate(observe, "Observing", { wait: true }));
  reflect.addEventListener("click", () => {
    const prompt = guidance.value.trim();
    operate(reflect, "Reflecting", prompt ? { prompt, wait: true } : { wait: true });
  });

  const searchInput = h("input", { id: "search-input", type: "search", testid: "search-input", autocomplete: "off" });
  const searchResults = h("ol", { testid: "search-results", class: "results", "aria-live": "polite" });
  const searchStatus = h("p", { class: "muted small", role: "status" });
  const searchForm = h(
    "form",
    { class: "search", role: "search" },
    h("label", { for: "search-input", text: "Search this thread's messages and observations" }),
    h("div", { class: "inline" }, searchInput, h("button", { type: "submit", text: "Search" })),
  );
  searchForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const query = searchInput.value.trim();
    if (!query) return;
    searchStatus.textContent = "Searching…";
    try {
      const body = await api(`${base}/search`, { method: "POST", body: { query, limit: 20 } });
      searchStatus.textContent = `${body.count} result(s) for “${query}”`;
      replace(
        searchResults,
        body.results.map((r) =>
          h(
            "li",
            { class: "result" },
            h("p", { class: "muted small" }, `${r.kind}${r.ranges ? ` ${r.ranges}` : ""} · `, timeEl(r.at), ` · score ${r.score.toFixed(3)}`),
            h("p", { class: "prose", text: r.text }),
          ),
        ),
      );
    } catch (error) {
      searchStatus.textContent = "";
      replace(searchResults, h("li", { class: "error", role: "alert", text: error.message }));
    }
  });

  // ------------------------------------------------------------------------------------------ page

  const editor = configEditor(base, (next) => {
    effective = next;
    refreshSoon();
  });

  const page = h(
    "div",
    { testid: "thread-page", class: "thread" },
    h("div", { class: "thread-top" }, header, h("div", { class: "live-wrap" }, live)),
    h(
      "section",
      { class: "panel actions", "aria-label": "Actions" },
      h("h2", { text: "Actions" }),
      h(
        "div",
        { class: "actions-row" },
        observe,
        h("div", { class: "guidance" }, h("label", { for: "reflect-guidance", text: "Guidance for the Reflector (optional)" }), guidance),
        reflect,
      ),
      actionStatus,
    ),
    h(
      "div",
      { class: "grid" },
      panel("Memory windows", null, bars),
      panel("Live events", null, h("p", { class: "muted small", text: "Newest first; replayed after a reconnect." }), feed),
      h("section", { class: "panel wide", "aria-labelledby": "h-observation-log" }, h("h2", { id: "h-observation-log", text: "Observation log" }), logMeta, log),
      panel("Buffered chunks", null, chunks),
      panel("Buffered reflection", null, reflection),
      panel("Generations", null, generations, diff),
      panel("Current task", null, task),
      panel("Suggested response", null, suggested),
      panel("Extracted values", null, extracted),
      panel("Working memory", null, memory),
      panel("Recent messages", null, h("p", { class: "muted small", text: "The last 20, newest first." }), messages),
      panel("Search", null, searchForm, searchStatus, searchResults),
      panel("Config overrides", null, editor.element),
    ),
  );

  const loading = h("p", { class: "muted", text: "Loading thread…" });
  replace(ctx.view, loading);

  let stream = null;
  ctx.onCleanup(() => {
    closed = true;
    clearTimeout(timer);
    if (stream) stream.close();
  });

  (async () => {
    try {
      const detail = await api(base);
      if (closed) return;
      renderDetail(detail);
      replace(ctx.view, page);
      effective = await editor.load();
      await refresh();
    } catch (error) {
      if (closed) return;
      if (error instanceof ApiError && error.status === 404) {
        replace(
          ctx.view,
          h(
            "div",
            { testid: "not-found", class: "notfound", role: "alert" },
            h("h1", { text: "Thread not found" }),
            h("p", { text: `There is no thread “${threadId}” for this key.` }),
            h("p", {}, h("a", { href: "#/resources", text: "Back to resources" })),
          ),
        );
        return;
      }
      if (error instanceof ApiError && error.status === 401) return;
      replace(ctx.view, h("p", { class: "error", role: "alert", text: `Could not load the thread: ${error.message}` }));
      return;
    }
    if (closed) return;
    stream = follow(threadId, {
      onEvent: addEvent,
      onState(state) {
        live.textContent = state;
        live.className = `live ${state}`;
      },
    });
  })();
}
