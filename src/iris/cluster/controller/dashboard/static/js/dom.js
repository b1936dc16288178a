// Small DOM helpers. Text always goes in as text nodes (never parsed as HTML).

import { stateClass } from "./format.js";

/** h("a", {href: "#/x", class: "link"}, "text", child, [more]) */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k === "style" && typeof v === "object") Object.assign(el.style, v);
    else if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "value" || k === "checked" || k === "selected") el[k] = v;
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  appendAll(el, children);
  return el;
}

function appendAll(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
}

/** Replace an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  appendAll(el, children);
  return el;
}

export function badge(state, text) {
  return h("span", { class: `badge ${stateClass(state)}` }, text ?? String(state ?? "—").replace(/_/g, " "));
}

export function notice(kind, text) {
  return h("div", { class: `notice ${kind}`, role: kind === "error" ? "alert" : "status" }, text);
}

export function empty(text) {
  return h("div", { class: "empty" }, text);
}

/** A "used of total" bar: fraction in [0, 1], label shown beside it. */
export function meter(fraction, label, title, { neutral = false } = {}) {
  const f = Number.isFinite(fraction) ? Math.max(0, Math.min(1, fraction)) : 0;
  const level = neutral ? "neutral" : f >= 0.9 ? "high" : f >= 0.6 ? "mid" : "low";
  return h(
    "div",
    { class: "meter", title: title || label },
    h("div", { class: "meter-track" }, h("div", { class: `meter-fill ${level}`, style: { width: `${(f * 100).toFixed(1)}%` } })),
    h("span", { class: "meter-label" }, label),
  );
}

/** A key/value definition list from [[key, value], ...] (values may be nodes). */
export function kvList(pairs, cls = "kv") {
  return h(
    "dl",
    { class: cls },
    pairs.filter(Boolean).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v ?? "—")]),
  );
}

/**
 * A table: columns [{key, label, sortKey?, cls?, render(row)}]; sort = {key, desc} and onSort(key)
 * make the sortable headers clickable.
 */
export function table(columns, rows, { sort, onSort, rowAttrs, cls = "grid" } = {}) {
  const head = h(
    "tr",
    {},
    columns.map((c) => {
      if (!c.sortKey || !onSort) return h("th", { class: c.cls }, c.label);
      const active = sort && sort.key === c.sortKey;
      const arrow = active ? (sort.desc ? " ▼" : " ▲") : "";
      return h(
        "th",
        { class: `${c.cls || ""} sortable${active ? " sorted" : ""}`, "aria-sort": active ? (sort.desc ? "descending" : "ascending") : "none" },
        h("button", { type: "button", class: "th-sort", dataset: { sort: c.sortKey }, onclick: () => onSort(c.sortKey) }, c.label + arrow),
      );
    }),
  );
  const body = rows.map((r) => h("tr", rowAttrs ? rowAttrs(r) : {}, columns.map((c) => h("td", { class: c.cls }, c.render(r)))));
  return h("table", { class: cls }, h("thead", {}, head), h("tbody", {}, body));
}

/** A modal confirm dialog; resolves true when the user confirms. */
export function confirmDialog({ title, message, confirmLabel = "Confirm", danger = false }) {
  return new Promise((resolve) => {
    const dlg = h(
      "dialog",
      { class: "confirm", "aria-label": title },
      h("h2", {}, title),
      h("p", {}, message),
      h(
        "form",
        { method: "dialog", class: "actions" },
        h("button", { value: "cancel", class: "btn" }, "Cancel"),
        h("button", { value: "ok", class: `btn ${danger ? "danger" : "primary"}`, "data-confirm": "" }, confirmLabel),
      ),
    );
    dlg.addEventListener("close", () => {
      resolve(dlg.returnValue === "ok");
      dlg.remove();
    });
    document.body.append(dlg);
    dlg.showModal();
  });
}

let toastTimer = null;

/** A short message at the bottom of the screen. */
export function toast(text, kind = "info") {
  let el = document.getElementById("toast");
  if (!el) {
    el = h("div", { id: "toast", role: "status" });
    document.body.append(el);
  }
  el.className = `toast ${kind} show`;
  el.textContent = text;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => el.classList.remove("show"), 4000);
}

/** Copy text to the clipboard (falls back to a hidden textarea outside secure contexts). */
export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch {
      // fall through to the textarea method
    }
  }
  const ta = h("textarea", { style: { position: "fixed", left: "-9999px" } });
  ta.value = text;
  document.body.append(ta);
  ta.select();
  let ok = false;
  try {
    ok = document.execCommand("copy");
  } catch {
    ok = false;
  }
  ta.remove();
  return ok;
}
