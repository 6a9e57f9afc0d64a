// The live view: polls /v1/console/live once a second and redraws the curves and figures.
"use strict";

const POLL_MS = 1000;
const COLOURS = ["#1d2330", "#2b6cb0", "#dd6b20", "#2f855a", "#805ad5", "#d53f8c", "#319795"];
const charts = {};  // name -> uPlot, kept on window for tests and the curious
window.oahuCharts = charts;
let drift = [];

// Vertical red lines at the constraints where drift was detected.
const driftMarks = {
  hooks: {
    draw: [u => {
      const ctx = u.ctx, top = u.bbox.top, bottom = top + u.bbox.height;
      ctx.save();
      ctx.strokeStyle = "#c53030"; ctx.lineWidth = 1.5 * devicePixelRatio;
      ctx.setLineDash([6, 4]);
      for (const event of drift) {
        const x = u.valToPos(event.constraint, "x", true);
        if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
        ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, bottom); ctx.stroke();
      }
      ctx.restore();
    }],
  },
};

function width(el) { return Math.max(320, el.clientWidth); }

// colours: index 0 for a combined or single series, d + 1 for depth d, on every chart
function chart(name, labels, colours, yLabel, data, range) {
  const el = document.getElementById(name + "-chart");
  const series = [{label: "constraints seen"}].concat(labels.map((label, i) => ({
    label, stroke: COLOURS[colours[i] % COLOURS.length], width: colours[i] === 0 ? 2.5 : 1.5,
    spanGaps: true,
  })));
  const opts = {
    width: width(el), height: 260, series, plugins: name === "accuracy" ? [driftMarks] : [],
    scales: {x: {time: false}, y: range ? {range} : {}},
    axes: [{label: "constraints seen"}, {label: yLabel}],
    legend: {live: true},
  };
  if (charts[name] && charts[name].series.length === series.length) {
    charts[name].setData(data);
    return;
  }
  if (charts[name]) charts[name].destroy();
  el.replaceChildren();
  charts[name] = new uPlot(opts, data, el);
}

function draw(curve, now) {
  const depths = curve.alpha.length;
  const depthLabels = Array.from({length: depths}, (_, d) => `depth ${d + 1}`);
  const depthColours = Array.from({length: depths}, (_, d) => d + 1);
  drift = now.drift_events;
  chart("accuracy", ["combined"].concat(depthLabels), [0].concat(depthColours), "accuracy",
        [curve.seen, curve.accuracy].concat(curve.depth_accuracy), null);
  chart("alpha", depthLabels, depthColours, "α", [curve.seen].concat(curve.alpha), [0, 1]);
  chart("rate", ["constraints / s"], [0], "constraints / s", [curve.seen, curve.rate], null);
}

function figures(now) {
  document.getElementById("seen").textContent = now.constraints_seen.toLocaleString();
  document.getElementById("accuracy").textContent = oahu.fmt(now.prequential_accuracy);
  document.getElementById("rate").textContent =
    now.rate === null ? "–" : Math.round(now.rate).toLocaleString();
  document.getElementById("checkpoint").textContent =
    now.checkpoint_age_s === null ? "none yet" : `${Math.round(now.checkpoint_age_s)} s`;
  const snap = now.snapshot;
  document.getElementById("snapshot").textContent = snap
    ? `#${snap.snapshot} · ${snap.updates.toLocaleString()} updates · ${Math.round(snap.age_s)} s old`
    : "none yet";
  const ready = document.getElementById("ready");
  ready.textContent = now.ready ? "yes" : "no: " + Object.values(now.not_ready).join("; ");
  ready.className = "value " + (now.ready ? "ok" : "error");
  oahu.table("lag", ["partition", "records behind"],
             Object.entries(now.lag).map(([p, v]) => [p, v.toLocaleString()]),
             "no partition assigned");
  oahu.table("dead-letters", ["reason", "records"],
             Object.entries(now.dead_letters).map(([r, v]) => [r, v.toLocaleString()]), "none");
  oahu.table("drift", ["at constraint", "signal"],
             now.drift_events.map(e => [e.constraint.toLocaleString(), e.signal]), "none detected");
  document.querySelector("header .status").textContent =
    `${now.learner} learning from ${now.source}`;
}

async function poll() {
  try {
    const live = await oahu.api("/v1/console/live");
    figures(live.now);
    draw(live.curve, live.now);
    oahu.show("error", "");
  } catch (err) {
    oahu.show("error", err.message);
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

window.addEventListener("resize", () => {
  for (const [name, u] of Object.entries(charts)) {
    u.setSize({width: width(document.getElementById(name + "-chart")), height: 260});
  }
});
poll();
