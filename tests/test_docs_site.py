"""The docs site (mkdocs.yml over docs/) builds with --strict: a broken link, an anchor that is not there, a page left
out of the nav, or a README section a page includes (`--8<--`) that is gone fails the build."""

import os
import subprocess
import sys

from tests.conftest import ROOT


def test_the_docs_site_builds_strict_and_its_home_names_the_project(tmp_path):
    site = tmp_path / "site"
    build = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(site)]
    env = os.environ | {"NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's end-of-life banner: noise in a failure's log
    done = subprocess.run(build, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    home = (site / "index.html").read_text()
    assert "prime-rl launcher" in home
    assert "importance-weighted policy gradient" in home, "the README's `what` section did not reach the home page"
