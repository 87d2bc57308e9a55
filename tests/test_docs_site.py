"""The docs site (mkdocs.yml over docs/) builds with --strict: a broken link, an anchor that is not there, a page left
out of the nav, or a README section a page includes (`--8<--`) that is gone fails the build. Its home page then
opens in a real headless browser (Debian's chromium) with its title and every section of the navigation."""

import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from mkdocs.config import load_config

from tests.conftest import ROOT

pytestmark = pytest.mark.integration  # mkdocs and chromium run as processes


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("site")
    build = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(site)]
    env = os.environ | {"NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's end-of-life banner: noise in a failure's log
    done = subprocess.run(build, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return site


def test_the_docs_site_builds_strict_and_its_home_holds_the_readmes_summary(site):
    home = (site / "index.html").read_text()
    assert "importance-weighted policy gradient" in home, "the README's `what` section did not reach the home page"


def test_the_home_page_opens_in_a_headless_browser_with_its_title_and_navigation(site, tmp_path):
    browser = shutil.which("chromium")
    if browser is None:
        pytest.skip("no chromium on PATH (apt-get install chromium): the browser check needs a real browser")
    shown = subprocess.run(
        # --dump-dom: the page as the browser holds it once its scripts ran; its own profile dir, no sandbox (root)
        [browser, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}"]
        + ["--dump-dom", (site / "index.html").as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr[-3000:]
    page = Page()
    page.feed(shown.stdout)
    config = load_config(str(ROOT / "mkdocs.yml"))
    assert page.title.startswith(config["site_name"]), page.title
    assert [label for label in nav_labels(config["nav"]) if label not in page.nav_labels] == [], page.nav_labels


def nav_labels(nav: list) -> list[str]:
    """Every section's and page's label in mkdocs.yml's nav (entries are `label: page` or `label: [entries]`)."""
    labels = []
    for entry in nav:
        for label, target in entry.items():
            labels += [label, *(nav_labels(target) if isinstance(target, list) else [])]
    return labels


class Page(HTMLParser):
    """The page's <title>, and the labels of its navigation (Material puts each in a span.md-ellipsis)."""

    def __init__(self):
        super().__init__()
        self.title, self.nav_labels, self._inside = "", set(), None

    def handle_starttag(self, tag, attrs):
        if tag == "title" or (tag == "span" and "md-ellipsis" in (dict(attrs).get("class") or "").split()):
            self._inside = tag

    def handle_endtag(self, tag):
        if tag == self._inside:
            self._inside = None

    def handle_data(self, data):
        if self._inside == "title":
            self.title += data.strip()
        elif self._inside and data.strip():
            self.nav_labels.add(data.strip())
