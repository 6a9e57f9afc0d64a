// The retrieval explorer: a gallery item (or a pasted vector) and its nearest neighbours under
// the served model beside those under the starting metric (Euclidean distance).
"use strict";

let pageSeed = Math.floor(Math.random() * 1e9);

function card(item, {score = null, queryLabel = undefined, pick = false} = {}) {
  const div = document.createElement("div");
  div.className = "item";
  if (pick) div.classList.add("pick");
  if (queryLabel !== undefined && queryLabel !== null && item.label !== null) {
    div.classList.add(item.label === queryLabel ? "same" : "other");
  }
  if (item.image) {
    const img = document.createElement("img");
    img.src = item.image; img.alt = `item ${item.id}`; img.loading = "lazy";
    div.append(img);
  }
  const id = document.createElement("div");
  id.textContent = item.id === null ? "pasted vector" : `id ${item.id}`;
  div.append(id);
  const label = document.createElement("div");
  label.textContent = `label ${item.label === null || item.label === undefined ? "–" : item.label}`;
  div.append(label);
  if (score !== null) {
    const s = document.createElement("div");
    s.className = "summary"; s.textContent = `score ${oahu.fmt(score)}`;
    div.append(s);
  }
  if (item.summary) {
    const s = document.createElement("div");
    s.className = "summary"; s.textContent = item.summary;
    div.append(s);
  }
  if (pick) div.addEventListener("click", () => { byId(item.id); });
  return div;
}

async function browse() {
  try {
    const page = await oahu.api(`/v1/console/gallery?n=24&seed=${pageSeed++}`);
    document.getElementById("gallery").replaceChildren(
      ...page.items.map(item => card(item, {pick: true})));
    document.getElementById("gallery-note").textContent =
      `24 of ${page.gallery_items.toLocaleString()} gallery items; click one to see its neighbours.`;
    oahu.show("error", "");
  } catch (err) { oahu.show("error", err.message); }
}

async function neighbours(body) {
  body.k = Number(document.getElementById("k").value);
  try {
    const out = await oahu.api("/v1/console/neighbours", {method: "POST", body});
    const label = out.query.label;
    document.getElementById("query").replaceChildren(card(out.query));
    document.getElementById("query").firstChild.classList.add("query");
    document.getElementById("model-title").textContent =
      `Served model · snapshot #${out.snapshot.snapshot} (${out.snapshot.updates.toLocaleString()} updates)`;
    document.getElementById("model").replaceChildren(
      ...out.model.map(n => card(n, {score: n.score, queryLabel: label})));
    document.getElementById("euclidean").replaceChildren(
      ...out.euclidean.map(n => card(n, {score: n.score, queryLabel: label})));
    document.getElementById("results").hidden = false;
    oahu.show("error", "");
  } catch (err) {
    document.getElementById("results").hidden = true;
    oahu.show("error", err.message);
  }
}

function byId(id) {
  id = String(id).trim();
  if (!id) { oahu.show("error", "type a gallery item id, or pick one from a random page"); return; }
  document.getElementById("item-id").value = id;
  history.replaceState(null, "", `?id=${encodeURIComponent(id)}`);
  neighbours({id});
}

function byVector() {
  const text = document.getElementById("vector").value.trim();
  if (!text) { oahu.show("error", "paste a feature vector first"); return; }
  const parts = text.replace(/^\[|\]$/g, "").split(/[\s,;]+/).filter(Boolean);
  const x = parts.map(Number);
  const bad = parts.findIndex((p, i) => !Number.isFinite(x[i]));
  if (bad >= 0) {
    oahu.show("error", `value ${bad + 1} of the vector, ${JSON.stringify(parts[bad])}, is not a number`);
    return;
  }
  neighbours({x});
}

document.getElementById("show").addEventListener("click", () => byId(document.getElementById("item-id").value));
document.getElementById("item-id").addEventListener("keydown", e => { if (e.key === "Enter") byId(e.target.value); });
document.getElementById("browse").addEventListener("click", browse);
document.getElementById("search").addEventListener("click", byVector);
oahu.header();
const start = new URLSearchParams(location.search).get("id");
if (start) byId(start); else browse();
