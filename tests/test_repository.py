"""The repository stands on its own: the README links only inside it, the contract and fixtures
the tests read are in it, and `.ci/run` runs exactly the README's test command on a fresh clone."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import FIXTURES, SPEC_DIR

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_readme_links_stay_inside_the_repository():
    for target in _LINK.findall(README):
        if re.match(r"[a-z]+://", target) or target.startswith("#"):
            continue
        path = (ROOT / target.split("#")[0]).resolve()
        assert path.is_relative_to(ROOT), f"README links outside the repository: {target}"
        assert path.exists(), f"README links to a missing path: {target}"


def test_the_contract_and_fixtures_live_in_the_repository():
    for folder in (SPEC_DIR, FIXTURES):
        assert folder.resolve().is_relative_to(ROOT)
        assert (folder / "README.md").exists() or (folder.parent / "README.md").exists()
    assert (SPEC_DIR / "fireworks-openapi.yaml").is_file()
    assert len(list(FIXTURES.glob("*.jinja"))) >= 50


def test_ci_runs_the_readme_test_command_on_a_clean_clone():
    blocks = re.findall(r"```sh\n(.*?)```", README, re.DOTALL)
    test_command = next(line for block in blocks for line in block.splitlines() if "pytest" in line)
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "set -euo pipefail" in script
    assert "git clone" in script and "mktemp -d" in script
    assert script.rstrip().splitlines()[-1] == test_command
