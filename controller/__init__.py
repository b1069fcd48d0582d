"""tinykube controller process."""
