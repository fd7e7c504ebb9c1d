"""The Ray cluster launcher configs load exactly as ``ray up`` loads them and pass Ray's own validator."""

from __future__ import annotations

from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")
util = pytest.importorskip("ray.autoscaler._private.util")

ROOT = Path(__file__).resolve().parents[2]


def load_like_ray_up(path: Path) -> dict:
    """What ``ray up`` does before touching a provider: one ``yaml.safe_load``, prepare, validate."""
    config = yaml.safe_load(open(path).read())  # ray.autoscaler._private.commands.create_or_update_cluster
    config = util.prepare_config(config)  # commands._bootstrap_config
    util.validate_config(config)
    return config


@pytest.mark.parametrize("name, provider", [("cluster.yaml", "aws"), ("cluster-onprem.yaml", "local")])
def test_cluster_config_is_valid_for_ray_up(name, provider) -> None:
    config = load_like_ray_up(ROOT / name)
    assert config["provider"]["type"] == provider
    assert config["head_node_type"] in config["available_node_types"]
    # every node gets eidetica and the offline model (without its torch dependency)
    setup = "\n".join(config["setup_commands"])
    assert "eidetica" in setup and "--no-deps" in setup


def test_a_two_document_file_is_refused_as_ray_up_refuses_it(tmp_path) -> None:
    """The loader above is as strict as ``ray up``: the old two-document file fails it."""
    two = tmp_path / "two.yaml"
    two.write_text((ROOT / "cluster.yaml").read_text() + "\n---\n" + (ROOT / "cluster-onprem.yaml").read_text())
    with pytest.raises(yaml.composer.ComposerError, match="single document"):
        load_like_ray_up(two)
