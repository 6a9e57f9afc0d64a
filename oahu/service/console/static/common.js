// Shared by the console's pages: calling the API, showing its errors, settings kept in the
// browser (the annotator's name and the service's bearer token, typed once).
"use strict";

const oahu = {
  // The answer's JSON; an Error whose message is the API's own explanation otherwise.
  async api(path, {method = "GET", body = undefined, auth = false} = {}) {
    const headers = {};
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const token = oahu.setting("token");
    if (auth && token) headers["Authorization"] = "Bearer " + token;
    let response;
    try {
      response = await fetch(path, {method, headers, cache: "no-store",
                                    body: body === undefined ? undefined : JSON.stringify(body)});
    } catch (err) {
      const error = new Error("the service does not answer (" + err.message + "); retrying");
      error.unreachable = true;
      throw error;
    }
    const text = await response.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (_) { data = null; }
    if (!response.ok) {
      const error = new Error(oahu.explain(response.status, data, text));
      error.status = response.status;
      throw error;
    }
    return data;
  },

  // FastAPI's error bodies as one sentence: {"detail": "..."} or {"detail": [{"loc", "msg"}]}.
  explain(status, data, text) {
    const detail = data && data.detail;
    let why;
    if (typeof detail === "string") why = detail;
    else if (Array.isArray(detail)) {
      why = detail.map(d => {
        const where = (d.loc || []).filter(p => p !== "body").join(".");
        return (where ? where + ": " : "") + d.msg;
      }).join("; ");
    } else why = text ? text.slice(0, 200) : "no explanation";
    return `${status}: ${why}`;
  },

  setting(name) { return window.localStorage.getItem("oahu." + name) || ""; },
  remember(name, value) { window.localStorage.setItem("oahu." + name, value); },

  show(id, message, ok = false) {
    const el = document.getElementById(id);
    el.textContent = message || "";
    el.className = ok ? "ok" : "error";
  },

  // The service's state in the header of every page.
  async header() {
    const el = document.querySelector("header .status");
    try {
      const model = await oahu.api("/v1/model");
      const snap = model.snapshot;
      el.textContent = `${model.learner} · ${model.constraints_seen.toLocaleString()} seen · ` +
        (snap ? `snapshot ${snap.snapshot} (${snap.updates.toLocaleString()} updates)`
              : "no snapshot yet");
    } catch (err) {
      el.textContent = err.message;
    }
  },

  fmt(value, digits = 4) {
    if (value === null || value === undefined) return "–";
    return typeof value === "number" ? value.toFixed(digits) : String(value);
  },

  // Plain text as a table body: [[cell, ...], ...] (or one muted row saying it is empty).
  table(id, head, rows, empty) {
    const table = document.getElementById(id);
    table.replaceChildren();
    const tr = table.insertRow();
    for (const h of head) { const th = document.createElement("th"); th.textContent = h; tr.append(th); }
    if (!rows.length) {
      const cell = table.insertRow().insertCell();
      cell.colSpan = head.length; cell.className = "muted"; cell.textContent = empty;
    }
    for (const row of rows) {
      const r = table.insertRow();
      for (const value of row) r.insertCell().textContent = value;
    }
  },
};
