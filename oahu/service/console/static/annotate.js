// The annotation page: the active learner's questions one at a time; each answer goes back to
// the learner as a triplet constraint through the service's durable input path. An answer that
// cannot be delivered (the service is down) is retried with the same question until it is
// (the service learns a question's answer once, however often it is sent).
"use strict";

const BATCH = 5;
const RETRY_MS = 1500;
const queue = [];
let current = null;
let imageShape = null;
let busy = false;
const counts = {accepted: 0, skipped: 0};

function picture(el, item) {
  el.replaceChildren();
  if (imageShape) {
    const img = document.createElement("img");
    img.src = `/v1/console/items/${encodeURIComponent(item.id)}.png?size=168`;
    img.alt = `item ${item.id}`;
    el.append(img);
  }
  const id = document.createElement("div");
  id.textContent = `id ${item.id}`;
  el.append(id);
}

function setButtons(enabled) {
  for (const id of ["answer-first", "answer-second", "answer-skip"]) {
    document.getElementById(id).disabled = !enabled;
  }
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

async function nextQuestion() {
  setButtons(false);
  while (!queue.length) {
    try {
      const out = await oahu.api("/v1/console/questions", {method: "POST", body: {n: BATCH}, auth: true});
      queue.push(...out.questions);
      // the service answers again: an error said while it did not (401, unreachable) is over
      if (document.getElementById("message").className === "error") oahu.show("message", "", true);
      if (!out.questions.length) {
        oahu.show("message", "no question to ask now; asking again shortly");
        await sleep(RETRY_MS);
      }
    } catch (err) {
      oahu.show("message", err.message);
      await sleep(RETRY_MS);
    }
  }
  current = queue.shift();
  const question = document.getElementById("question");
  question.dataset.token = current.token;
  picture(document.getElementById("anchor"), current.anchor);
  picture(document.getElementById("first"), current.first);
  picture(document.getElementById("second"), current.second);
  setButtons(true);
}

async function answer(choice) {
  if (busy || !current) return;
  const annotator = document.getElementById("annotator").value.trim();
  if (!annotator) {
    oahu.show("message", "type your name first: answers are counted per annotator");
    document.getElementById("annotator").focus();
    return;
  }
  busy = true;
  setButtons(false);
  const question = current;
  try {
    for (;;) {
      try {
        const out = await oahu.api("/v1/console/answers", {
          method: "POST", auth: true, body: {token: question.token, choice, annotator}});
        if (out.status === "skipped") counts.skipped += 1;
        else counts.accepted += 1;  // "duplicate": an earlier try of this answer got through
        document.getElementById("accepted").textContent = counts.accepted;
        document.getElementById("skipped").textContent = counts.skipped;
        oahu.show("message", out.status === "skipped" ? "skipped" : "thank you: learned from your answer", true);
        break;
      } catch (err) {
        if (err.unreachable || err.status >= 500) {  // not delivered: the same answer again
          oahu.show("message", err.message);
          await sleep(RETRY_MS);
          continue;
        }
        if (err.status === 401) document.getElementById("token").focus();
        oahu.show("message", err.message);  // stale, removed item, never asked: next question
        if (err.status === 401) return;
        break;
      }
    }
    current = null;
    await nextQuestion();
  } finally {
    busy = false;
    if (current) setButtons(true);
  }
}

async function service() {
  try {
    const model = await oahu.api("/v1/model");
    document.getElementById("consumed").textContent = model.constraints_consumed.toLocaleString();
    document.getElementById("accuracy").textContent = oahu.fmt(model.prequential_accuracy);
  } catch (_) { /* the message line says why answers wait */ }
  setTimeout(service, 2000);
}

for (const name of ["annotator", "token"]) {
  const input = document.getElementById(name);
  input.value = oahu.setting(name);
  input.addEventListener("change", () => oahu.remember(name, input.value.trim()));
}
document.getElementById("answer-first").addEventListener("click", () => answer("first"));
document.getElementById("answer-second").addEventListener("click", () => answer("second"));
document.getElementById("answer-skip").addEventListener("click", () => answer("skip"));
document.addEventListener("keydown", e => {
  if (e.target.tagName === "INPUT" || e.target.tagName === "TEXTAREA") return;
  const choice = {"1": "first", "2": "second", "0": "skip", "s": "skip"}[e.key];
  if (choice) { e.preventDefault(); answer(choice); }
});
document.getElementById("first").addEventListener("click", () => answer("first"));
document.getElementById("second").addEventListener("click", () => answer("second"));

(async () => {
  oahu.header();
  service();
  for (;;) {
    try {
      imageShape = (await oahu.api("/v1/console/gallery?n=1&seed=0")).image_shape;
      break;
    } catch (err) { oahu.show("message", err.message); await sleep(RETRY_MS); }
  }
  await nextQuestion();
})();
