"""One self-contained HTML page around the SVG: pan (drag), zoom (wheel, +/-), fit; no network."""

from __future__ import annotations

from xml.sax.saxutils import escape

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
html, body {{ margin: 0; height: 100%; font-family: Helvetica, Arial, sans-serif; }}
#bar {{ position: fixed; top: 0; left: 0; right: 0; height: 34px; background: #f4f4f4;
        border-bottom: 1px solid #ccc; display: flex; align-items: center; gap: 8px;
        padding: 0 10px; z-index: 1; font-size: 13px; }}
#bar button {{ font-size: 13px; }}
#view {{ position: absolute; top: 35px; left: 0; right: 0; bottom: 0; overflow: hidden;
         cursor: grab; background: #fff; }}
#view svg {{ width: 100%; height: 100%; }}
</style>
</head>
<body>
<div id="bar"><b>{title}</b>
<span>{summary}</span>
<button id="zoom-in">+</button><button id="zoom-out">&minus;</button>
<button id="fit">fit</button>
<span>drag to pan, wheel to zoom; hover a node for its source line</span></div>
<div id="view">
{svg}
</div>
<script>
(function () {{
  var view = document.getElementById("view");
  var svg = view.querySelector("svg");
  var box = svg.viewBox.baseVal;
  var full = {{x: box.x, y: box.y, w: box.width, h: box.height}};
  svg.removeAttribute("width");
  svg.removeAttribute("height");
  svg.setAttribute("preserveAspectRatio", "xMidYMid meet");
  function set(x, y, w, h) {{ svg.setAttribute("viewBox", x + " " + y + " " + w + " " + h); }}
  function zoom(f, cx, cy) {{
    var b = svg.viewBox.baseVal, r = view.getBoundingClientRect();
    var px = b.x + b.width * (cx === undefined ? 0.5 : (cx - r.left) / r.width);
    var py = b.y + b.height * (cy === undefined ? 0.5 : (cy - r.top) / r.height);
    set(px - (px - b.x) * f, py - (py - b.y) * f, b.width * f, b.height * f);
  }}
  view.addEventListener("wheel", function (e) {{
    e.preventDefault(); zoom(e.deltaY > 0 ? 1.15 : 1 / 1.15, e.clientX, e.clientY);
  }}, {{passive: false}});
  var drag = null;
  view.addEventListener("mousedown", function (e) {{ drag = {{x: e.clientX, y: e.clientY}}; }});
  window.addEventListener("mouseup", function () {{ drag = null; }});
  window.addEventListener("mousemove", function (e) {{
    if (!drag) return;
    var b = svg.viewBox.baseVal, r = view.getBoundingClientRect();
    var s = Math.max(b.width / r.width, b.height / r.height);
    set(b.x - (e.clientX - drag.x) * s, b.y - (e.clientY - drag.y) * s, b.width, b.height);
    drag = {{x: e.clientX, y: e.clientY}};
  }});
  document.getElementById("zoom-in").onclick = function () {{ zoom(1 / 1.3); }};
  document.getElementById("zoom-out").onclick = function () {{ zoom(1.3); }};
  document.getElementById("fit").onclick = function () {{
    set(full.x, full.y, full.w, full.h);
  }};
}})();
</script>
</body>
</html>
"""


def to_html(svg: str, title: str, summary: str) -> str:
    """The page; `svg` is our own or Graphviz's (its XML prologue already stripped)."""
    return _PAGE.format(title=escape(title), summary=escape(summary), svg=svg)
