"""``python -m transformer_jax.ablation``: rewrite the gallery of docs/notebooks.md from the committed
FULL results."""

from transformer_jax.ablation.results import GALLERY_PAGE, update_gallery

print(GALLERY_PAGE, "gallery", "updated" if update_gallery() else "already up to date")
