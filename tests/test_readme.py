"""The README keeps its promises: its first lines install and tune, then test with the command
CI runs; every file it (or docs/) links to exists; its Python names exist."""

from __future__ import annotations

import re
from pathlib import Path

import arbiter
from arbiter import report

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_the_first_lines_install_tune_and_test_as_ci_does():
    block = README.split("```bash\n", 1)[1].split("```", 1)[0]
    install, tests = [ln.split("#")[0].strip() for ln in block.strip().splitlines()]
    assert "pip install -e" in install and install.endswith("arbiter tune examples/regions.toml")
    assert "sudo" not in install and "apt" not in install
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in ci  # the very command CI runs


def test_every_linked_file_exists():
    pages = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"),
             ROOT / "examples" / "plugin_lane" / "README.md"]
    missing = [(p.name, link) for p in pages
               for link in re.findall(r"\]\(([^)#]+)\)", p.read_text())
               if not link.startswith("http") and not (p.parent / link).exists()]
    assert not missing


def test_the_python_it_shows_names_real_functions():
    for name in re.findall(r"\barbiter\.(\w+)\(", README):
        assert callable(getattr(arbiter, name)), name
    for name in re.findall(r"\breport\.(\w+)\(", README):
        assert callable(getattr(report, name)), name


def test_every_glossary_word_is_defined():
    glossary = README.split("## Glossary", 1)[1].split("\n## ", 1)[0]
    for word in ("lane", "region", "oracle", "budget", "tie", "runner-up", "spread",
                 "fingerprint", "finalist"):
        assert f"- **{word}**" in glossary, word
