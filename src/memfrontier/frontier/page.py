"""The frontier report as one self-contained web page, ``frontier.html``: the cost and latency plots
(inline SVG drawn by a little inline JavaScript, hover for a configuration's numbers), the tables of
``frontier.md`` (sortable by a click on a header) and a per-question view (each configuration's
answer, F1 and cost beside the question and gold answer; a filter box and a toggle for the questions
where configurations score differently).

The page requests nothing: no script, font or image from elsewhere, and its Content-Security-Policy
allows only its own inline script (by hash) and style. Every string from the runs (questions,
answers, labels) reaches the page as JSON in a data block with ``<``, ``>`` and ``&`` escaped, and is
put into the document as text (``textContent``), never as markup; the tables are escaped in Python.

Exported runs (:mod:`memfrontier.frontier.export`) hold no question or gold text: the per-question
view then shows the question ids and what the rows hold.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
from collections.abc import Mapping
from pathlib import Path

from ..core.cost import COST_SCALE
from ..core.jsonio import write_text_atomic
from .tables import category_table, summary_lines, table_cells, table_header, table_note


def _finite(v):
    """``v`` when it is a finite number (or not a number at all); None for NaN and infinities."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _text(v) -> str | None:
    """A question, gold answer or prediction as text (lists and numbers as their JSON); None when absent."""
    if v is None:
        return None
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)


def page_data(report: dict, predictions: Mapping[str, list[dict]]) -> dict:
    """What the page's script draws, JSON-ready: ``reference``, ``configs`` (one per finished
    configuration: ``label``, ``strategy``, ``f1``/``f1_low``/``f1_high``, ``usd_x1e4_amortized``,
    ``usd_x1e4_online``, ``proxy_s``, ``pareto_cost``, ``pareto_latency``, ``anchor``, ``unpriced``)
    and ``questions``: one per question of the report (``question_ids``) that some configuration's
    rows hold, in the order of the first configuration's ``predictions.jsonl``, each ``{"id", "category", "question", "gold", "spread",
    "answers"}`` where ``answers`` holds per configuration (``configs`` order) ``[prediction, f1,
    USD×1e4, proxy s]`` or None when it has no row there, and ``spread`` is the largest minus the
    smallest F1 (0 with fewer than two). ``category``/``question``/``gold`` come from the first
    configuration's row that holds them (a row carried from an export holds no text), None when none
    does. Non-finite numbers become None."""
    ok = [x for x in report["rows"] if x.get("status") == "ok" and x.get("f1") is not None]
    configs = [
        {
            "label": x["label"],
            "strategy": x["strategy"],
            "n": x.get("n"),
            **{
                k: _finite(x.get(k))
                for k in ("f1", "f1_low", "f1_high", "usd_x1e4_amortized", "usd_x1e4_online", "proxy_s")
            },
            "pareto_cost": bool(x.get("pareto_cost")),
            "pareto_latency": bool(x.get("pareto_latency")),
            "anchor": bool(x.get("anchor")),
            "unpriced": bool(x.get("unpriced_calls")),
        }
        for x in ok
    ]
    by_label = {
        c["label"]: {r.get("id"): r for r in predictions.get(c["label"], []) if isinstance(r, dict)} for c in configs
    }
    shared = set(report.get("question_ids", []))
    order = list(
        dict.fromkeys(
            r.get("id")
            for c in configs
            for r in predictions.get(c["label"], [])
            if isinstance(r, dict) and r.get("id") in shared
        )
    )
    questions = []
    for qid in order:
        rows = [by_label[c["label"]].get(qid) for c in configs]
        held = [r for r in rows if r is not None]

        def first(key: str):  # from any row that holds it: a carried row (an export's) holds no text
            return next((r[key] for r in held if r.get(key) is not None), None)

        answers = []
        for r in rows:
            if r is None:
                answers.append(None)
                continue
            usd = _finite(r.get("usd"))
            answers.append(
                [
                    _text(r.get("prediction")),
                    _finite(r.get("f1")),
                    None if not isinstance(usd, (int, float)) else usd * COST_SCALE,
                    _finite(r.get("proxy_s")),
                ]
            )
        f1s = [a[1] for a in answers if a is not None and isinstance(a[1], (int, float))]
        questions.append(
            {
                "id": _text(qid),
                "category": _text(first("category")),
                "question": _text(first("question")),
                "gold": _text(first("gold")),
                "spread": max(f1s) - min(f1s) if len(f1s) > 1 else 0.0,
                "answers": answers,
            }
        )
    return {"reference": report.get("reference"), "configs": configs, "questions": questions}


def _script_json(obj) -> str:
    """``obj`` as JSON safe inside a ``<script>`` element: ``<``, ``>``, ``&`` and the two JavaScript
    line separators written as ``\\uXXXX`` escapes (a ``</script>`` in an answer cannot end the block)."""
    s = json.dumps(obj, ensure_ascii=False, allow_nan=False)
    for ch in ("<", ">", "&", "\u2028", "\u2029"):
        s = s.replace(ch, f"\\u{ord(ch):04x}")
    return s


def _table(header: list[str], rows: list[list[str]], table_id: str) -> str:
    esc = html.escape
    head = "".join(f'<th scope="col" title="sort">{esc(h)}</th>' for h in header)
    body = []
    for cells in rows:
        if len(cells) < len(header):  # a configuration that did not finish: its reason spans the row
            tds = "".join(f"<td>{esc(c)}</td>" for c in cells[:-1])
            tds += f'<td colspan="{len(header) - len(cells) + 1}" class="why">{esc(cells[-1])}</td>'
        else:
            tds = "".join(f"<td>{esc(c)}</td>" for c in cells)
        body.append(f"<tr>{tds}</tr>")
    return (
        f'<div class="wide"><table id="{table_id}" class="sortable"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def render_page(report: dict, predictions: Mapping[str, list[dict]], title: str = "frontier") -> str:
    """The whole page (a string of HTML) for ``report`` (:func:`~memfrontier.frontier.report.build_report`)
    with the prediction rows of its configurations (label -> rows; see
    :func:`~memfrontier.frontier.report.load_predictions`)."""
    esc = html.escape
    ref = report.get("reference", "")
    main = _table(table_header(ref), [table_cells(x, ref) for x in report["rows"]], "frontier-table")
    cats = category_table(report)
    cat_html = "" if cats is None else "<h2>F1 by category</h2>" + _table(cats[0], cats[1], "category-table")
    notes = "".join(f"<li>{esc(line.removeprefix('- '))}</li>" for line in summary_lines(report))
    data = page_data(report, predictions)
    if not data["questions"]:
        hint = "No answers were found (the configurations' predictions.jsonl): nothing to show per question."
    elif all(q["question"] is None for q in data["questions"]):
        hint = (
            "This export holds no benchmark text (questions and gold answers stay with the dataset): "
            "questions are shown by id."
        )
    else:
        hint = ""
    script_hash = base64.b64encode(hashlib.sha256(_SCRIPT.encode("utf-8")).digest()).decode("ascii")
    csp = (
        f"default-src 'none'; script-src 'sha256-{script_hash}'; style-src 'unsafe-inline'; "
        "img-src 'none'; connect-src 'none'; font-src 'none'; form-action 'none'; base-uri 'none'"
    )
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{esc(csp, quote=False)}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title>
<style>{_STYLE}</style>
</head>
<body>
<h1>{esc(title)}</h1>
<nav><a href="#plots">plots</a> · <a href="#tables">tables</a> · <a href="#questions">per question</a></nav>
<section id="plots">
<div class="plots">
<figure><svg id="plot-cost" role="img" aria-label="F1 against USD×1e4 per question"></svg>
<figcaption>F1 (95% interval) against C(n)×1e4 USD per question, amortized (construction / n + online), log scale</figcaption></figure>
<figure><svg id="plot-latency" role="img" aria-label="F1 against proxy seconds per question"></svg>
<figcaption>F1 (95% interval) against the latency proxy, seconds per question</figcaption></figure>
</div>
<div id="legend"></div>
</section>
<div id="tip" role="tooltip" hidden></div>
<section id="tables">
<h2>Configurations</h2>
<p class="hint">Click a column header to sort.</p>
{main}
<p>{esc(table_note(report))}</p>
<ul class="notes">{notes}</ul>
{cat_html}
</section>
<section id="questions">
<h2>Per question</h2>
<p class="hint">{esc(hint)}</p>
<div class="controls">
<input id="q-filter" type="search" placeholder="filter: id, question, gold or answer text" aria-label="filter questions">
<label><input id="q-differ" type="checkbox"> only questions where configurations differ (F1 spread &gt; 0)</label>
<label>order <select id="q-order"><option value="file">as asked</option><option value="spread">largest F1 spread first</option></select></label>
<span id="q-count"></span>
</div>
<div id="q-list"></div>
</section>
<script type="application/json" id="frontier-data">{_script_json(data)}</script>
<script>{_SCRIPT}</script>
</body>
</html>
"""


def write_page(report: dict, predictions: Mapping[str, list[dict]], out: Path, title: str = "frontier") -> Path:
    """Write ``out/frontier.html`` (:func:`render_page`); returns its path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "frontier.html"
    write_text_atomic(path, render_page(report, predictions, title))
    return path


_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:1.5em auto;max-width:1300px;padding:0 1em;color:#222}
h1{font-size:1.35em}h2{font-size:1.15em;margin-top:1.6em}
nav{margin-bottom:1em}a{color:#1a5fb4}
.plots{display:flex;flex-wrap:wrap;gap:1em}figure{flex:1 1 560px;margin:0}
figcaption{font-size:12px;color:#555}
svg{width:100%;height:auto;border:1px solid #ddd;background:#fff}
svg text{font-size:11px;fill:#333}svg .point-label{pointer-events:none}svg .axis path{stroke:#888}svg .axis line.grid{stroke:#e6e6e6}
svg .mark{cursor:pointer}svg .mark:hover .shape,svg .mark:focus .shape{stroke-width:3}
svg .front{fill:none;stroke:#000;stroke-opacity:.5;stroke-width:1}
#legend{font-size:12px;margin:.4em 0}#legend span{margin-right:1.2em;white-space:nowrap}
#legend i{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
#tip{position:fixed;pointer-events:none;background:#fffff4;border:1px solid #999;padding:4px 8px;font-size:12px;
box-shadow:0 1px 4px rgba(0,0,0,.2);z-index:10;white-space:nowrap}
table{border-collapse:collapse;font-size:12px;margin:.5em 0}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f3f3f3;cursor:pointer;user-select:none}th.asc::after{content:" ▲"}th.desc::after{content:" ▼"}
.wide{overflow-x:auto}.sortable td{white-space:nowrap}td.why{color:#777}.hint{color:#666;font-size:12px}.notes{font-size:12px}
.controls{display:flex;flex-wrap:wrap;gap:1em;align-items:center;margin:.5em 0}
#q-filter{width:26em;padding:3px}
.q{border:1px solid #ddd;border-radius:4px;margin:.6em 0;padding:.4em .7em}
.q .head{font-weight:600}.q .id{color:#666;font-weight:400;margin-right:.6em}
.q .gold{margin:.2em 0}.q .missing{color:#888;font-style:italic}
.q table{width:100%;table-layout:fixed}.q th:nth-child(1){width:13em}.q th:nth-child(3){width:4.5em}.q th:nth-child(4){width:8em}.q th:nth-child(5){width:5.5em}.q td.ans{white-space:pre-wrap;word-break:break-word}.q td.num{text-align:right;white-space:nowrap}
"""

_SCRIPT = r"""
(function () {
"use strict";
var DATA = JSON.parse(document.getElementById("frontier-data").textContent);
var NS = "http://www.w3.org/2000/svg";
var PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
var families = [];
DATA.configs.forEach(function (c) { if (families.indexOf(c.strategy) < 0) families.push(c.strategy); });
function colour(s) { return PALETTE[families.indexOf(s) % PALETTE.length]; }
function el(name, attrs, parent) {
  var e = document.createElementNS(NS, name);
  for (var k in attrs) e.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(e);
  return e;
}
function h(name, text, parent, cls) {
  var e = document.createElement(name);
  if (text !== undefined && text !== null) e.textContent = text;
  if (cls) e.className = cls;
  if (parent) parent.appendChild(e);
  return e;
}
function fmt(v, d) { return (v === null || v === undefined) ? "-" : v.toFixed(d); }
function niceTicks(lo, hi, n) {
  var span = hi - lo, step = Math.pow(10, Math.floor(Math.log10(span / n)));
  var err = span / n / step;
  step *= err >= 7.5 ? 10 : err >= 3.5 ? 5 : err >= 1.5 ? 2 : 1;
  var out = [];
  for (var t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(+t.toFixed(12));
  return out;
}
function logTicks(lo, hi, mults) {  // the powers of ten in [lo, hi]; with 2 and 5 times them when under 3
  var out = [], a = Math.floor(Math.log10(lo)), b = Math.ceil(Math.log10(hi));
  for (var e = a; e <= b; e++) (mults || [1]).forEach(function (m) {
    var t = +(m * Math.pow(10, e)).toPrecision(12);
    if (t >= lo && t <= hi) out.push(t);
  });
  return out.length < 3 && !mults ? logTicks(lo, hi, [1, 2, 5]) : out;
}
function tickText(t) { return t !== 0 && (t >= 1e5 || t < 1e-3) ? t.toExponential(0) : String(+t.toPrecision(6)); }

var tip = document.getElementById("tip");
function showTip(evt, c, xkey, xname) {
  tip.textContent = "";
  h("b", c.label + (c.anchor ? " (anchor: reads the gold evidence)" : ""), tip);
  h("div", "F1 " + fmt(c.f1, 3) + " [" + fmt(c.f1_low, 3) + ", " + fmt(c.f1_high, 3) + "], n=" + c.n, tip);
  h("div", "USD×1e4/q: " + (c.unpriced ? "unpriced" : fmt(c.usd_x1e4_amortized, 4) + " amortized C(n), "
    + fmt(c.usd_x1e4_online, 4) + " online"), tip);
  h("div", "proxy s/q: " + fmt(c.proxy_s, 2), tip);
  var front = c.anchor ? "anchor, not on a front" : (c[xkey] ? "on the " + xname + " Pareto front" : "off the " + xname + " front");
  h("div", front, tip);
  tip.hidden = false;
  moveTip(evt);
}
function moveTip(evt) {
  var r = evt.target.getBoundingClientRect ? evt.target.getBoundingClientRect() : null;
  var x = evt.clientX !== undefined && evt.clientX !== 0 ? evt.clientX : (r ? r.right : 0);
  var y = evt.clientY !== undefined && evt.clientY !== 0 ? evt.clientY : (r ? r.top : 0);
  var w = tip.offsetWidth, left = x + 14;
  if (left + w > window.innerWidth - 8) left = Math.max(4, x - w - 14);
  tip.style.left = left + "px";
  tip.style.top = (y + 14) + "px";
}
function hideTip() { tip.hidden = true; }

function plot(svgId, xkey, paretoKey, xname, wantLog, xlabel) {
  var svg = document.getElementById(svgId);
  var W = 640, H = 420, L = 58, R = 16, T = 16, B = 52;
  svg.setAttribute("viewBox", "0 0 " + W + " " + H);
  var pts = DATA.configs.filter(function (c) { return c[xkey] !== null && c.f1 !== null; });
  if (!pts.length) {
    el("text", {x: W / 2, y: H / 2, "text-anchor": "middle"}, svg).textContent = "no configuration has " + xlabel;
    return;
  }
  var log = wantLog && pts.every(function (c) { return c[xkey] > 0; });
  var xs = pts.map(function (c) { return c[xkey]; });
  var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs), tx, xt;
  if (log) {
    var l0 = Math.log10(x0), l1 = Math.log10(x1), pad = Math.max((l1 - l0) * 0.08, 0.15);
    x0 = Math.pow(10, l0 - pad); x1 = Math.pow(10, l1 + pad);
    tx = function (v) { return L + (Math.log10(v) - Math.log10(x0)) / (Math.log10(x1) - Math.log10(x0)) * (W - L - R); };
    xt = logTicks(x0, x1);
  } else {
    var p = Math.max((x1 - x0) * 0.08, Math.abs(x1) * 0.05, 1e-3);
    x0 = Math.max(0, x0 - p); x1 = x1 + p;
    tx = function (v) { return L + (v - x0) / (x1 - x0) * (W - L - R); };
    xt = niceTicks(x0, x1, 6);
  }
  var lows = pts.map(function (c) { return c.f1_low === null ? c.f1 : c.f1_low; });
  var highs = pts.map(function (c) { return c.f1_high === null ? c.f1 : c.f1_high; });
  var y0 = Math.max(0, Math.floor((Math.min.apply(null, lows) - 0.02) * 20) / 20);
  var y1 = Math.min(1, Math.ceil((Math.max.apply(null, highs) + 0.02) * 20) / 20);
  if (y1 <= y0) y1 = y0 + 0.05;
  var ty = function (v) { return T + (y1 - v) / (y1 - y0) * (H - T - B); };
  var axes = el("g", {"class": "axis"}, svg);
  xt.forEach(function (t) {
    el("line", {x1: tx(t), x2: tx(t), y1: T, y2: H - B, "class": "grid"}, axes);
    el("text", {x: tx(t), y: H - B + 16, "text-anchor": "middle"}, axes).textContent = tickText(t);
  });
  niceTicks(y0, y1, 6).forEach(function (t) {
    el("line", {x1: L, x2: W - R, y1: ty(t), y2: ty(t), "class": "grid"}, axes);
    el("text", {x: L - 6, y: ty(t) + 4, "text-anchor": "end"}, axes).textContent = t.toFixed(2);
  });
  el("path", {d: "M" + L + "," + T + "V" + (H - B) + "H" + (W - R), fill: "none"}, axes);
  el("text", {x: (L + W - R) / 2, y: H - 12, "text-anchor": "middle"}, axes).textContent = xlabel + (log ? " (log scale)" : "");
  el("text", {x: 14, y: (T + H - B) / 2, "text-anchor": "middle", transform: "rotate(-90 14 " + ((T + H - B) / 2) + ")"}, axes).textContent = "F1 (95% CI)";
  var front = pts.filter(function (c) { return c[paretoKey] && !c.anchor; }).sort(function (a, b) { return a[xkey] - b[xkey]; });
  if (front.length > 1) {
    el("polyline", {"class": "front", points: front.map(function (c) { return tx(c[xkey]) + "," + ty(c.f1); }).join(" ")}, svg);
  }
  var marks = el("g", {}, svg), placed = [], groups = {};
  pts.forEach(function (c) {
    var x = tx(c[xkey]), y = ty(c.f1), col = colour(c.strategy);
    var g = el("g", {"class": "mark", tabindex: "0", "data-label": c.label}, marks);
    if (c.f1_low !== null && c.f1_high !== null) {
      el("path", {d: "M" + x + "," + ty(c.f1_low) + "V" + ty(c.f1_high) + "M" + (x - 3) + "," + ty(c.f1_low) + "h6M"
        + (x - 3) + "," + ty(c.f1_high) + "h6", stroke: col, "stroke-opacity": 0.45, fill: "none"}, g);
    }
    el("circle", {cx: x, cy: y, r: 11, fill: "transparent"}, g);  // a larger target under the mark
    var shape;
    if (c.anchor) {
      var s = "";
      for (var i = 0; i < 10; i++) {
        var r = i % 2 ? 3.5 : 8, a = Math.PI / 5 * i - Math.PI / 2;
        s += (i ? "L" : "M") + (x + r * Math.cos(a)).toFixed(2) + "," + (y + r * Math.sin(a)).toFixed(2);
      }
      shape = el("path", {d: s + "Z", fill: col, stroke: col}, g);
    } else if (c[paretoKey]) {
      shape = el("circle", {cx: x, cy: y, r: 5.5, fill: col, stroke: col}, g);
    } else {
      shape = el("rect", {x: x - 4.5, y: y - 4.5, width: 9, height: 9, fill: "#fff", stroke: col, "stroke-width": 1.6}, g);
    }
    shape.setAttribute("class", "shape");
    g.addEventListener("mouseenter", function (e) { showTip(e, c, paretoKey, xname); });
    g.addEventListener("mousemove", moveTip);
    g.addEventListener("mouseleave", hideTip);
    g.addEventListener("focus", function (e) { showTip(e, c, paretoKey, xname); });
    g.addEventListener("blur", hideTip);
    var key = x.toFixed(1) + "," + y.toFixed(1);
    if (groups[key]) { groups[key].textContent += " = " + c.label; return; }
    var w = 6.2 * c.label.length, lx = x + 8 + w > W - R ? x - 8 - w : x + 8, ly = y - 7;
    for (var tries = 0; tries < 16; tries++) {  // move the label down/up until it overlaps no other label
      var hit = placed.some(function (b) { return lx < b[0] + b[2] && b[0] < lx + w && Math.abs(ly - b[1]) < 12; });
      if (!hit) break;
      ly = y - 7 + (tries % 2 ? -1 : 1) * 12 * Math.ceil((tries + 1) / 2);
    }
    placed.push([lx, ly, w]);
    var t = el("text", {x: lx, y: ly, "class": "point-label"}, svg);
    t.textContent = c.label;
    groups[key] = t;
  });
}
plot("plot-cost", "usd_x1e4_amortized", "pareto_cost", "cost", true, "USD×1e4 per question, C(n) amortized");
plot("plot-latency", "proxy_s", "pareto_latency", "latency", false, "proxy seconds per question");

var legend = document.getElementById("legend");
families.forEach(function (f) {
  var s = h("span", null, legend), i = h("i", null, s);
  i.style.background = colour(f);
  s.appendChild(document.createTextNode(f + " (family)"));
});
h("span", "● on the Pareto front (joined by the line)", legend);
h("span", "□ off the front", legend);
if (DATA.configs.some(function (c) { return c.anchor; })) h("span", "★ anchor (gold evidence), never on a front", legend);
h("span", "bars: 95% F1 interval", legend);

Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
  var ths = table.querySelectorAll("th");
  Array.prototype.forEach.call(ths, function (th, col) {
    th.addEventListener("click", function () {
      var asc = !th.classList.contains("asc");
      Array.prototype.forEach.call(ths, function (o) { o.classList.remove("asc", "desc"); });
      th.classList.add(asc ? "asc" : "desc");
      var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      function key(r) {  // a number when the cell starts with one; null for no cell (a run that did not finish)
        var c = r.cells[col], t = c && c.colSpan === 1 ? c.textContent.trim() : null;
        var v = t === null ? NaN : parseFloat(t);
        return isNaN(v) ? t : v;
      }
      rows.sort(function (a, b) {  // empty cells last either way
        var x = key(a), y = key(b);
        if (x === null || y === null) return (x === null) - (y === null);
        var nx = typeof x === "number", ny = typeof y === "number";
        var d = nx && ny ? x - y : nx ? -1 : ny ? 1 : x.localeCompare(y);
        return asc ? d : -d;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});

var list = document.getElementById("q-list"), items = [];
DATA.questions.forEach(function (q) {
  var box = h("div", null, null, "q");
  var head = h("div", null, box, "head");
  h("span", q.id + (q.category !== null ? " · category " + q.category : ""), head, "id");
  if (q.question !== null) h("span", q.question, head);
  else h("span", "(question text not in this export)", head, "missing");
  var gold = h("div", null, box, "gold");
  gold.appendChild(document.createTextNode("gold: "));
  if (q.gold !== null) h("span", q.gold, gold); else h("span", "(not in this export)", gold, "missing");
  var table = h("table", null, box), tr = h("tr", null, h("thead", null, table));
  ["configuration", "answer", "F1", "USD×1e4 online", "proxy s"].forEach(function (t) { h("th", t, tr); });
  var body = h("tbody", null, table), hay = [q.id, q.question || "", q.gold || ""];
  DATA.configs.forEach(function (c, i) {
    var a = q.answers[i], row = h("tr", null, body);
    h("td", c.label, row);
    if (a === null) { h("td", "(no answer recorded)", row, "missing"); h("td", "-", row, "num"); h("td", "-", row, "num"); h("td", "-", row, "num"); return; }
    h("td", a[0] === null ? "" : a[0], row, "ans");
    var f = h("td", fmt(a[1], 2), row, "num");
    if (a[1] !== null) f.style.background = "hsl(" + Math.round(120 * a[1]) + ",65%,88%)";
    h("td", fmt(a[2], 4), row, "num");
    h("td", fmt(a[3], 2), row, "num");
    hay.push(a[0] || "");
  });
  items.push({q: q, el: box, text: hay.join("\n").toLowerCase()});
  list.appendChild(box);
});
var filter = document.getElementById("q-filter"), differ = document.getElementById("q-differ");
var order = document.getElementById("q-order"), count = document.getElementById("q-count");
function update() {
  var needle = filter.value.trim().toLowerCase(), shown = 0;
  var seq = items.slice();
  if (order.value === "spread") seq.sort(function (a, b) { return b.q.spread - a.q.spread; });
  seq.forEach(function (it) {
    var on = (!needle || it.text.indexOf(needle) >= 0) && (!differ.checked || it.q.spread > 0);
    it.el.hidden = !on;
    if (on) shown++;
    list.appendChild(it.el);
  });
  count.textContent = shown + " of " + items.length + " questions";
}
filter.addEventListener("input", update);
differ.addEventListener("change", update);
order.addEventListener("change", update);
update();
})();
"""


__all__ = ["page_data", "render_page", "write_page"]
