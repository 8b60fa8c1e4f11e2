"""storage is divided into rooms by role (docs/architecture.md#storage-rooms): schema,
codecs, server, writers, readers; no module lives outside a room and no room passes 20."""

from __future__ import annotations

from tests.package_tree import package_dir

STORAGE = package_dir("storage")
ROOMS = {"schema", "codecs", "server", "writers", "readers"}


def test_every_storage_module_is_in_a_room() -> None:
    assert sorted(p.name for p in STORAGE.glob("*.py")) == ["__init__.py"]
    assert {p.name for p in STORAGE.iterdir() if (p / "__init__.py").is_file()} == ROOMS


def test_no_room_passes_twenty_modules() -> None:
    sizes = {room: len(list((STORAGE / room).glob("*.py"))) - 1 for room in ROOMS}
    assert max(sizes.values()) <= 20, sizes


def test_codecs_and_schema_touch_no_database_session() -> None:
    # The byte formats and declarations are pure: no engine, session or connection.
    for room in ("codecs", "schema"):
        for path in (STORAGE / room).glob("*.py"):
            text = path.read_text()
            assert "storage.server.database" not in text, path.name
