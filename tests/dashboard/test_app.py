"""The app object: health endpoint, pages registered, assets served locally (no CDN)."""

from __future__ import annotations

import dash

from tpmledger.dashboard.app import create_app


def test_app_serves_health_pages_and_local_assets(database_url: str) -> None:
    app = create_app(database_url, api_base_url="http://127.0.0.1:4999")
    client = app.server.test_client()

    assert client.get("/healthz").get_data(as_text=True) == "ok"
    index = client.get("/runs/anything").get_data(as_text=True)
    assert "/assets/bootstrap.min.css" in index
    assert "cdn.jsdelivr.net" not in index and "unpkg.com" not in index
    css = client.get("/assets/bootstrap.min.css")
    assert css.status_code == 200 and b"Bootstrap" in css.get_data()[:200]

    paths = {page["path"] for page in dash.page_registry.values()}
    templates = {page["path_template"] for page in dash.page_registry.values()}
    assert {"/", "/sweeps"} <= paths and "/runs/<run_id>" in templates
