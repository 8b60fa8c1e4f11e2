"""The Dash app (docs/dashboard.md) and ``run(settings)`` for ``tpmledger serve dashboard``.

Pages read sealed snapshots and minute tables through ``dashboard.data`` only. The app is
served by waitress on ``settings.host:settings.dashboard_port`` and stops cleanly on
SIGTERM (compose, ``tpmledger up``) and SIGINT (Ctrl-C).
"""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path
from types import FrameType

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, html
from flask import Response, request

from tpmledger.dashboard.auth import DashboardAuth, remember
from tpmledger.dashboard.config import DEFAULT_REFRESH_MS, DashboardConfig
from tpmledger.dashboard.pages import compare as compare_page
from tpmledger.dashboard.pages import run as run_page
from tpmledger.dashboard.pages import runs as runs_page
from tpmledger.dashboard.pages import sweep as sweep_page
from tpmledger.host_names import MISDIRECTED, HostNames
from tpmledger.settings import Settings, UnsafeConfiguration

ASSETS = Path(__file__).resolve().parent / "assets"
log = logging.getLogger(__name__)

# Follows the OS preference until the switch is used; the switch persists in local storage.
_THEME_JS = """
function(dark) {
    if (dark === null || dark === undefined) {
        dark = window.matchMedia && window.matchMedia('(prefers-color-scheme: dark)').matches;
    }
    document.documentElement.setAttribute('data-bs-theme', dark ? 'dark' : 'light');
    return '';
}
"""


def _navbar() -> dbc.Navbar:
    return dbc.Navbar(
        dbc.Container(
            [
                dbc.NavbarBrand("tpmledger", href="/", className="fw-semibold"),
                dbc.Nav(
                    [
                        dbc.NavItem(dbc.NavLink("Runs", href="/", active="exact", id="nav-runs")),
                        dbc.NavItem(
                            dbc.NavLink("Sweeps", href="/sweeps", active="exact", id="nav-sweeps")
                        ),
                        dbc.NavItem(
                            dbc.NavLink(
                                "Compare", href="/compare", active="exact", id="nav-compare"
                            )
                        ),
                    ],
                    className="me-auto",
                    navbar=True,
                ),
                html.Span("all times UTC", className="small text-body-secondary me-3"),
                dbc.Switch(
                    id="theme-dark",
                    label="dark",
                    value=None,
                    persistence=True,
                    className="mb-0 small",
                ),
                html.Span(id="theme-applied", hidden=True),
            ],
            fluid=True,
        ),
        # No fixed colours: the bar follows the page's light / dark mode.
        color="body-tertiary",
        dark=False,
        className="border-bottom mb-3",
    )


def create_app(
    database_url: str,
    *,
    api_base_url: str = "http://127.0.0.1:4318",
    refresh_ms: int = DEFAULT_REFRESH_MS,
    close_after_s: float = 120.0,
    auth: DashboardAuth | None = None,
    hosts: HostNames | None = None,
) -> dash.Dash:
    """The multi-page app over ``database_url``; nothing is read from the database here.

    With ``auth``, every request but ``/healthz`` needs a read token once any token is
    configured (:mod:`dashboard.auth`). With ``hosts``, a request naming a host the
    dashboard does not serve is answered 421 (:mod:`tpmledger.host_names`).
    """
    config = DashboardConfig(
        database_url=database_url,
        api_base_url=api_base_url,
        refresh_ms=refresh_ms,
        close_after_s=close_after_s,
    )
    app = dash.Dash(
        __name__,
        use_pages=True,
        pages_folder="",
        assets_folder=str(ASSETS),
        # Pages are built per request, so their ids are not in the initial layout.
        suppress_callback_exceptions=True,
        title="tpmledger",
        update_title="",
        serve_locally=True,
    )
    for page in (runs_page, run_page, sweep_page, compare_page):
        page.register(app, config)
    app.layout = html.Div(
        [_navbar(), dbc.Container(dash.page_container, fluid=True, className="pb-4")]
    )
    app.clientside_callback(
        _THEME_JS, Output("theme-applied", "children"), Input("theme-dark", "value")
    )

    # Dash serves its page for "/<path:path>", whose pattern stops at a newline: a run id
    # holding one (%0A in the URL) would be a 404. Any run id reaches the run page.
    app.server.add_url_rule("/runs/<run_id>", endpoint="run-page", view_func=app.index)

    @app.server.route("/healthz")
    def healthz() -> tuple[str, int]:
        return "ok", 200

    if hosts is not None:
        served = hosts
        guard = auth

        @app.server.before_request
        def require_host() -> Response | None:
            header = request.headers.get("Host")
            required = guard is not None and guard.required
            if served.serves(header, tokens_required=required):
                return None
            return Response(served.refusal(header), status=MISDIRECTED, mimetype="text/plain")

    if auth is not None:
        checker = auth

        @app.server.before_request
        def require_token() -> Response | None:
            return checker.check(request)

        app.server.after_request(remember)

    return app


def _stop(signum: int, _frame: FrameType | None) -> None:
    # waitress leaves its loop (and closes its sockets) on SystemExit / KeyboardInterrupt.
    raise SystemExit(0)


def run(settings: Settings) -> None:
    """Serve the dashboard until SIGTERM or SIGINT (``tpmledger serve dashboard``)."""
    import waitress

    if not settings.database_url:
        raise ValueError("the dashboard needs settings.database_url")
    auth = DashboardAuth(
        settings.database_url, settings.ingest_tokens, read_tokens=settings.read_tokens
    )
    try:
        # The pages show run data: beyond loopback only behind a token (or --insecure).
        settings.check_bind_is_safe(has_tokens=auth.required)
    except UnsafeConfiguration as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from exc
    app = create_app(
        settings.database_url,
        api_base_url=settings.api_base_url,
        close_after_s=settings.minute_close_after_s,
        auth=auth,
        hosts=HostNames(settings.host, settings.allowed_hosts),
    )
    server = waitress.create_server(
        app.server,
        host=settings.host,
        port=settings.dashboard_port,
        threads=8,
        # Keep X-Forwarded-Proto: the login cookie is made Secure behind a TLS proxy. Nothing
        # else reads X-Forwarded-* (no address or host is taken from them), so a forged one
        # can only make the cookie stricter.
        clear_untrusted_proxy_headers=False,
    )
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    print(f"dashboard on http://{settings.host}:{settings.dashboard_port}", flush=True)
    server.run()
    log.info("dashboard stopped")
