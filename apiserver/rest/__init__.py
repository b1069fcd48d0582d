"""Kubernetes' REST API over the apiserver's registry: the second front end beside gRPC.

Each module is one concern (routing, discovery, OpenAPI, patches, server-side printing); none
holds resource semantics, which live once in the registry shared with the gRPC services.
"""
