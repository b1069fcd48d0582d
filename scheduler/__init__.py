"""tinykube scheduler process."""
