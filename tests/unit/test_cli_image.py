"""`tinykube image build` (tinykube/cli/image.py): references, and the OCI archive it writes."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest

from tinykube.cli.common import CLIError
from tinykube.cli.image import split_reference
from tinykube.containerd import BUSYBOX, oci_blobs


@pytest.mark.parametrize(
    ("ref", "parts"),
    [
        ("127.0.0.1:5000/web:1", ("127.0.0.1:5000", "web", "1")),
        ("localhost/team/web", ("localhost", "team/web", "latest")),
        ("registry.example:5000/a/b:v2", ("registry.example:5000", "a/b", "v2")),
    ],
)
def test_split_reference(ref: str, parts: tuple[str, str, str]) -> None:
    assert split_reference(ref) == parts


def test_a_reference_without_a_registry_is_refused() -> None:
    with pytest.raises(CLIError, match="needs a registry host"):
        split_reference("web:1")


@pytest.mark.skipif(not Path(BUSYBOX).exists(), reason="needs busybox-static")
def test_the_context_is_a_second_layer_at_the_workdir(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("hi")
    manifest, blobs = oci_blobs(["/bin/sh"], context=tmp_path, workdir="/app")
    layers = json.loads(manifest)["layers"]
    assert len(layers) == 2
    data = gzip.decompress(blobs[layers[1]["digest"]])
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert sorted(tar.getnames()) == ["app", "app/index.html"]
    # Built twice, the same files give the same digests.
    assert oci_blobs(["/bin/sh"], context=tmp_path, workdir="/app")[0] == manifest
