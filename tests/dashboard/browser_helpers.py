"""Small waits and probes for driving the dashboard in Chromium (no fixed sleeps)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.fixtures.servers import wait_for

# How long a page may take to show what a test waits for. A passing page shows it in a
# second or two; on a CI machine whose two cores every lane keeps busy, a render can take
# tens of seconds. The wait ends as soon as the page is ready, so a long bound costs
# nothing when the page works (a page that never renders is a bug: test_slow_refresh.py).
PAGE_WAIT_S = 120.0

# What Plotly drew: trace names and values, and the named annotations (peak, knee, …).
_GRAPH_JS = """
const gd = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');
if (!gd || !gd.data || !gd._fullLayout) { return null; }
return {
  traces: gd.data.map(t => ({name: t.name || null, type: t.type, yaxis: t.yaxis || 'y',
                             x: Array.from(t.x || []), y: Array.from(t.y || [])})),
  annotations: (gd.layout.annotations || []).map(a => ({name: a.name || null, text: a.text})),
  yTitle: gd.layout.yaxis && gd.layout.yaxis.title ? gd.layout.yaxis.title.text : null,
};
"""


def graph(driver: Any, graph_id: str) -> dict[str, Any] | None:
    """The figure a ``dcc.Graph`` currently shows, as Plotly holds it in the page."""
    result: dict[str, Any] | None = driver.execute_script(_GRAPH_JS, graph_id)
    return result


def wait_graph(
    driver: Any, graph_id: str, predicate: Any = None, timeout: float = PAGE_WAIT_S
) -> dict[str, Any]:
    """Wait until the graph has traces (and ``predicate(figure)`` holds, when given)."""

    def ready() -> dict[str, Any] | None:
        figure = graph(driver, graph_id)
        if not figure or not (figure["traces"] or figure["annotations"]):
            return None
        if predicate is not None and not predicate(figure):
            return None
        return figure

    return wait_for(ready, timeout=timeout, interval=0.1)


def text_of(driver: Any, element_id: str) -> str:
    """Visible text of the element with ``element_id`` ('' when absent).

    Read in one script call: a live page re-renders on its refresh interval, and a
    WebElement found a moment earlier could be stale by the time its text is asked for.
    """
    script = "const e = document.getElementById(arguments[0]); return e ? e.innerText : '';"
    return str(driver.execute_script(script, element_id)).strip()


def wait_text(driver: Any, element_id: str, timeout: float = PAGE_WAIT_S) -> str:
    """Wait until the element exists and shows some text; return it."""
    return str(wait_for(lambda: text_of(driver, element_id), timeout=timeout, interval=0.1))


def annotation(figure: dict[str, Any], name: str) -> str | None:
    """The text of the annotation called ``name`` (e.g. "peak"), if drawn."""
    for a in figure["annotations"]:
        if a["name"] == name:
            return str(a["text"])
    return None


def screenshot(driver: Any, folder: Path, name: str) -> Path:
    """Save a full-window PNG into the test's output folder."""
    path = folder / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def table_cells(driver: Any, css: str) -> list[list[str]]:
    """The text of every cell of the table rows matching ``css``, read in one script call."""
    script = (
        "return Array.from(document.querySelectorAll(arguments[0])).map("
        "tr => Array.from(tr.querySelectorAll('td')).map(td => td.innerText.trim()));"
    )
    return list(driver.execute_script(script, css))


def click_link(driver: Any, text: str) -> bool:
    """Click the link showing ``text``; False (retry) if the page re-rendered under us."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        driver.find_element(By.LINK_TEXT, text).click()
    except (StaleElementReferenceException, NoSuchElementException):
        return False
    return True


# The boxes of what Plotly drew as text in a graph: its title, the legend, every
# annotation (panel titles, notes) and the axis titles, as the browser laid them out.
_TEXT_BOXES_JS = """
const root = arguments[0] ? document.querySelector('#' + arguments[0]) : document;
const boxes = [];
for (const [kind, css] of [['title', '.gtitle'], ['legend', '.legend .bg'],
                           ['annotation', '.annotation'], ['axis title', '.xtitle'],
                           ['axis title', '.ytitle'], ['axis title', '.y2title']]) {
  for (const e of root.querySelectorAll(css)) {
    const r = e.getBoundingClientRect();
    if (r.width > 0 && r.height > 0) {
      boxes.push({kind: kind, text: (e.textContent || '').slice(0, 40),
                  left: r.left, top: r.top, right: r.right, bottom: r.bottom});
    }
  }
}
return boxes;
"""


def overlapping_text(driver: Any, graph_id: str | None = None) -> list[tuple[str, str]]:
    """Pairs of a graph's title, legend, annotations and axis titles whose boxes overlap
    in the page (``graph_id``: the ``dcc.Graph``'s id; None: the whole page)."""
    boxes: list[dict[str, Any]] = driver.execute_script(_TEXT_BOXES_JS, graph_id)
    overlaps = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            if (
                a["left"] < b["right"]
                and b["left"] < a["right"]
                and a["top"] < b["bottom"]
                and b["top"] < a["bottom"]
            ):
                overlaps.append((f"{a['kind']} {a['text']!r}", f"{b['kind']} {b['text']!r}"))
    return overlaps
