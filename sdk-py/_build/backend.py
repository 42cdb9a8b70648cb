"""A stdlib-only PEP 517 / PEP 660 build backend for the BAP Python SDK.

Why not setuptools: with ``--no-build-isolation`` pip builds with whatever the interpreter has,
and setuptools < 70.1 (Debian's 66, pyenv's 65) cannot build a wheel without the separate
``wheel`` package, which is often missing and cannot be fetched offline. This backend needs
nothing but Python >= 3.11 (tomllib), so ``pip install ./sdk-py`` works offline with or without
build isolation. It packs the ``bap`` package and the metadata of ``pyproject.toml``; builds are
reproducible (fixed timestamps, sorted entries).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "bap"
_EPOCH = (1980, 1, 1, 0, 0, 0)


def _project() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def _dist_name() -> str:
    return _project()["name"].replace("-", "_")


def _metadata() -> str:
    p = _project()
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {p['name']}",
        f"Version: {p['version']}",
    ]
    if "description" in p:
        lines.append(f"Summary: {p['description']}")
    if "requires-python" in p:
        lines.append(f"Requires-Python: {p['requires-python']}")
    for c in p.get("classifiers", []):
        lines.append(f"Classifier: {c}")
    text = "\n".join(lines) + "\n"
    readme = p.get("readme")
    if readme and (ROOT / readme).exists():
        text += "Description-Content-Type: text/markdown\n\n" + (ROOT / readme).read_text("utf-8")
    return text


def _wheel_file() -> str:
    return "Wheel-Version: 1.0\nGenerator: bap-sdk-py _build/backend.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _package_files() -> list[tuple[str, bytes]]:
    out = []
    for path in sorted((ROOT / PACKAGE).rglob("*")):
        if path.is_dir() or "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo"):
            continue
        out.append((path.relative_to(ROOT).as_posix(), path.read_bytes()))
    return out


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def _write_wheel(wheel_directory: str, files: list[tuple[str, bytes]]) -> str:
    p = _project()
    name = f"{_dist_name()}-{p['version']}-py3-none-any.whl"
    info = f"{_dist_name()}-{p['version']}.dist-info"
    files = files + [
        (f"{info}/METADATA", _metadata().encode()),
        (f"{info}/WHEEL", _wheel_file().encode()),
    ]
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in files)
    record += f"{info}/RECORD,,\n"
    files.append((f"{info}/RECORD", record.encode()))
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in files:
            zi = zipfile.ZipInfo(path, _EPOCH)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, data)
    return name


# PEP 517 hooks ---------------------------------------------------------------------------


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    p = _project()
    info = f"{_dist_name()}-{p['version']}.dist-info"
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    with open(os.path.join(metadata_directory, info, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    with open(os.path.join(metadata_directory, info, "WHEEL"), "w", encoding="utf-8") as f:
        f.write(_wheel_file())
    return info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, _package_files())


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # PEP 660: a .pth file that puts the source tree on sys.path.
    pth = (str(ROOT) + "\n").encode()
    return _write_wheel(wheel_directory, [(f"__editable__.{_dist_name()}.pth", pth)])


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    base = f"{_dist_name()}-{p['version']}"
    name = base + ".tar.gz"
    members = ["pyproject.toml", "README.md", "_build/backend.py"] + [path for path, _ in _package_files()]
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as tf:
        for rel in members + ["PKG-INFO"]:
            data = _metadata().encode() if rel == "PKG-INFO" else (ROOT / rel).read_bytes()
            ti = tarfile.TarInfo(f"{base}/{rel}")
            ti.size, ti.mtime, ti.mode = len(data), 315532800, 0o644
            tf.addfile(ti, io.BytesIO(data))
    return name
