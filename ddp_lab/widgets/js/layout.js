// layout.js: Chapter 2's layout explorer (ddp_lab/widgets/layout.py).
//
// Nodes, GPUs per node and GPUs per process in; the ranks of every process
// out, drawn as in ddp_lab.draw.layout (grey node boxes, white GPU squares,
// one coloured box per process labelled with R_g and R_l, the colour being
// the local rank) and listed in a table. The arithmetic is Topology's
// (ddp_lab/topology.py), written again below; tests/test_widgets_js.py
// checks it against Topology for every setting the control offers.

// ------------------------------------------------------- Topology, in JavaScript

function divisors(n) {
  const found = [];
  for (let k = 1; k <= n; k++) if (n % k === 0) found.push(k);
  return found;
}

function plural(count, noun) {
  return count === 1 ? `${count} ${noun}` : `${count} ${noun}s`;
}

function requireCount(name, value) {
  if (!Number.isInteger(value)) {
    return `${name} must be a whole number (an int such as 1, 2, 4), got ${value} of type ${typeof value}`;
  }
  if (value < 1) return `${name} must be at least 1, got ${value}`;
  return null;
}

/** Topology(nodes, gpus_per_node, gpus_per_process): {error} with the text
 *  of Topology's ValueError, or the layout: every process and its ranks. */
function topology(nodes, gpusPerNode, gpusPerProcess) {
  for (const [name, value] of [["nodes", nodes], ["gpus_per_node", gpusPerNode],
                               ["gpus_per_process", gpusPerProcess]]) {
    const error = requireCount(name, value);
    if (error) return {error};
  }
  if (gpusPerNode % gpusPerProcess !== 0) {
    const allowed = divisors(gpusPerNode).join(", ");
    return {
      error: `gpus_per_process=${gpusPerProcess} does not divide gpus_per_node=${gpusPerNode}: ` +
        "a process cannot span GPUs of two nodes, so each node must split evenly into processes. " +
        `Allowed values for ${gpusPerNode} GPUs per node: ${allowed}`,
    };
  }
  const processesPerNode = gpusPerNode / gpusPerProcess;
  const worldSize = nodes * processesPerNode;
  const processes = [];
  for (let rank = 0; rank < worldSize; rank++) {
    const localRank = rank % processesPerNode;
    const first = localRank * gpusPerProcess;
    processes.push({
      global_rank: rank,
      local_rank: localRank,
      node: Math.floor(rank / processesPerNode),
      gpus: Array.from({length: gpusPerProcess}, (_, i) => first + i),
    });
  }
  const title = `${plural(nodes, "node")} × ${plural(gpusPerNode, "GPU")}, ` +
    `${plural(gpusPerProcess, "GPU")} per process: W = ${worldSize}`;
  return {nodes, gpus_per_node: gpusPerNode, gpus_per_process: gpusPerProcess,
          processes_per_node: processesPerNode, world_size: worldSize, processes, title};
}

// ------------------------------------------------------------- the picture

// Geometry in "slots" (the width of one GPU in its node), as in ddp_lab/draw/layout.py.
const CHIP = 0.62, INSET = 0.06, PAD = 0.2, GAP = 0.4, MARGIN = 0.15;
const TITLE_LINE = 0.32, RANK_LINE = 0.3, MAX_ROW_WIDTH = 16.5, MAX_COLUMNS = 4;
const NODE_HEIGHT = PAD / 2 + TITLE_LINE + (0.1 + CHIP + 0.1 + 2 * RANK_LINE + 0.08) + PAD;

/** Rows and columns of nodes: draw.layout._grid (full rows preferred). */
function grid(count, cellWidth) {
  const fit = Math.max(1, Math.min(MAX_COLUMNS, count,
                                   Math.floor((MAX_ROW_WIDTH + GAP) / (cellWidth + GAP))));
  let columns = 1;
  for (let c = 1; c <= fit; c++) if (count % c === 0) columns = c;
  if (columns === 1 && count > 4 && fit > 1) columns = Math.ceil(count / Math.ceil(count / fit));
  return [Math.ceil(count / columns), columns];
}

function colour(localRank) {
  return PY.palette[localRank % PY.palette.length];
}

function drawLayout(layout) {
  const cellWidth = layout.gpus_per_node + 2 * PAD;
  const [rows, columns] = grid(layout.nodes, cellWidth);
  const width = columns * cellWidth + (columns - 1) * GAP + 2 * MARGIN;
  const height = rows * NODE_HEIGHT + (rows - 1) * GAP + 2 * MARGIN;
  const unit = Math.min(62, 780 / width);  // pixels per slot
  const picture = svg("svg", {width: (width * unit).toFixed(0), height: (height * unit).toFixed(0),
                              viewBox: `0 0 ${width} ${height}`, role: "img",
                              "aria-label": layout.title, class: "ddp-layout-picture"});
  for (let node = 0; node < layout.nodes; node++) {
    const row = Math.floor(node / columns), column = node % columns;
    const left = MARGIN + column * (cellWidth + GAP);
    const top = MARGIN + row * (NODE_HEIGHT + GAP);
    picture.append(drawNode(layout, node, left, top, cellWidth));
  }
  return picture;
}

function drawNode(layout, node, left, top, width) {
  const group = svg("g", {class: "ddp-node", "data-node": node});
  group.append(svg("rect", {x: left, y: top, width, height: NODE_HEIGHT, rx: 0.12,
                            fill: PY.node_colours.fill, stroke: "#4d4d4d", "stroke-width": 0.02}));
  group.append(svg("text", {x: left + PAD, y: top + PAD / 2 + TITLE_LINE / 2, "font-size": 0.22,
                            "font-weight": "bold", fill: PY.node_colours.title, "dominant-baseline": "central"},
                   `node ${node}`));
  const processTop = top + PAD / 2 + TITLE_LINE;
  const processBottom = top + NODE_HEIGHT - PAD;
  for (const process of layout.processes.filter((p) => p.node === node)) {
    group.append(drawProcess(process, left + PAD, processTop, processBottom));
  }
  for (let gpu = 0; gpu < layout.gpus_per_node; gpu++) {
    group.append(drawChip(gpu, left + PAD + gpu + 0.5, processTop + 0.1));
  }
  return group;
}

function drawProcess(process, slotsLeft, top, bottom) {
  const c = colour(process.local_rank);
  const left = slotsLeft + Math.min(...process.gpus) + INSET;
  const right = slotsLeft + Math.max(...process.gpus) + 1 - INSET;
  const centre = (left + right) / 2;
  const labelTop = top + 0.1 + CHIP + 0.1;
  const size = Math.min(0.19, (0.9 * (right - left)) / (2.4 + 0.65 * String(process.global_rank).length));
  return svg("g", {class: "ddp-process", "data-global-rank": process.global_rank,
                   "data-local-rank": process.local_rank, "data-gpus": process.gpus.join(",")},
    svg("rect", {x: left, y: top, width: right - left, height: bottom - top, rx: 0.1,
                 fill: tint(c), stroke: darker(c), "stroke-width": 0.025}),
    subscripted(`R_g = ${process.global_rank}`, {x: centre, y: labelTop + RANK_LINE * 0.5,
      "text-anchor": "middle", "dominant-baseline": "central", "font-size": size, fill: "#000"}),
    subscripted(`R_l = ${process.local_rank}`, {x: centre, y: labelTop + RANK_LINE * 1.5,
      "text-anchor": "middle", "dominant-baseline": "central", "font-size": size, fill: "#000"}));
}

function drawChip(gpu, centre, top) {
  return svg("g", {class: "ddp-gpu"},
    svg("rect", {x: centre - CHIP / 2, y: top, width: CHIP, height: CHIP, rx: 0.05,
                 fill: "#fff", stroke: "#333", "stroke-width": 0.016}),
    svg("text", {x: centre, y: top + CHIP * 0.36, "text-anchor": "middle", "dominant-baseline": "central",
                 "font-size": 0.15, fill: "#333"}, "GPU"),
    svg("text", {x: centre, y: top + CHIP * 0.68, "text-anchor": "middle", "dominant-baseline": "central",
                 "font-size": 0.15, fill: "#333"}, String(gpu)));
}

function legend(layout) {
  const ranks = [...new Set(layout.processes.map((p) => p.local_rank))].sort((a, b) => a - b);
  return html("div", {class: "ddp-legend"}, subscriptedHtml("colour = local rank R_l:"),
    ranks.map((r) => swatch(darker(colour(r)), String(r), {fill: tint(colour(r))})));
}

/** Topology.format_table(), as an HTML table. */
function table(layout) {
  const header = ["node", "GPUs", "global rank R_g (RANK)", "local rank R_l (LOCAL_RANK)"];
  return html("table", {class: "ddp-table ddp-layout-table"},
    html("thead", {}, html("tr", {}, header.map((h, i) => html("th", {class: i === 1 ? "ddp-left" : null},
                                                                 subscriptedHtml(h))))),
    html("tbody", {}, layout.processes.map((p) => html("tr", {},
      html("td", {}, p.node), html("td", {class: "ddp-left"}, p.gpus.join(", ")),
      html("td", {}, p.global_rank), html("td", {}, p.local_rank)))));
}

// ------------------------------------------------------------- the control

function render({model, el}) {
  const root = html("div", {class: "ddp-control ddp-layout-explorer"});
  const out = html("div", {class: "ddp-result"});
  const nodes = slider({name: "nodes", label: "nodes N", min: 1, max: PY.max_nodes,
                        value: model.get("nodes"), onChange: (v) => update(model, {nodes: v})});
  const gpus = slider({name: "gpus_per_node", label: "GPUs per node G", min: 1, max: PY.max_gpus_per_node,
                       value: model.get("gpus_per_node"), onChange: (v) => update(model, {gpus_per_node: v})});
  const perProcess = buttons({name: "gpus_per_process", label: "GPUs per process k",
                              options: kOptions(model.get("gpus_per_node")), value: model.get("gpus_per_process"),
                              onChange: (v) => update(model, {gpus_per_process: v})});
  root.append(html("div", {class: "ddp-controls"}, nodes.element, gpus.element, perProcess.element), out);
  el.append(root);

  function redraw() {
    const [n, g, k] = ["nodes", "gpus_per_node", "gpus_per_process"].map((name) => model.get(name));
    nodes.set(n);
    gpus.set(g);
    // Every k stays on offer: the ones that do not divide G show Topology's refusal.
    perProcess.options(kOptions(g));
    perProcess.set(k);
    const layout = topology(n, g, k);
    root.dataset.result = JSON.stringify(layout);
    if (layout.error) {
      out.replaceChildren(html("div", {class: "ddp-error"},
        html("b", {}, "Not a valid layout. "), `Topology(${n}, ${g}, ${k}) raises ValueError: `,
        html("span", {class: "ddp-message"}, layout.error)));
      return;
    }
    out.replaceChildren(html("div", {class: "ddp-title"}, layout.title), pictureBox(drawLayout(layout)),
                        legend(layout), table(layout));
  }

  for (const name of ["nodes", "gpus_per_node", "gpus_per_process"]) model.on(`change:${name}`, redraw);
  redraw();
  return () => { for (const name of ["nodes", "gpus_per_node", "gpus_per_process"]) model.off(`change:${name}`, redraw); };
}

/** k = 1 to 8; those that do not divide G are offered too, drawn dashed, and refused. */
function kOptions(gpusPerNode) {
  return Array.from({length: PY.max_gpus_per_node}, (_, i) => i + 1).map((k) => [k, String(k),
    gpusPerNode % k === 0 ? {} : {off: true, title: `${k} does not divide G = ${gpusPerNode}`}]);
}

export {topology, divisors, formatG, formatFixed};
export default {render};
