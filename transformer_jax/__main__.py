import sys

from transformer_jax.cli import main

sys.exit(main())
