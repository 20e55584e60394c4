"""``python -m transformer_jax.ablation``: rewrite README's gallery from the committed FULL results."""

from transformer_jax.ablation.results import update_readme_gallery

print("README gallery", "updated" if update_readme_gallery() else "already up to date")
