"""The files of a prepared data directory checked against what its manifest records: the manifest sealed with the
SHA-256 of its own content, the tokenizer, the training token store and its document offsets against their
SHA-256s. A mismatch is one `damaged` error naming the file and how to prepare the directory again."""

from __future__ import annotations

from pathlib import Path

from gatedv_stats.core.integrity import check_file_sha256, check_seal

MANIFEST_SEAL = "content_sha256"  # the manifest's own content, canonical JSON without this key
PREPARE_AGAIN = ("prepare the directory again: gatedv prepare CORPUS --out {directory} (a damaged directory is "
                 "prepared again, not reused)")


def check_manifest(manifest: dict, path: Path) -> dict:
    """A manifest (read from `path`) whose seal, when it has one, is the SHA-256 of the rest of it; returned
    without the seal."""
    check_seal(manifest, MANIFEST_SEAL, path, PREPARE_AGAIN.format(directory=path.parent))
    return {key: value for key, value in manifest.items() if key != MANIFEST_SEAL}


def check_recorded_file(directory: Path, manifest_path: Path, name: str, sha256: str | None) -> None:
    """`directory/name` is the file the manifest records (`sha256`; None: recorded by no older manifest)."""
    check_file_sha256(directory / name, [sha256], manifest_path, PREPARE_AGAIN.format(directory=directory))


def format_problem(manifest_path: Path, found: object, data_format: str) -> str:
    """Why a manifest is not this gatedv's data format: an older or newer gatedv-data-N, or no data manifest."""
    prefix = data_format.rsplit("-", 1)[0] + "-"
    version = str(found).removeprefix(prefix)
    if isinstance(found, str) and found.startswith(prefix) and version.isdigit():
        if int(version) < int(data_format.removeprefix(prefix)):
            return f"{manifest_path.parent}: prepared by an older gatedv ({found}); run gatedv prepare --force"
        return f"{manifest_path.parent}: prepared by a newer gatedv ({found}); upgrade gatedv-stats"
    return f"{manifest_path}: not a {data_format} manifest"
