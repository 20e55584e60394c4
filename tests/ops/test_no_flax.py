"""``transformer_jax.ops`` is importable without Flax (it is meant for reuse in any JAX project)."""

import subprocess
import sys

CODE = """
import sys
import transformer_jax.ops
from transformer_jax.ops import attention, masks, rope, positions, norms, residual, losses, activations
from transformer_jax.ops import chunked_attention, linear_attention, kv_cache, dropout
heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('flax', 'optax', 'orbax', 'tensorflow_datasets', 'grain'))
print(heavy)
assert not heavy, heavy
"""


def test_importing_ops_does_not_import_flax():
    proc = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "[]"
