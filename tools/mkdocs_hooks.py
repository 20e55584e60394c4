"""mkdocs hook (mkdocs.yml ``hooks:``): the figures of ``experiments/results/`` on the site.

The pages link the committed result figures as ``../experiments/results/<notebook>/<name>.png``,
which also works when the page is read on the repository. Those files lie outside ``docs/``, so
each is added to the build under that same relative path (its key for link checking) and copied
to ``experiments/results/...`` in the site. A link to a figure that does not exist still fails the
strict build (not found among the documentation files).
"""

from __future__ import annotations

import pathlib

from mkdocs.structure.files import File, Files, InclusionLevel


def on_files(files: Files, config) -> Files:
    docs = pathlib.Path(config["docs_dir"])
    results = docs.parent / "experiments" / "results"
    for png in sorted(results.glob("*/*.png")):
        rel = png.relative_to(docs.parent).as_posix()
        files.append(
            File(
                f"../{rel}",
                str(docs),
                config["site_dir"],
                config["use_directory_urls"],
                dest_uri=rel,
                # set here: the default exclusion of dot-paths (`.*`) would drop a `../` path
                inclusion=InclusionLevel.INCLUDED,
            )
        )
    return files
