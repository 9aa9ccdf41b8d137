"""Chromium for the browser tests (Debian's package, driven by Playwright) and a page that may
reach localhost only."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest


def chromium() -> str:
    path = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("Chromium is missing under CI: .ci/setup installs Debian's chromium package")
        pytest.skip("no Chromium on this machine (Debian: apt-get install chromium); the browser test needs it")
    return path


class OfflineBrowser:
    """A Chromium page that may reach localhost only (``local=False``: not even that); ``outside``
    lists what it tried to fetch elsewhere."""

    def __init__(self, local: bool = True) -> None:
        self.local = local

    def __enter__(self) -> "OfflineBrowser":
        from playwright.sync_api import sync_playwright

        self._pw = sync_playwright().start()
        self.browser = self._pw.chromium.launch(executable_path=chromium(), args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1"])
        self.context = self.browser.new_context(viewport={"width": 1400, "height": 1800})
        self.outside: list[str] = []

        def gate(route) -> None:
            url = route.request.url
            local = self.local and urlparse(url).hostname in ("127.0.0.1", "localhost")
            if url.startswith(("data:", "blob:", "file:")) or local:
                route.continue_()
            else:
                self.outside.append(url)
                route.abort()

        self.context.route("**/*", gate)
        return self

    def page(self):
        return self.context.new_page()

    def __exit__(self, *exc) -> None:
        self.browser.close()
        self._pw.stop()


def wait_http(url: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"{url} did not answer within {seconds:.0f} s"
        time.sleep(0.3)


