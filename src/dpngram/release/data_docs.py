"""Great Expectations Data Docs that work with no network.

GX 1.x writes Data Docs pages that load Bootstrap, jQuery, popper.js, bootstrap-table,
bootstrap-datepicker, Font Awesome, bootstrap-dark and Vega from public CDNs, and its logo from a
web bucket: opened offline, the index lists nothing (its table is drawn by bootstrap-table) and the
pages are unstyled. :func:`make_offline` copies the same libraries, shipped with dpngram
(``data_docs_assets/``, with their licences and NOTICE.md), into the docs' ``static/vendor/`` and
points every page at them with relative links, so a release's Data Docs open from the file system,
on a machine without internet, or after being copied elsewhere.

Owns: :data:`CDN_ASSETS` (CDN URL -> shipped file) and :func:`make_offline`.
Imports: the standard library only.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

#: The shipped assets (a package data folder).
ASSETS = Path(__file__).resolve().parent / "data_docs_assets"

#: Where the assets go inside a Data Docs site.
VENDOR_DIR = "static/vendor"

_CDNJS = "https://cdnjs.cloudflare.com/ajax/libs"
_TABLE = "https://unpkg.com/bootstrap-table@{}/dist"
_FILTER = "extensions/filter-control/bootstrap-table-filter-control"

#: Every CDN URL the GX 1.x page templates use -> the shipped file (relative to :data:`ASSETS`).
CDN_ASSETS: dict[str, str] = {
    "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css": "bootstrap/bootstrap.min.css",
    "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js": "bootstrap/bootstrap.min.js",
    "https://code.jquery.com/jquery-3.7.1.min.js": "jquery/jquery.min.js",
    f"{_CDNJS}/popper.js/1.12.9/umd/popper.min.js": "popper.js/popper.min.js",
    f"{_TABLE.format('1.19.1')}/bootstrap-table.min.css": "bootstrap-table/bootstrap-table.min.css",
    f"{_TABLE.format('1.19.1')}/bootstrap-table.min.js": "bootstrap-table/bootstrap-table.min.js",
    f"{_TABLE.format('1.19.1')}/{_FILTER}.min.js": "bootstrap-table/bootstrap-table-filter-control.min.js",
    f"{_TABLE.format('1.19.0')}/{_FILTER}.css": "bootstrap-table/bootstrap-table-filter-control.min.css",
    f"{_TABLE.format('1.19.0')}/{_FILTER}.min.css": "bootstrap-table/bootstrap-table-filter-control.min.css",
    f"{_CDNJS}/bootstrap-datepicker/1.9.0/css/bootstrap-datepicker.min.css": (
        "bootstrap-datepicker/bootstrap-datepicker.min.css"
    ),
    f"{_CDNJS}/bootstrap-datepicker/1.9.0/js/bootstrap-datepicker.min.js": (
        "bootstrap-datepicker/bootstrap-datepicker.min.js"
    ),
    f"{_CDNJS}/font-awesome/6.6.0/css/all.min.css": "fontawesome/css/all.min.css",
    "https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/bootstrap-prefers-dark.css": (
        "bootstrap-dark/bootstrap-prefers-dark.min.css"
    ),
    "https://cdn.jsdelivr.net/npm/vega@5": "vega/vega.min.js",
    "https://cdn.jsdelivr.net/npm/vega-lite@5": "vega-lite/vega-lite.min.js",
    "https://cdn.jsdelivr.net/npm/vega-embed@6": "vega-embed/vega-embed.min.js",
}

#: GX's logo on its web bucket (with a cache-busting query) -> the copy GX ships in static/images.
_LOGO = re.compile(
    r"https://great-expectations-web-assets\.s3\.[a-z0-9-]+\.amazonaws\.com/logo-long\.png(\?[^\"']*)?"
)
_LOCAL_LOGO = "static/images/logo-long.png"

#: A resource a page loads (script src / link href) from anywhere but this site.
_REMOTE_RESOURCE = re.compile(r"""<(?:script|link)\b[^>]*?\b(?:src|href)=["'](https?://[^"']+)["']""", re.I)


#: A script or link tag (attributes included).
_TAG = re.compile(r"<(?:script|link)\b[^>]*>", re.I)
_INTEGRITY = re.compile(r"""\s+integrity=["']([^"']+)["']""", re.I)
_CROSSORIGIN = re.compile(r"""\s+crossorigin=["'][^"']*["']""", re.I)


def _sri(path: Path, algorithm: str) -> str:
    return base64.b64encode(hashlib.new(algorithm, path.read_bytes()).digest()).decode()


def _localize(tag: str, local: Callable[[str], str]) -> str:
    """Point one script/link tag at the shipped copy of its CDN file. A Subresource Integrity hash
    on the tag must match the shipped file (checked here: the copy is the very file GX pins); the
    hash and ``crossorigin`` are then dropped, since a browser refuses CORS requests for file://
    pages and the pages are opened from the file system."""
    for url, relative in CDN_ASSETS.items():
        if f'"{url}"' not in tag:
            continue
        found = _INTEGRITY.search(tag)
        if found:
            algorithm, _, expected = found.group(1).partition("-")
            if _sri(ASSETS / relative, algorithm) != expected:
                raise ValueError(
                    f"shipped Data Docs asset {relative} does not match the integrity hash of {url}"
                )
        tag = _CROSSORIGIN.sub("", _INTEGRITY.sub("", tag))
        return tag.replace(f'"{url}"', f'"{local(f"{VENDOR_DIR}/{relative}")}"')
    return tag


def remote_resources(html: str) -> list[str]:
    """URLs of scripts and stylesheets a page loads from the network (hyperlinks do not count)."""
    return _REMOTE_RESOURCE.findall(html)


def make_offline(site: Path) -> list[str]:
    """Copy the shipped assets into ``site/static/vendor`` and rewrite every ``*.html`` under
    ``site`` to load them (and GX's logo) by relative paths. Returns the URLs that were left
    remote because dpngram ships no copy (expected: none; the caller may log them)."""
    vendor = site / VENDOR_DIR
    if vendor.exists():
        shutil.rmtree(vendor)
    shutil.copytree(ASSETS, vendor)
    left: set[str] = set()
    for page in site.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        to_root = os.path.relpath(site, page.parent).replace(os.sep, "/")

        def local(relative: str, root: str = to_root) -> str:
            return relative if root == "." else f"{root}/{relative}"

        html = _TAG.sub(lambda tag: _localize(tag.group(0), local), html)
        html = _LOGO.sub(local(_LOCAL_LOGO), html)
        left.update(remote_resources(html))
        page.write_text(html, encoding="utf-8")
    return sorted(left)
