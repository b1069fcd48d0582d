"""Custom resources: CRDs, their schemas and CEL rules."""
