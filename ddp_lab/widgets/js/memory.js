// memory.js: the memory calculator of Chapter 15 and Lab 6 (ddp_lab/widgets/memory.py).
//
// Bytes of model states per rank under DDP and ZeRO-1/2/3, as numbers and as
// stacked bars. The bytes per parameter (p, g, K) of every precision and
// optimizer, and which states each stage shards, come from ddp_lab.memory
// through PY; the arithmetic below is memory_per_rank's, and
// tests/test_widgets_js.py compares it with Python's on a grid.

/** memory_per_rank(num_parameters, world_size, stage, precision, optimizer), in bytes. */
function memoryPerRank(numParameters, worldSize, stage, precision, optimizer) {
  const [p, g, k] = PY.bytes_per_parameter[precision][optimizer];
  const [shardParameters, shardGradients, shardOptimizer] = PY.sharded[stage];
  const share = (bytesEach, sharded) => (sharded ? (bytesEach * numParameters) / worldSize : bytesEach * numParameters);
  const row = {
    stage,
    parameters: share(p, shardParameters),
    gradients: share(g, shardGradients),
    optimizer: share(k, shardOptimizer),
  };
  row.total = row.parameters + row.gradients + row.optimizer;
  return row;
}

/** ddp_lab.draw.memory._gb: "31.4 GB", "1,234 GB". */
function gb(nBytes) {
  const value = nBytes / 1e9;
  return value < 100 ? `${formatG(value, 3)} GB` : `${formatFixed(value, 0)} GB`;
}

// ------------------------------------------------------------- the picture

const STATES = ["parameters", "gradients", "optimizer"];

function drawBars(rows, capacityGb) {
  const width = 640, rowHeight = 34, top = 26, left = 62, right = 90, bottom = 38;
  const height = top + rows.length * rowHeight + bottom;
  const largest = Math.max(...rows.map((r) => r.total)) / 1e9;
  const x = scale("linear", [0, Math.max(largest, capacityGb) * 1.08], [left, width - right]);
  const picture = svg("svg", {width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
                              class: "ddp-memory-bars",
                              "aria-label": "memory per rank for the model states, by stage"});
  xGrid(picture, x, x.ticks, (tick) => formatG(tick, 6),
        {top: top - 6, bottom: height - bottom, stroke: "#e6e6e6", gap: 14});
  picture.append(svg("text", {x: (left + width - right) / 2, y: height - 6, "text-anchor": "middle",
                              "font-size": 12, fill: "#333"}, "memory per rank for the model states (GB)"));
  rows.forEach((row, i) => {
    const y = top + i * rowHeight;
    const bar = svg("g", {class: "ddp-bar", "data-stage": row.stage, "data-total": row.total});
    bar.append(svg("text", {x: left - 8, y: y + rowHeight * 0.42, "text-anchor": "end",
                            "dominant-baseline": "central", "font-size": 12.5, fill: "#222"}, row.stage));
    let start = 0;
    for (const state of STATES) {
      const w = x(start + row[state] / 1e9) - x(start);
      bar.append(svg("rect", {x: x(start), y: y + 4, width: Math.max(w, 0), height: rowHeight * 0.62,
                              fill: PY.state_colours[state], stroke: "#fff", "stroke-width": 0.8,
                              "data-state": state}));
      start += row[state] / 1e9;
    }
    bar.append(svg("text", {x: x(start) + 6, y: y + rowHeight * 0.42, "dominant-baseline": "central",
                            "font-size": 12, fill: "#222", class: "ddp-total"}, gb(row.total)));
    picture.append(bar);
  });
  const cap = x(capacityGb);
  picture.append(svg("line", {x1: cap, x2: cap, y1: top - 10, y2: height - bottom, stroke: PY.capacity_colour,
                              "stroke-dasharray": "5 3", "stroke-width": 1.5}),
                 svg("text", {x: cap + 4, y: top - 12, "font-size": 11.5, fill: PY.capacity_colour},
                     `${formatG(capacityGb, 6)} GB GPU`));
  return picture;
}

function numbersTable(rows, capacityGb) {
  const header = ["stage", "parameters", "gradients", "optimizer state", "total per rank", `in ${formatG(capacityGb, 6)} GB`];
  return html("table", {class: "ddp-table ddp-memory-table"},
    html("thead", {}, html("tr", {}, header.map((h, i) => html("th", {class: i === 0 ? "ddp-left" : null}, h)))),
    html("tbody", {}, rows.map((row) => {
      const fits = row.total / 1e9 <= capacityGb;
      return html("tr", {"data-stage": row.stage},
        html("td", {class: "ddp-left"}, row.stage),
        STATES.map((state) => html("td", {}, gb(row[state]))),
        html("td", {}, html("b", {}, gb(row.total))),
        html("td", {class: fits ? "ddp-good" : "ddp-bad"}, fits ? "fits" : "does not fit"));
    })));
}

// ------------------------------------------------------------- the control

const NAMES = ["num_parameters", "world_size", "precision", "optimizer", "stage", "capacity_gb"];

function render({model, el}) {
  const root = html("div", {class: "ddp-control ddp-memory-calculator"});
  const out = html("div", {class: "ddp-result"});
  const set = (name) => (value) => update(model, {[name]: value});
  const params = slider({name: "num_parameters", label: "parameters Ψ", values: logValues(8, 11, 40),
                         value: model.get("num_parameters"), format: describeParameters,
                         onChange: set("num_parameters")});
  const world = slider({name: "world_size", label: "world size N", values: PY.world_sizes,
                        value: model.get("world_size"), onChange: set("world_size")});
  const precision = buttons({name: "precision", label: "precision", value: model.get("precision"),
                             options: PY.precisions.map((p) => [p, p]), onChange: set("precision")});
  const optimizer = buttons({name: "optimizer", label: "optimizer", value: model.get("optimizer"),
                             options: PY.optimizers.map((o) => [o, PY.optimizer_names[o]]),
                             onChange: set("optimizer")});
  const stage = buttons({name: "stage", label: "stage", value: model.get("stage"),
                         options: [["all", "all stages"], ...PY.stages.map((s) => [s, s])],
                         onChange: set("stage")});
  const capacity = html("input", {type: "number", name: "capacity_gb", min: PY.capacity_range[0],
                                  max: PY.capacity_range[1], step: "any", value: model.get("capacity_gb"),
                                  "aria-label": "GPU memory (GB)", style: "width: 5.5em"});
  capacity.addEventListener("change", () => {
    const value = Number(capacity.value);
    if (value >= PY.capacity_range[0] && value <= PY.capacity_range[1]) set("capacity_gb")(value);
    else capacity.value = model.get("capacity_gb");  // out of range: back to what is shown
  });
  root.append(html("div", {class: "ddp-controls"}, params.element, world.element,
                   html("label", {class: "ddp-choice"}, html("span", {class: "ddp-label"}, "GPU memory (GB)"), capacity)),
              html("div", {class: "ddp-controls"}, precision.element, optimizer.element),
              html("div", {class: "ddp-controls"}, stage.element), out);
  el.append(root);

  function redraw() {
    const [psi, n, prec, opt, picked, cap] = NAMES.map((name) => model.get(name));
    params.set(psi); world.set(n); precision.set(prec); optimizer.set(opt); stage.set(picked);
    if (Number(capacity.value) !== cap) capacity.value = cap;
    const stages = picked === "all" ? PY.stages : [picked];
    const rows = stages.map((s) => memoryPerRank(psi, n, s, prec, opt));
    const [p, g, k] = PY.bytes_per_parameter[prec][opt];
    root.dataset.result = JSON.stringify({rows, bytes_per_parameter: [p, g, k]});
    out.replaceChildren(
      html("div", {class: "ddp-title"},
           `Ψ = ${describeParameters(psi)}, N = ${n}: p + g + K = ${p} + ${g} + ${k} bytes per parameter`),
      pictureBox(drawBars(rows, cap)),
      html("div", {class: "ddp-legend"},
           STATES.map((s) => swatch(PY.state_colours[s], PY.state_labels[s])),
           swatch(PY.capacity_colour, "GPU memory", {dashed: true})),
      numbersTable(rows, cap));
  }

  for (const name of NAMES) model.on(`change:${name}`, redraw);
  redraw();
  return () => { for (const name of NAMES) model.off(`change:${name}`, redraw); };
}

export {memoryPerRank, gb, describeParameters, formatG, formatFixed};
export default {render};
