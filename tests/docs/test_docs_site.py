"""The documentation site as a reader gets it: built from a fresh clone with the one documented command (warnings
are errors), every public name in its API reference, the gallery made by running the examples, no broken
internal link, and the landing page and a gallery page opened in headless Chromium with every image loaded.

Screenshots of the two pages are written to $PRERAST_DOCS_SCREENSHOTS when it is set (else the test's temp dir).
"""

import html.parser
import json
import os
import re
import shutil
import struct
import subprocess
import urllib.parse

import pytest

import fresh_clone

pytestmark = pytest.mark.slow  # builds the whole site from a fresh clone

BUILD = ["python", "-m", "sphinx", "-W", "-b", "html", "docs"]  # + the output folder: docs/_build/html in the guide
GALLERY = ["triangle", "cube", "pose", "textured_sphere", "envmap"]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    for module in ("sphinx", "furo", "myst_parser", "matplotlib"):
        pytest.importorskip(module, reason="the docs build needs pip install -r docs/requirements.txt")
    root = tmp_path_factory.mktemp("docs")
    clone = fresh_clone.clone(root / "prerast")
    out = root / "html"
    env = fresh_clone.fresh_env([fresh_clone.venv_bin(), "/usr/bin", "/bin"], MPLCONFIGDIR=root / "mpl")
    proc = subprocess.run(BUILD + [str(out)], cwd=clone, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"$ {' '.join(BUILD)} {out}\n{proc.stdout[-5000:]}\n{proc.stderr[-5000:]}"
    return out, proc.stdout + proc.stderr


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", head[16:24])


def test_site_builds_from_a_fresh_clone(site):
    out, log = site
    for page in [
        "index",
        "api",
        "installing",
        "devel-to-runtime",
        "compile-and-precompile",
        "building-wheels",
        "releasing",
        "conventions",
        "benchmarks",
        "migrating-from-nvdiffrast",
        "gallery/index",
    ]:
        assert (out / f"{page}.html").exists(), page
    assert "build succeeded" in log


def test_every_public_name_is_in_the_reference(site):
    import prerast

    api = read(site[0] / "api.html")
    missing = [name for name in prerast.__all__ if f'id="prerast.{name}"' not in api]
    assert not missing, f"not in the API reference: {missing}"


def test_gallery_pages_show_what_each_example_made(site):
    out, log = site
    for name in GALLERY:
        page = read(out / "gallery" / f"{name}.html")
        images = re.findall(r'<img[^>]+src="([^"]+)"', page)
        result = [src for src in images if src.endswith(f"/{name}.png")]
        assert result, f"{name}: no result image on its page ({images})"
        w, h = png_size(out / "gallery" / result[0])
        assert w >= h >= 48, (name, w, h)  # target and fit side by side, or the rendered triangle
        assert f"examples/{name}.py ran in" in log
        assert "def main(" in html.unescape(re.sub(r"<[^>]+>", "", page))  # the program itself is shown
        if name == "triangle":
            continue
        assert any(src.endswith(f"/{name}_loss.png") for src in images), f"{name}: no loss curve"
        first, last = map(float, re.search(r"The loss fell from ([\d.e+-]+) to ([\d.e+-]+)", page).groups())
        assert last < first / 2, f"{name}: loss {first} -> {last}"


class Links(html.parser.HTMLParser):
    """The ids and the internal links (href, src) of one HTML page."""

    def __init__(self):
        super().__init__()
        self.ids, self.links = set(), []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        for key in ("href", "src"):
            target = attrs.get(key)
            if target and not re.match(r"^[a-z][a-z0-9+.-]*:|^//", target, re.I):  # http:, mailto:, data:, ...
                self.links.append(target)


def broken_links(root):
    """Every internal link of the HTML files under root whose file or #fragment does not exist."""
    pages, broken = {}, []
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".html"):
                parser = Links()
                parser.feed(read(os.path.join(folder, name)))
                pages[os.path.normpath(os.path.join(folder, name))] = parser
    for page, parser in pages.items():
        for link in parser.links:
            parts = urllib.parse.urlsplit(link)  # a ?v=... cache-buster names the same file
            path, fragment = urllib.parse.unquote(parts.path), urllib.parse.unquote(parts.fragment)
            target = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if os.path.isdir(target):
                target = os.path.join(target, "index.html")
            if not os.path.exists(target):
                broken.append(f"{os.path.relpath(page, root)}: {link} (no such file)")
            elif fragment and target in pages and fragment not in pages[target].ids:
                broken.append(f"{os.path.relpath(page, root)}: {link} (no such anchor)")
    return broken, len(pages)


def test_no_internal_link_is_broken(site):
    broken, pages = broken_links(site[0])
    assert pages > 15
    assert not broken, "\n".join(broken)


def test_link_checker_finds_broken_links(tmp_path):
    (tmp_path / "a.html").write_text(
        '<p id="here"><a href="b.html#there">b</a><a href="#here">a</a>'
        '<img src="missing.png"><a href="https://example.org/x">x</a>'
        '<link href="b.html?v=1"></p>'
    )
    (tmp_path / "b.html").write_text('<p id="elsewhere"><a href="a.html#here">a</a></p>')
    broken, _ = broken_links(tmp_path)
    assert sorted(broken) == ["a.html: b.html#there (no such anchor)", "a.html: missing.png (no such file)"]


# --- in a browser ---------------------------------------------------------------------------------------------

CHECK = """<script>
window.addEventListener("load", function () {
  var seen = Array.prototype.map.call(document.images, function (img) {
    return [img.getAttribute("src"), img.complete, img.naturalWidth];
  });
  var out = document.createElement("pre");
  out.id = "prerast-image-check";
  out.textContent = JSON.stringify(seen);
  document.body.appendChild(out);
});
</script>"""


def chromium():
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium); .ci/run installs it")
    return found


def browse(browser, page, *flags):
    cmd = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        "--allow-file-access-from-files",
        "--virtual-time-budget=10000",
        *flags,
        page.as_uri(),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def images_loaded(browser, page):
    """[src, complete, naturalWidth] of every <img> of page once it has loaded, as Chromium reports them."""
    probe = page.with_name(page.stem + ".imagecheck.html")
    probe.write_text(read(page).replace("</body>", CHECK + "</body>"), encoding="utf-8")
    try:
        out = browse(browser, probe, "--dump-dom")
    finally:
        probe.unlink()
    found = re.search(r'<pre id="prerast-image-check">(.*?)</pre>', out.stdout, re.S)
    assert found, f"the check script did not run in {page}:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


def test_landing_and_gallery_pages_render_with_every_image(site, tmp_path):
    browser = chromium()
    shots = os.environ.get("PRERAST_DOCS_SCREENSHOTS") or str(tmp_path)
    os.makedirs(shots, exist_ok=True)
    for page, least in ((site[0] / "index.html", 1), (site[0] / "gallery" / "cube.html", 2)):
        seen = images_loaded(browser, page)
        in_source = len(re.findall(r"<img\b", read(page)))
        assert len(seen) == in_source >= least, (page, seen)
        assert all(complete and width > 0 for _, complete, width in seen), f"{page}: an image did not load: {seen}"
        shot = os.path.join(shots, page.stem + ".png")
        out = browse(chromium(), page, f"--screenshot={shot}", "--window-size=1280,1400")
        assert out.returncode == 0 and os.path.exists(shot), out.stderr[-2000:]
        assert png_size(shot) == (1280, 1400)
        assert os.path.getsize(shot) > 20000  # a page with text and pictures, not a blank one


def test_image_check_sees_a_missing_image(tmp_path):
    browser = chromium()
    shutil.copy(os.path.join(fresh_clone.ROOT, "docs", "_static", "prerast-render.png"), tmp_path / "ok.png")
    page = tmp_path / "page.html"
    page.write_text('<html><body><img src="ok.png"><img src="missing.png"></body></html>')
    seen = images_loaded(browser, page)
    assert [(src, width > 0) for src, _, width in seen] == [("ok.png", True), ("missing.png", False)]
