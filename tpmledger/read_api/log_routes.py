"""A run's minute tree as a C2SP log (docs/provenance.md#checkpoints, #tiles).

``GET /v1/runs/{run_id}/checkpoint[?version=V]`` — the signed checkpoint (text/plain) of
the newest version, or of version V; ``GET /v1/runs/{run_id}/tile/<L>/<N>[.p/<W>]`` and
``/tile/entries/<N>[.p/<W>]`` — tiles of the newest tree, so ``/v1/runs/{run_id}/`` is a
``tlog-tiles`` URL prefix a witness or verifier can read.
"""

from __future__ import annotations

import gzip

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import PlainTextResponse, Response

from tpmledger.provenance.signing_keys import load_or_create_signing_key
from tpmledger.read_api.run_ids import reject_nul_run_id
from tpmledger.settings import Settings
from tpmledger.storage.server.database import in_one_snapshot

CHECKPOINT_MEDIA_TYPE = "text/plain; charset=utf-8"
TILE_MEDIA_TYPE = "application/octet-stream"
#: A tile's bytes never change while the log only grows (tlog-tiles: "immutable").
TILE_CACHE = "public, max-age=31536000, immutable"
#: The newest checkpoint changes with every seal: no caching beyond a few seconds.
LATEST_CHECKPOINT_CACHE = "no-cache"
VERSION_CHECKPOINT_CACHE = "public, max-age=3600"


def build_router(database_url: str, settings: Settings) -> APIRouter:
    """Checkpoint and tile routes over ``database_url``, signed with the settings' key."""
    router = APIRouter(tags=["provenance"])
    tiles_by_run = None

    def checkpoint_text(run_id: str, version: int | None) -> str:
        from tpmledger.analytics.proofs.run_log import version_checkpoint

        key = load_or_create_signing_key(settings)
        return in_one_snapshot(
            database_url, version_checkpoint, run_id, key, settings.checkpoint_origin, version
        )

    def tile_bytes(run_id: str, path: str) -> bytes:
        nonlocal tiles_by_run
        from tpmledger.analytics.proofs.run_log import RunLogTiles
        from tpmledger.provenance.tiles import parse_tile_path

        if tiles_by_run is None:
            tiles_by_run = RunLogTiles()
        return in_one_snapshot(database_url, tiles_by_run.tile, run_id, parse_tile_path(path))

    @router.get(
        "/runs/{run_id}/checkpoint",
        dependencies=[Depends(reject_nul_run_id)],
        summary="The run's minute tree head as a C2SP checkpoint (signed note)",
        response_class=PlainTextResponse,
        responses={404: {"description": "run or version not sealed"}},
    )
    async def get_checkpoint(
        run_id: str,
        version: int | None = Query(None, description="a sealed version (default: newest)"),
    ) -> PlainTextResponse:
        from tpmledger.analytics.proofs.version_heads import RunNotSealed, VersionNotSealed

        try:
            text = await run_in_threadpool(checkpoint_text, run_id, version)
        except (RunNotSealed, VersionNotSealed) as exc:
            raise HTTPException(status_code=404, detail=str(exc.args[0])) from exc
        cache = LATEST_CHECKPOINT_CACHE if version is None else VERSION_CHECKPOINT_CACHE
        return PlainTextResponse(
            text, media_type=CHECKPOINT_MEDIA_TYPE, headers={"Cache-Control": cache}
        )

    @router.get(
        "/runs/{run_id}/tile/{tile_path:path}",
        dependencies=[Depends(reject_nul_run_id)],
        summary="A C2SP tlog-tiles hash tile or entry bundle of the run's newest minute tree",
        response_class=Response,
        responses={
            400: {"description": "not a tile path"},
            404: {"description": "no such tile in the run's newest tree"},
            409: {
                "description": "an entry bundle of a version sealed before its minute leaves "
                "were stored (seal the run again), or stored leaves that do not hash to it"
            },
        },
    )
    async def get_tile(request: Request, run_id: str, tile_path: str) -> Response:
        from tpmledger.analytics.proofs.version_heads import RunNotSealed, SnapshotOutdated
        from tpmledger.provenance.tiles import TileError, parse_tile_path

        try:
            parse_tile_path("tile/" + tile_path)
        except TileError as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from exc
        try:
            data = await run_in_threadpool(tile_bytes, run_id, "tile/" + tile_path)
        except (RunNotSealed, TileError) as exc:
            raise HTTPException(status_code=404, detail=str(exc.args[0])) from exc
        except SnapshotOutdated as exc:
            raise HTTPException(status_code=409, detail=str(exc)) from exc
        headers = {"Cache-Control": TILE_CACHE}
        if tile_path.startswith("entries/"):
            # tlog-tiles: entry bundles SHOULD be compressed at the HTTP layer.
            headers["Vary"] = "Accept-Encoding"
            if "gzip" in request.headers.get("accept-encoding", ""):
                data = gzip.compress(data, mtime=0)
                headers["Content-Encoding"] = "gzip"
        return Response(data, media_type=TILE_MEDIA_TYPE, headers=headers)

    return router
