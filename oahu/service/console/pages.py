"""The console's pages (``/``, ``/explore``, ``/annotate``) and their static files.

Each page is its own content (``static/NAME.html``) inside one shell (``static/shell.html``:
head, navigation, scripts), put together once at start-up; its JavaScript (``static/NAME.js``)
reads the JSON endpoints under ``/v1/console`` (and ``/v1/model``). The chart library is
vendored under ``static/vendor/`` (``scripts/console-assets.sh``), so nothing is fetched from
another site at run time and the console works offline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from string import Template

from fastapi import APIRouter, FastAPI
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).resolve().parent / "static"
STATIC_URL = "/console/static"


@dataclass(frozen=True)
class Page:
    """A console page: its path, its name (``static/NAME.html`` and ``NAME.js``), its title in
    the navigation and the vendored libraries it loads before its script."""

    path: str
    name: str
    title: str
    uses_charts: bool = False


PAGES = (
    Page("/", "live", "Live", uses_charts=True),
    Page("/explore", "explore", "Explore"),
    Page("/annotate", "annotate", "Annotate"),
)
CHARTS_CSS = f'<link rel="stylesheet" href="{STATIC_URL}/vendor/uplot/uPlot.min.css">\n'
CHARTS_JS = f'<script src="{STATIC_URL}/vendor/uplot/uPlot.iife.min.js"></script>\n'


def render(page: Page) -> str:
    """``page``'s whole HTML.

    >>> html = render(PAGES[1])
    >>> html.startswith("<!doctype html>"), '<a href="/explore" class="active">' in html
    (True, True)
    >>> "uPlot" in html, "uPlot" in render(PAGES[0])
    (False, True)
    """
    active = ' class="active"'
    nav = "".join(f'<a href="{p.path}"{active if p is page else ""}>{p.title}</a>' for p in PAGES)
    return Template((STATIC / "shell.html").read_text(encoding="utf-8")).substitute(
        title=page.title.lower(),
        nav=nav + '<a href="/docs">API</a>',
        styles=CHARTS_CSS if page.uses_charts else "",
        scripts=CHARTS_JS if page.uses_charts else "",
        main=(STATIC / f"{page.name}.html").read_text(encoding="utf-8"),
        name=page.name,
    )


def add_pages(app: FastAPI) -> None:
    """Serve the pages at their paths and ``static/`` under :data:`STATIC_URL`."""
    router = APIRouter(include_in_schema=False)
    for page in PAGES:
        router.add_api_route(page.path, _serve(render(page)), methods=["GET"])
    app.include_router(router)
    app.mount(STATIC_URL, StaticFiles(directory=STATIC), name="console-static")


def _serve(html: str) -> Callable[[], HTMLResponse]:
    def page() -> HTMLResponse:
        # revalidated on every load: an upgraded service serves its own pages at once
        return HTMLResponse(html, headers={"Cache-Control": "no-cache"})

    return page
