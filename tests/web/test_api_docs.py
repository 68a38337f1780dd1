"""The API reference page: served without a CDN, linked from the navigation, with the scheduler's examples."""

from __future__ import annotations

import re
from pathlib import Path

STATIC = Path(__file__).resolve().parents[2] / "app" / "web" / "static"


def test_api_reference_is_vendored_linked_and_has_examples(client) -> None:
    page = client.get("/api/docs")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert "style-src 'self' 'unsafe-inline'" in page.headers["Content-Security-Policy"]
    assert "script-src 'self';" in page.headers["Content-Security-Policy"]   # still no inline script
    for asset in re.findall(r'(?:src|href)="/assets/([^"]+)"', html):
        assert (STATIC / asset).is_file(), asset
        assert client.get(f"/assets/{asset}").status_code == 200
    assert "vendor/swagger_ui/swagger-ui-bundle.js" in html
    assert 'data-spec-url="/api/v1/openapi.json"' in html
    examples = html[html.index('id="api-examples"'):html.index('id="api-reference"')]
    assert "/api/v1/runs" in examples and "status" in examples and "/api/v1/compare?base=" in examples
    assert "-F files=@rank0.sqlite" in examples and "--wait" in examples
    # every signed-in page links to it
    assert 'href="/api/docs">API reference</a>' in client.get("/").get_data(as_text=True)


def test_vendored_bundle_loads_nothing_from_another_origin() -> None:
    bundle = (STATIC / "vendor" / "swagger_ui" / "swagger-ui-bundle.js").read_text(encoding="utf-8")
    assert "sourceMappingURL" not in bundle
    css = (STATIC / "vendor" / "swagger_ui" / "swagger-ui.css").read_text(encoding="utf-8")
    assert not re.search(r"url\((['\"]?)https?:", css) and "@import" not in css
