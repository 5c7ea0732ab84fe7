"""mkdocs hooks: the site's home page is the README and its changelog is CHANGELOG.md —
each kept in one place, at the repository's root, and given to the site as it builds
(the README's links into ``docs/`` made relative to the site)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent


def _front_page() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    text = re.sub(r"\]\(docs/", "](", text)  # the README's links into docs/, from the site's root
    return text.replace("](CHANGELOG.md)", "](changelog.md)")


def on_files(files: Files, config: Any) -> Files:
    files.append(File.generated(config, "index.md", content=_front_page()))
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    files.append(File.generated(config, "changelog.md", content=changelog))
    return files
