"""A real JupyterLab server on a loopback port and Debian's Chromium driven by Playwright."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from shared_data import require

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-sync",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
]


def chromium_path() -> str:
    path = os.environ.get("BWD_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    require(Path(path).exists(), f"Chromium is not installed at {path}: apt-get install chromium")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    executable = chromium_path()
    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield instance
        instance.close()


def _serve(kind: str, tmp_path_factory):
    """`jupyter lab` or `jupyter notebook` (Notebook 7) with an empty token, news and update checks
    off, the app exposed to tests as window.jupyterapp; yields (url, root folder)."""
    static = ROOT / "bwd_widgets" / "static" / "widget.js"
    require(static.exists(), f"{static} is missing: run `npm run build` first")
    root = tmp_path_factory.mktemp(kind)
    config = tmp_path_factory.mktemp(f"{kind}-config")
    (config / "labconfig").mkdir()
    (config / "labconfig" / "page_config.json").write_text(
        json.dumps(
            {
                "exposeAppInBrowser": True,
                "disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True},
            }
        )
    )
    port = _free_port()
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(config), PYTHONUNBUFFERED="1")
    settings = config / "settings"  # JupyterLab's and Notebook 7's user settings, this server only
    env["JUPYTERLAB_SETTINGS_DIR"] = str(settings)
    # every cell laid out, not only those on screen: the tests measure widgets anywhere in the notebook
    tracker = settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True)
    tracker.write_text(json.dumps({"windowingMode": "none"}))
    log = open(root / f"{kind}.log", "w")
    options = ["--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"] if kind == "lab" else []
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter",
            kind,
            "--no-browser",
            f"--port={port}",
            "--ip=127.0.0.1",
            "--allow-root",
            "--ServerApp.token=",
            "--ServerApp.password=",
            "--ServerApp.disable_check_xsrf=True",
            f"--ServerApp.root_dir={root}",
            *options,
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"{url}/api/status", timeout=2)
            break
        except OSError:
            if process.poll() is not None:
                raise RuntimeError((root / f"{kind}.log").read_text()) from None
            time.sleep(0.5)
    else:
        process.kill()
        raise RuntimeError(f"jupyter {kind} did not start in 90 s: " + (root / f"{kind}.log").read_text()[-2000:])
    yield url, root
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
    log.close()


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    """A JupyterLab server."""
    yield from _serve("lab", tmp_path_factory)


@pytest.fixture(scope="session")
def notebook7(tmp_path_factory):
    """A Notebook 7 server (the `notebook` package)."""
    yield from _serve("notebook", tmp_path_factory)


@pytest.fixture(scope="module", params=["jupyterlab", "notebook7"])
def frontend(request):
    """The module's tests in JupyterLab, then in Notebook 7 (jupyter_page.Frontend)."""
    from jupyter_page import Frontend

    url, root = request.getfixturevalue("lab" if request.param == "jupyterlab" else "notebook7")
    return Frontend(request.param, url, root)
