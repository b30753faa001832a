"""The pre-parsed copy of the coefficient file (``configs/defaults.json``) cannot drift
from ``configs/defaults.yaml``, and a copy that no longer matches its YAML is ignored."""

from __future__ import annotations

import json
import shutil

import yaml

from blis_fast.config.coefficients import (
    coefficients_file,
    find_coefficients,
    load_document,
    parsed_copy_path,
    parsed_copy_text,
    write_parsed_copy,
)


def test_shipped_copy_is_current():
    yml = coefficients_file()
    copy = parsed_copy_path(yml)
    assert copy.read_text(encoding="utf-8") == parsed_copy_text(yml), (
        f"{copy} is stale; regenerate it: {json.loads(copy.read_text())['generated_by']}")


def test_copy_equals_the_pure_python_yaml_parse():
    yml = coefficients_file()
    doc = json.loads(parsed_copy_path(yml).read_text(encoding="utf-8"))["document"]
    assert doc == yaml.safe_load(yml.read_text(encoding="utf-8"))
    assert load_document() == doc


def test_stale_copy_is_ignored(tmp_path):
    yml = tmp_path / "defaults.yaml"
    shutil.copy(coefficients_file(), yml)
    write_parsed_copy(yml)
    assert find_coefficients("meta-llama/llama-3.1-8b-instruct", "H100", 1, path=yml).total_kv_blocks == 29205
    # edit the YAML after the copy was made: the YAML wins
    doc = yaml.safe_load(yml.read_text(encoding="utf-8"))
    for entry in doc["models"]:
        entry["total_kv_blocks"] = 12345
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(doc), encoding="utf-8")
    shutil.copy(parsed_copy_path(yml), parsed_copy_path(edited))  # a copy made from another YAML
    assert find_coefficients("meta-llama/llama-3.1-8b-instruct", "H100", 1, path=edited).total_kv_blocks == 12345


def test_garbage_copy_is_ignored(tmp_path):
    yml = tmp_path / "c.yaml"
    yml.write_text("models: []\ndefaults: {org/m: {GPU: H100, tensor_parallelism: 1}}\n")
    parsed_copy_path(yml).write_text("{not json")
    assert load_document(str(yml))["defaults"]["org/m"]["GPU"] == "H100"
