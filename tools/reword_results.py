"""Copies each notebook's current claim wording (`ablation.claims.WORDING`: ``says`` and the notes'
``lines``) into the claims its committed results.json stores, and rewrites the gallery. Wording
changes no criterion (`ablation.criterion_spec`), so no rerun is needed; criteria and numbers are
left as they were.

    PYTHONPATH=. python tools/reword_results.py [notebook ...]   (default: every notebook)
"""

import json
import sys

from transformer_jax import ablation
from transformer_jax.ablation.claims import reword
from transformer_jax.ablation.notebook_cells import notebook_claims, notebooks_dir
from transformer_jax.ablation.results import update_gallery

NOTEBOOKS = notebooks_dir()
for path in sorted((NOTEBOOKS.parent / "experiments" / "results").glob("*/results.json")):
    notebook = path.parent.name
    if not (NOTEBOOKS / f"{notebook}.py").is_file() or (sys.argv[1:] and notebook not in sys.argv[1:]):
        continue
    record = json.loads(path.read_text())
    try:
        claims = notebook_claims(notebook)
    except ValueError as e:  # no (or two) cells registering its claims
        print(f"{notebook}: left as it was: {e}", file=sys.stderr)
        continue
    try:
        new = json.loads(json.dumps(reword(record, claims)))
    except (TypeError, ValueError, KeyError) as e:  # a stored spec the current Claim cannot be built from
        print(f"{notebook}: left as it was: a stored claim cannot be read back ({e})", file=sys.stderr)
        continue
    if new != record:
        path.write_text(json.dumps(new, indent=1) + "\n")
        print(f"{notebook}: wording updated")
print(ablation.results.GALLERY_PAGE, "gallery", "updated" if update_gallery() else "already up to date")
