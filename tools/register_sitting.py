"""Records, before a sitting of a redo in progress (`ablation.paths.PENDING_RERUN`), the claims the
notebook registers now in ``experiments/results/<notebook>/registered.json``: written at the first
sitting, updated at each later one, refused (exit 2, an error naming the claim) when a claim
registered earlier is gone or its criterion changed without a new ``ablation.Revision`` in its
history (`ablation.registration.drift`).

    PYTHONPATH=. python tools/register_sitting.py <notebook>
"""

import sys

from transformer_jax.ablation import registration
from transformer_jax.ablation.notebook_cells import notebook_claims
from transformer_jax.ablation.paths import PENDING_RERUN


def refuse(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


if len(sys.argv) != 2:
    refuse(f"give one notebook name\n{__doc__}")
notebook = sys.argv[1]
if notebook not in PENDING_RERUN:
    refuse(f"{notebook} is not in ablation.paths.PENDING_RERUN: add it (with why) before its redo's first sitting")
try:
    path = registration.write_snapshot(notebook, notebook_claims(notebook))
except ValueError as e:
    refuse(str(e))
else:
    print(f"{path}: claims registered {registration.read_snapshot(notebook)['registered']}, commit it with the sitting")
