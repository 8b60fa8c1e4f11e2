"""Signed run summaries and the service's public keys (docs/metrics.md read API).

``GET /v1/runs/{run_id}/summary`` returns the DSSE envelope over the run's newest sealed
snapshot; ``GET /v1/keys`` the public keys (PEM) that summaries are signed with, current
first, retired ones after, so summaries signed before a rotation still verify.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import PlainTextResponse

from tpmledger.provenance.signing_keys import load_or_create_signing_key, public_keys
from tpmledger.read_api.run_ids import reject_nul_run_id
from tpmledger.settings import Settings
from tpmledger.storage.server.database import in_one_snapshot

PEM_MEDIA_TYPE = "application/x-pem-file"
#: Versions are PostgreSQL ``integer``: a larger one names no version (422, not a 500).
MAX_VERSION = 2**31 - 1


def build_router(database_url: str, settings: Settings | None = None) -> APIRouter:
    """Routes over ``database_url``; keys come from ``settings`` (default: the environment)."""
    settings = settings or Settings()
    router = APIRouter(tags=["provenance"])

    def signed_envelope(run_id: str) -> dict[str, Any]:
        # Signs the snapshot row's figures only; no event is read, so this stays cheap.
        # Imported here: summary_export pulls in analytics (Polars), which ingest avoids.
        from tpmledger.analytics.proofs.summary_export import summary_envelope

        key = load_or_create_signing_key(settings)
        return in_one_snapshot(database_url, summary_envelope, run_id, key)

    @router.get(
        "/runs/{run_id}/summary",
        dependencies=[Depends(reject_nul_run_id)],
        summary="DSSE envelope (in-toto Statement v1, Ed25519) over the run's newest snapshot",
    )
    async def get_summary(run_id: str) -> dict[str, Any]:
        from tpmledger.analytics.proofs.summary_export import RunNotSealed

        try:
            return await run_in_threadpool(signed_envelope, run_id)
        except RunNotSealed as exc:
            raise HTTPException(status_code=404, detail=str(exc)) from exc

    @router.get(
        "/runs/{run_id}/consistency",
        dependencies=[Depends(reject_nul_run_id)],
        summary="RFC 9162 proof that version `to`'s minute tree extends version `from`'s",
        responses={
            404: {"description": "no such version"},
            409: {"description": "no proof: minutes changed between the versions"},
        },
    )
    async def get_consistency(
        run_id: str,
        old: int = Query(
            ..., alias="from", ge=1, le=MAX_VERSION, description="the earlier version"
        ),
        new: int = Query(..., alias="to", ge=1, le=MAX_VERSION, description="the later version"),
    ) -> dict[str, Any]:
        from tpmledger.analytics.proofs.version_consistency import (
            ConsistencyRefused,
            VersionNotFound,
            prove_consistency,
        )

        try:
            return await run_in_threadpool(
                in_one_snapshot, database_url, prove_consistency, run_id, old, new
            )
        except VersionNotFound as exc:
            raise HTTPException(status_code=404, detail=str(exc)) from exc
        except ConsistencyRefused as exc:
            raise HTTPException(status_code=409, detail=str(exc)) from exc

    @router.get("/keys", summary="Public keys (SPKI PEM) that sign run summaries")
    async def get_keys(
        run: str | None = Query(
            None,
            description="also give each key's verifier key for this run's checkpoints "
            "(docs/provenance.md#checkpoints)",
        ),
    ) -> dict[str, Any]:
        from tpmledger.provenance.checkpoint import log_verifier_key, run_origin

        keys = await run_in_threadpool(public_keys, settings)
        rows: list[dict[str, Any]] = []
        for k in keys:
            row: dict[str, Any] = {"fingerprint": k.fingerprint, "current": k.current, "pem": k.pem}
            if run is not None:
                origin = run_origin(settings.checkpoint_origin, run)
                row["checkpoint_origin"] = origin
                row["note_verifier_key"] = log_verifier_key(origin, k.public_key)
            rows.append(row)
        return {"keys": rows}

    @router.get(
        "/keys/current.pem",
        summary="The current public key as a PEM file (the export's service.pub)",
        response_class=PlainTextResponse,
    )
    async def get_current_key() -> PlainTextResponse:
        key = await run_in_threadpool(load_or_create_signing_key, settings)
        return PlainTextResponse(
            key.public_pem,
            media_type=PEM_MEDIA_TYPE,
            headers={"Content-Disposition": 'attachment; filename="service.pub"'},
        )

    return router
