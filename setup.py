"""The package mapping: the design card's parts stand at the repository root.

``ingest/``, ``storage/``, ``analytics/``, ``dashboard/`` and ``migrations/`` live beside
``pyproject.toml`` (the tree a reader of the design card expects); the rest of the package
(cli, provenance, read API, simulator, settings) lives in ``tpmledger/``. Everything installs
as one import package, ``tpmledger`` (``tpmledger.ingest`` …); the metadata is in
``pyproject.toml``. See docs/architecture.md#the-tree.
"""

from setuptools import find_packages, setup

PARTS = ("ingest", "storage", "analytics", "dashboard", "migrations")

package_dir = {"tpmledger": "tpmledger"} | {f"tpmledger.{part}": part for part in PARTS}
packages = find_packages(include=["tpmledger", "tpmledger.*"])
for part in PARTS:
    packages += [f"tpmledger.{name}" for name in find_packages(include=[part, f"{part}.*"])]

setup(package_dir=package_dir, packages=packages)
