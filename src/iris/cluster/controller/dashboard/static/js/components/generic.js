// Renders any JSON value readably: objects as key/value lists, lists of objects as tables.
// Used by views whose exact shape belongs to another part of the system (cluster, autoscaler).

import { h, kvList } from "../dom.js";
import { fmtTime } from "../format.js";

const TIME_KEY = /(^ts$|_at$|_until$|^time$|timestamp)/i;

export function humanKey(key) {
  return String(key).replace(/_/g, " ");
}

function isScalar(v) {
  return v === null || v === undefined || ["string", "number", "boolean"].includes(typeof v);
}

export function scalar(v, key = "") {
  if (v === null || v === undefined || v === "") return h("span", { class: "dim" }, "—");
  if (typeof v === "boolean") return h("span", { class: v ? "yes" : "no" }, v ? "yes" : "no");
  if (typeof v === "number") {
    if (TIME_KEY.test(key) && v > 1e9 && v < 1e11) return h("span", { title: String(v) }, fmtTime(v));
    return Number.isInteger(v) ? v.toLocaleString("en-US") : String(Number(v.toFixed(3)));
  }
  return String(v);
}

/** A table of objects with the union of their keys (in first-seen order). */
export function objectTable(rows, { maxColumns = 10 } = {}) {
  const keys = [];
  for (const r of rows) for (const k of Object.keys(r || {})) if (!keys.includes(k)) keys.push(k);
  const cols = keys.slice(0, maxColumns);
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { class: "grid compact" },
      h("thead", {}, h("tr", {}, cols.map((k) => h("th", {}, humanKey(k))))),
      h("tbody", {}, rows.map((r) => h("tr", {}, cols.map((k) => h("td", {}, renderValue((r || {})[k], k, 1)))))),
    ),
  );
}

/** Any JSON value as DOM. */
export function renderValue(v, key = "", depth = 0) {
  if (isScalar(v)) return scalar(v, key);
  if (Array.isArray(v)) {
    if (v.length === 0) return h("span", { class: "dim" }, "none");
    if (v.every(isScalar)) return h("span", { class: "attrs" }, v.map((x) => h("span", { class: "attr" }, scalar(x))));
    if (v.every((x) => x && typeof x === "object" && !Array.isArray(x)) && depth < 2) return objectTable(v);
    return h("code", { class: "json" }, JSON.stringify(v));
  }
  const entries = Object.entries(v);
  if (entries.length === 0) return h("span", { class: "dim" }, "none");
  if (depth >= 1 && entries.every(([, x]) => isScalar(x))) {
    return h("span", { class: "attrs" }, entries.map(([k, x]) => h("span", { class: "attr" }, `${humanKey(k)}: `, scalar(x, k))));
  }
  if (depth >= 3) return h("code", { class: "json" }, JSON.stringify(v));
  return kvList(entries.map(([k, x]) => [humanKey(k), renderValue(x, k, depth + 1)]), "kv nested");
}
