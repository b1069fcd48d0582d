"""Authorization: request attributes, the Node and RBAC authorizers, their chain, NodeRestriction
admission, the bootstrap policy and SelfSubjectAccessReview (see authorizer.py)."""
