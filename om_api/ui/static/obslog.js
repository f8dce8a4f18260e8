// Renders an observation log (the Observer's format: `Date:` headers, then bullet lines with a priority
// marker and a clock time) as structured, readable HTML: one group per date, each line with its time and
// a priority badge that says its level in words too (colour alone is not enough).

import { h } from "./dom.js";

const DATE_RE = /^Date:[ \t]*(\S.*?)[ \t]*$/;
const LINE_RE = /^([ \t]*)([*-])[ \t]+(?:(🔴|🟡|🟢|✅|->)[ \t]*)?(?:\((\d{1,2}:\d{2}(?:[ \t]*[AaPp]\.?[ \t]*[Mm]\.?)?)\)[ \t]*)?(.*)$/u;
const GROUP_RE = /^<\/?observation-group(?:\s+id="([^"]*)")?(?:\s+range="([^"]*)")?\s*>$/;
const PRIORITY = { "🔴": "high", "🟡": "medium", "🟢": "low", "✅": "done", "->": "detail" };

/** Parse the log into date groups: `[{date, items: [{depth, priority, time, text}]}]`. */
export function parseLog(text) {
  const groups = [];
  let current = null;
  for (const raw of String(text || "").split("\n")) {
    if (!raw.trim()) continue;
    const group = GROUP_RE.exec(raw.trim());
    if (group) {
      // retrieval mode wraps each observation run in a group tag: show its message range, not the tag
      if (group[2]) {
        if (!current) {
          current = { date: null, items: [] };
          groups.push(current);
        }
        current.items.push({ depth: 0, priority: null, time: null, text: `messages ${group[2]}`, group: true });
      }
      continue;
    }
    const date = DATE_RE.exec(raw);
    if (date) {
      current = { date: date[1], items: [] };
      groups.push(current);
      continue;
    }
    if (!current) {
      current = { date: null, items: [] };
      groups.push(current);
    }
    const line = LINE_RE.exec(raw);
    if (line) {
      const depth = Math.min(4, Math.floor(line[1].replace(/\t/g, "  ").length / 2));
      current.items.push({ depth, priority: PRIORITY[line[3]] || null, time: line[4] || null, text: line[5] });
    } else {
      current.items.push({ depth: 0, priority: null, time: null, text: raw.trim(), plain: true });
    }
  }
  return groups;
}

/** One line of a log as inline parts (priority badge, time, text): for the diff of two generations. */
export function renderLineParts(raw) {
  const line = LINE_RE.exec(raw);
  if (!line) return [h("span", { class: "obs-text", text: raw })];
  const priority = PRIORITY[line[3]] || null;
  return [
    line[1] ? h("span", { class: "indent", text: line[1] }) : null,
    priority ? h("span", { class: `prio prio-${priority}`, title: `priority: ${priority}`, text: priority }) : null,
    line[4] ? h("span", { class: "obs-time", text: line[4] }) : null,
    h("span", { class: "obs-text", text: line[5] }),
  ];
}

/** The log as a list of dated sections. */
export function renderLog(text) {
  const groups = parseLog(text);
  if (!groups.length) return h("p", { class: "empty", text: "No observations yet." });
  return h(
    "div",
    { class: "obslog" },
    groups.map((group) =>
      h(
        "div",
        { class: "obs-day" },
        group.date ? h("h3", { class: "obs-date", text: group.date }) : null,
        h(
          "ul",
          { class: "obs-lines" },
          group.items.map((item) =>
            h(
              "li",
              { class: `obs-line depth-${item.depth}${item.plain ? " plain" : ""}${item.group ? " group" : ""}` },
              item.priority
                ? h("span", { class: `prio prio-${item.priority}`, title: `priority: ${item.priority}`, text: item.priority })
                : null,
              item.time ? h("span", { class: "obs-time", text: item.time }) : null,
              h("span", { class: "obs-text", text: item.text }),
            ),
          ),
        ),
      ),
    ),
  );
}
