"""Where a witness or verifier reads a log's tiles: a URL prefix or a directory
(docs/provenance.md#witnessing).

``http://host:4318/v1/runs/RUN/`` (the read API) and an exported directory served by any
web server look the same: ``<prefix>/tile/…`` and ``<prefix>/checkpoint``.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tpmledger.provenance.tiles import TileError

TIMEOUT_S = 30.0


@dataclass(frozen=True)
class DirectoryTiles:
    """Tiles under a directory (``summary export --tiles`` output)."""

    root: Path

    def read(self, path: str) -> bytes:
        target = self.root / path
        try:
            return target.read_bytes()
        except OSError as exc:
            raise TileError(f"cannot read {target}: {exc.strerror or exc}") from exc


@dataclass(frozen=True)
class HttpTiles:
    """Tiles under a URL prefix; ``headers`` go with every request (e.g. a bearer token)."""

    prefix: str
    headers: dict[str, str] = field(default_factory=dict)

    def read(self, path: str) -> bytes:
        url = self.prefix.rstrip("/") + "/" + path
        request = urllib.request.Request(url, headers=self.headers)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
                data: bytes = answer.read()
                return data
        except urllib.error.HTTPError as exc:
            raise TileError(f"GET {url}: HTTP {exc.code} {exc.reason}") from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise TileError(f"GET {url}: {reason}") from exc


def tile_source(location: str, headers: dict[str, str] | None = None) -> DirectoryTiles | HttpTiles:
    """A URL (``http://`` or ``https://``) or a directory path."""
    if location.startswith(("http://", "https://")):
        return HttpTiles(location, headers or {})
    root = Path(location)
    if not root.is_dir():
        raise TileError(f"--tiles {location}: not a URL and not a directory")
    return DirectoryTiles(root)
