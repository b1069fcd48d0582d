"""tinykube apiserver process."""
