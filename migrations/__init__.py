"""Alembic migrations; run them with ``tpmledger migrate`` (see :mod:`storage.migrate`)."""
