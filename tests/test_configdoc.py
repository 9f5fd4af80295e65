"""docs/configuration.md lists every setting of GpuQueueApp as the code declares it."""

from pathlib import Path

from jupyter_gpuqueue.server.app import GpuQueueApp
from jupyter_gpuqueue.server.configdoc import render

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def test_configuration_doc_is_in_sync():
    assert DOC.read_text(encoding="utf-8") == render(), (
        "docs/configuration.md differs from the settings' help: run "
        "`python -m jupyter_gpuqueue.server.configdoc > docs/configuration.md`"
    )


def test_every_setting_has_its_section_and_help():
    text = render()
    for name, trait in GpuQueueApp.class_own_traits(config=True).items():
        assert f"\n## `{name}`\n" in text
        assert trait.help, f"GpuQueueApp.{name} has no help"
