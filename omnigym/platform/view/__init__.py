"""``omnigym view``: a local web app to replay recorded episodes, run or play envs live, and plot runs.

The server (:func:`omnigym.platform.view.app.create_app`, FastAPI) answers a small JSON API and
serves one static page (``static/``: plain HTML, JS and CSS, no build step and nothing fetched from
the network, so it works offline). ``docs/view.md`` describes the pages and the endpoints.
"""

from __future__ import annotations

from pathlib import Path

STATIC_DIR = Path(__file__).resolve().parent / "static"
"""The page's HTML, JS and CSS (package data)."""

__all__ = ["STATIC_DIR"]
