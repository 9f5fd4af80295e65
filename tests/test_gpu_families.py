"""GPU families (issue 32): discovered GPUs are named and priced by family, from NVML product names
and GPU Feature Discovery's ``nvidia.com/gpu.product`` labels alike; the README's price table is
the code's; a flavor without a price is named to the admin (log, Admin → Prices).

NVML is the stand-in of tests/test_inventory.py (pynvml's shapes and errors); the discovery, the
generated configuration, the prices and the service are the real ones.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from test_inventory import FakeNvml

from jupyter_gpuqueue.admin import prices_view
from jupyter_gpuqueue.gpu_families import GPU_FAMILIES, family_of, flavor_for_product
from jupyter_gpuqueue.inventory.default_config import config_for_inventory
from jupyter_gpuqueue.inventory.nvml import discover
from jupyter_gpuqueue.ledger import DEFAULT_PRICES, Prices

ROOT = Path(__file__).resolve().parent.parent

# Every product the issue lists, as NVML names it (nvmlDeviceGetName) with its memory (MiB, what
# nvmlDeviceGetMemoryInfo's total gives), and the family flavor and price expected (written here by
# hand, not read from the table under test).
PRODUCTS = [
    ("NVIDIA H100 80GB HBM3", 81559, "nvidia-h100", 3.75),
    ("NVIDIA H100 PCIe", 81559, "nvidia-h100", 3.75),
    ("NVIDIA H100 NVL", 95830, "nvidia-h100", 3.75),
    ("NVIDIA H200", 143771, "nvidia-h200", 4.50),
    ("NVIDIA GH200 480GB", 97871, "nvidia-gh200", 4.50),
    ("NVIDIA A100-SXM4-80GB", 81920, "nvidia-a100-80gb", 2.21),
    ("NVIDIA A100-SXM4-40GB", 40960, "nvidia-a100-40gb", 1.65),
    ("NVIDIA A100 80GB PCIe", 81920, "nvidia-a100-80gb", 2.21),
    ("NVIDIA A100-PCIE-40GB", 40960, "nvidia-a100-40gb", 1.65),
    ("NVIDIA L40S", 46068, "nvidia-l40s", 1.60),
    ("NVIDIA L40", 46068, "nvidia-l40", 1.40),
    ("NVIDIA L4", 23034, "nvidia-l4", 0.81),
    ("NVIDIA A10G", 23028, "nvidia-a10g", 1.01),
    ("NVIDIA A10", 23028, "nvidia-a10", 0.75),
    ("Tesla T4", 15360, "nvidia-t4", 0.35),
    ("Tesla V100-SXM2-32GB", 32768, "nvidia-v100-32gb", 1.20),
    ("NVIDIA RTX A6000", 49140, "nvidia-rtx-a6000", 0.80),
    ("NVIDIA RTX 6000 Ada Generation", 49140, "nvidia-rtx-6000-ada", 1.20),
    ("NVIDIA GeForce RTX 4090", 24564, "nvidia-rtx-4090", 0.60),
    ("NVIDIA B200", 183359, "nvidia-b200", 6.00),
]


@pytest.mark.parametrize("product,mib,flavor,price", PRODUCTS, ids=[p[0] for p in PRODUCTS])
def test_every_listed_product_is_named_and_priced_by_its_family(product, mib, flavor, price, monkeypatch):
    # The family from NVML's name, from GFD's label (spaces → '-'), with time-slicing's "-SHARED"
    # and the single MIG strategy's "-MIG-1g.10gb" suffixes, and from an older driver's name
    # without the vendor prefix.
    label = product.replace(" ", "-")
    bare = re.sub(r"^(NVIDIA|Tesla) ", "", product)
    for name in (product, label, label + "-SHARED", label + "-MIG-1g.10gb", bare):
        assert family_of(name, mib).flavor == flavor, name
    # Discovered through NVML: the generated ResourceFlavor is the family's, and it is priced.
    monkeypatch.setattr("socket.gethostname", lambda: "ws")
    inv = discover(FakeNvml(gpus=[{"uuid": "GPU-1", "name": product, "mib": mib, "mig": "unsupported"}]))
    cfg = config_for_inventory(inv)
    assert list(cfg.resource_flavors) == [flavor]
    assert cfg.resource_flavors[flavor].node_labels == {"nvidia.com/gpu.product": label}
    prices = Prices()
    assert prices.price(flavor) == price and prices.source(flavor) == "listed"
    assert prices.price(flavor + "-mig") == price  # its MIG slices, as the family


def test_memory_tells_the_a100s_and_v100s_apart_where_the_name_does_not():
    assert flavor_for_product("NVIDIA A100", 81920) == "nvidia-a100-80gb"
    assert flavor_for_product("NVIDIA A100", 40960) == "nvidia-a100-40gb"
    assert flavor_for_product("Tesla V100-PCIE", 16160) == "nvidia-v100-16gb"
    assert family_of("NVIDIA A100") is None  # neither name nor memory: no guessed price
    # The name wins over the memory (an 80 GB A100 whose memory NVML reports partly reserved).
    assert flavor_for_product("NVIDIA A100-SXM4-80GB", 40000) == "nvidia-a100-80gb"
    # Products of no family keep their label as a DNS-1123 name, billed at the default.
    assert flavor_for_product("Quadro RTX 8000") == "quadro-rtx-8000"
    assert family_of("NVIDIA GB200") is None and family_of("NVIDIA A1000") is None


def test_a_discovered_a100_in_mig_mode_is_priced_as_its_family():
    inv = discover(FakeNvml())  # two A100-SXM4-80GB, one in MIG mode
    cfg = config_for_inventory(inv)
    assert sorted(cfg.resource_flavors) == ["nvidia-a100-80gb", "nvidia-a100-80gb-mig"]
    view = {e["flavor"]: (e["usdPerGpuHour"], e["source"]) for e in prices_view(cfg, Prices())["effective"]}
    assert view == {"nvidia-a100-80gb": (2.21, "listed"), "nvidia-a100-80gb-mig": (2.21, "base flavor")}


def test_the_demo_clusters_flavors_keep_their_prices():
    prices = Prices()
    assert [prices.price(f) for f in ("nvidia-a100", "nvidia-a100-mig", "nvidia-h100", "nvidia-l4")] == [
        2.21, 2.21, 3.75, 0.81]
    assert prices.unpriced(["nvidia-a100", "nvidia-a100-mig", "nvidia-h100", "nvidia-l4"]) == []


def test_the_readme_price_table_is_the_codes():
    text = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| `([a-z0-9-]+)`(?: \(also ([^)]*)\))? \| ([^|]+) \| ([^|]+) \| ([0-9.]+) \|$", text, re.M)
    table = {flavor: (sorted(re.findall(r"`([^`]+)`", also)), model.strip(),
                      re.findall(r"`([^`]+)`", names), float(price))
             for flavor, also, model, names, price in rows}
    assert table == {f.flavor: (sorted(f.aliases), f.model, list(f.products), f.usd_per_gpu_hour)
                     for f in GPU_FAMILIES}
    priced = {f.flavor: f.usd_per_gpu_hour for f in GPU_FAMILIES}
    priced.update({a: f.usd_per_gpu_hour for f in GPU_FAMILIES for a in f.aliases})
    assert DEFAULT_PRICES == priced


def test_a_flavor_without_a_price_is_named_at_start_and_in_admin_prices(tmp_path, caplog, monkeypatch):
    """A discovered GPU of no known family: its flavor is billed at the default, and the admin is
    told so in the server's log at start and in Admin → Prices; a known family is not named."""
    import asyncio

    from jupyter_gpuqueue import inventory
    from jupyter_gpuqueue.service.factory import create_service

    def started(name: str, data: str):
        gpus = [{"uuid": "GPU-f", "name": name, "mib": 1024, "mig": "unsupported"}]
        monkeypatch.setattr(inventory, "discover", lambda: discover(FakeNvml(gpus=gpus)))
        svc = create_service(config_paths=None, inventory_path=None, db_url=None, root_dir=str(tmp_path),
                             data_dir=str(tmp_path / data), lease_priority_class=None,
                             logger=logging.getLogger("gpuqueue-test-unpriced"))

        async def start_stop():
            await svc.start()
            await svc.stop()

        asyncio.run(start_stop())
        return svc

    caplog.set_level(logging.WARNING, logger="gpuqueue-test-unpriced")
    svc = started("NVIDIA Foo 9000", "a")
    assert list(svc.config.resource_flavors) == ["nvidia-foo-9000"]
    (msg,) = [r.getMessage() for r in caplog.records if "no price" in r.getMessage()]
    assert msg.startswith("gpuqueue: no price for ResourceFlavor nvidia-foo-9000: billed at the default "
                          "2.00 USD per GPU-hour")
    (entry,) = prices_view(svc.config, svc.prices)["effective"]  # GET admin/prices
    assert entry == {"flavor": "nvidia-foo-9000", "usdPerGpuHour": 2.0, "source": "default"}
    caplog.clear()
    svc = started("NVIDIA L40S", "b")
    assert list(svc.config.resource_flavors) == ["nvidia-l40s"]
    assert not [r for r in caplog.records if "no price" in r.getMessage()]


def test_an_admin_named_flavor_is_priced_as_the_gpu_family_its_node_labels_name():
    """On Kubernetes an admin names flavors as they like ("gpu-pool-1"); their nodeLabels
    (GPU Feature Discovery's product label, or GKE's accelerator label) say what GPU they select:
    an unlisted one is billed as that family, not at the default, and Admin → Prices says so."""
    from jupyter_gpuqueue.admin import load_config_text

    cfg = load_config_text("""
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gpu-pool-1}
spec: {nodeLabels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gke-t4}
spec: {nodeLabels: {cloud.google.com/gke-accelerator: nvidia-tesla-t4}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: big-a100}
spec: {nodeLabels: {nvidia.com/gpu.product: NVIDIA-A100-SXM4, nvidia.com/gpu.memory: "81920"}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: mystery}
spec: {nodeLabels: {nvidia.com/gpu.product: Quadro-RTX-8000}}
""", "flavors").config
    view = {e["flavor"]: (e["usdPerGpuHour"], e["source"], e.get("model"))
            for e in prices_view(cfg, Prices().bind_flavors(cfg.resource_flavors))["effective"]}
    assert view == {"gpu-pool-1": (3.75, "family", "H100"), "gke-t4": (0.35, "family", "T4"),
                    "big-a100": (2.21, "family", "A100 80GB"), "mystery": (2.0, "default", None)}
    # The admin's price for the family applies to every flavor of it; a listed flavor wins.
    prices = Prices({"nvidia-h100": 4.0, "gke-t4": 0.5}).bind_flavors(cfg.resource_flavors)
    assert (prices.price("gpu-pool-1"), prices.source("gpu-pool-1")) == (4.0, "family")
    assert (prices.price("gke-t4"), prices.source("gke-t4")) == (0.5, "listed")
    assert prices.price("gpu-pool-1-mig") == 4.0 and prices.unpriced(cfg.resource_flavors) == ["mystery"]
