"""mkdocs hooks (mkdocs.yml `hooks:`): the site is docs/ plus a few files from the repository root.

README.md is the home page, RESULTS.md and CHANGELOG.md pages of their own, the lessons' index
and notebooks, LICENSE and CITATION.cff files to download. Their links are written for GitHub,
relative to where the file lies in the repository (README's `docs/results.md`, a note's
`../../RESULTS.md`); each relative link of every page is resolved in the repository and pointed at
the same file's place in the site. A link to a repository file the site does not hold is left as
written, so `mkdocs build --strict` fails on it like on any broken link.

The docstrings name other objects with Sphinx roles (:func:`synthlab.load_run`); in the API
pages a role becomes a cross-reference (a link where mkdocstrings documents the object, plain code
where not).
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

# repository path -> path in the site (docs/X is X)
PAGES = {
    "README.md": "index.md",
    "RESULTS.md": "reference-results.md",
    "CHANGELOG.md": "changelog.md",
    "notebooks/README.md": "notebooks/README.md",
}
DOWNLOADS = ["LICENSE", "CITATION.cff", "notebooks/*.ipynb"]

# [text](target) or [text](target "title"); target without a scheme or a leading #
_LINK = re.compile(r"\]\((?![a-zA-Z][a-zA-Z0-9+.-]*:|#)([^)\s]+)((?:\s+\"[^\"]*\")?)\)")


# :func:`x` as rendered: the role's text, then the code span
_ROLE = re.compile(r":(?:mod|func|class|meth|attr|data|exc):<code>~?([\w.]+?)(?:\(\))?</code>")


def _root(config: MkDocsConfig) -> Path:
    return Path(config.config_file_path).resolve().parent


def _site_of(repo_path: str) -> str | None:
    if repo_path in PAGES:
        return PAGES[repo_path]
    if repo_path.startswith("docs/"):
        return repo_path.removeprefix("docs/")
    if repo_path in _downloads:
        return repo_path
    return None


_downloads: set[str] = set()


def on_files(files: Files, config: MkDocsConfig) -> Files:
    root = _root(config)
    for repo_path, uri in PAGES.items():
        files.append(File.generated(config, uri, abs_src_path=str(root / repo_path)))
    for pattern in DOWNLOADS:
        for path in sorted(root.glob(pattern)):
            rel = path.relative_to(root).as_posix()
            _downloads.add(rel)
            files.append(File.generated(config, rel, abs_src_path=str(path)))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    root = _root(config)
    src = page.file.src_uri
    repo_page = next((repo for repo, uri in PAGES.items() if uri == src), f"docs/{src}")

    def relink(match: re.Match[str]) -> str:
        target, title = match.group(1), match.group(2)
        path, hash_, anchor = target.partition("#")
        repo_path = posixpath.normpath(posixpath.join(posixpath.dirname(repo_page), path))
        if (root / repo_path).is_dir() and (root / repo_path / "README.md").is_file():
            repo_path = f"{repo_path}/README.md"
        site = _site_of(repo_path)
        if site is None:
            return match.group(0)
        new = posixpath.relpath(site, posixpath.dirname(src) or ".")
        return f"]({new}{hash_}{anchor}{title})"

    return _LINK.sub(relink, markdown)


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    return _ROLE.sub(lambda m: f'<autoref identifier="{m[1]}" optional><code>{m[1]}</code></autoref>', html)
