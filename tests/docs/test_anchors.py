"""Every ``docs/<page>.md#<anchor>`` cited in code, docs, the README or ``--help`` exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CITED = re.compile(r"docs/([A-Za-z0-9_-]+\.md)#([A-Za-z0-9_-]+)")
# A relative link inside docs/: ](metrics.md#anchor) or ](#anchor).
RELATIVE = re.compile(r"\]\((?:([A-Za-z0-9_-]+\.md))?#([A-Za-z0-9_-]+)\)")


def heading_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped,
    spaces to hyphens."""
    text = re.sub(r"`|\*\*|\*|_(?=\W)|(?<=\W)_", "", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if fenced or not line.startswith("#"):
            continue
        anchor = heading_anchor(line.lstrip("#"))
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        found.add(anchor if count == 0 else f"{anchor}-{count}")
    found |= set(re.findall(r'<a (?:name|id)="([^"]+)"', page.read_text()))
    return found


def _tracked_text_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    suffixes = {".py", ".md", ".sh", ".yml", ".yaml", ".toml", ".txt", ".json", ""}
    return [ROOT / f for f in listed if Path(f).suffix in suffixes and (ROOT / f).is_file()]


def test_the_anchor_rule_matches_githubs() -> None:
    assert heading_anchor(" Streaming seal") == "streaming-seal"
    assert heading_anchor(" The envelope — DSSE, Ed25519") == "the-envelope--dsse-ed25519"
    assert heading_anchor(" `tpmledger up` (embedded)") == "tpmledger-up-embedded"


def test_every_cited_docs_anchor_exists() -> None:
    pages = {page.name: anchors(page) for page in DOCS.glob("*.md")}
    missing: set[str] = set()
    for path in _tracked_text_files():
        if path == Path(__file__).resolve():
            continue
        text = path.read_text(errors="replace")
        for page, anchor in CITED.findall(text):
            if anchor not in pages.get(page, set()):
                missing.add(f"{path.relative_to(ROOT)}: docs/{page}#{anchor}")
        if path.parent == DOCS:
            for page, anchor in RELATIVE.findall(text):
                target = page or path.name
                if anchor not in pages.get(target, set()):
                    missing.add(f"{path.relative_to(ROOT)}: {target}#{anchor}")
    assert sorted(missing) == []
