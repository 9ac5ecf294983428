"""Provenance: the importer names op locations after their nn.Module, and the package records
where each pattern fired (metadata "pattern_sites"), which `cuvil inspect` shows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

import cuvil_mlir


class Block(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.fc = torch.nn.Linear(width, width)

    def forward(self, x):
        return x + torch.nn.functional.gelu(self.fc(self.norm(x)))


class Stack(torch.nn.Module):
    def __init__(self, width=16, depth=3):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(width) for _ in range(depth)])
        self.head = torch.nn.Linear(width, 4)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def test_sites_name_the_modules_each_pattern_fired_in(tmp_path):
    model, x = Stack().eval(), torch.randn(2, 16)
    compiled = cuvil_mlir.compile(model, (x,))
    fired, sites = compiled.metadata["patterns_fired"], compiled.metadata["pattern_sites"]
    assert set(sites) == set(fired)
    for pass_name, counts in fired.items():
        for pattern, n in counts.items():
            assert sum(sites[pass_name][pattern].values()) == n, (pass_name, pattern)
    assert sites["raise-torch-to-cuvil"]["linear"] == {"blocks.0.fc": 1, "blocks.1.fc": 1, "blocks.2.fc": 1, "head": 1}
    # a linear with its GELU fused is still that layer
    assert sites["fuse-linear-epilogue"]["gelu_epilogue"] == {"blocks.0.fc": 1, "blocks.1.fc": 1, "blocks.2.fc": 1}
    assert set(sites["lower-cuvil-to-torch"]["linear"]) == {"blocks.0.fc", "blocks.1.fc", "blocks.2.fc", "head"}
    norm_sites = {path for p in sites.values() for pattern, where in p.items() if "norm" in pattern for path in where}
    assert norm_sites == {"blocks.0.norm", "blocks.1.norm", "blocks.2.norm"}
    torch.testing.assert_close(torch.from_numpy(compiled(x.numpy())), model(x), rtol=1e-4, atol=1e-5)

    path = tmp_path / "stack.cuvilpkg"
    compiled.save(path)
    assert cuvil_mlir.load(path).metadata["pattern_sites"] == sites
    cuvil = Path(sys.executable).with_name("cuvil")
    out = subprocess.run([str(cuvil), "inspect", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "linear at " in out.stdout and "blocks.0.fc x1" in out.stdout and "head x1" in out.stdout


def test_ops_outside_leaf_modules_get_their_own_module_path():
    """torch-mlir would give a node without a stack trace the previous op's location."""
    from cuvil_mlir.compiler.context import make_context
    from cuvil_mlir.core.diagnostics import location_text, module_path
    from cuvil_mlir.compiler.importers import fx

    module = fx.import_program(fx.to_exported_program(Stack(depth=2).eval(), (torch.randn(2, 16),)), make_context())
    paths: dict[str, set] = {}
    for op in module.body.operations[0].regions[0].blocks[0].operations:
        paths.setdefault(op.operation.name, set()).add(module_path(op.location))
    assert paths["torch.aten.gelu"] == {"blocks.0", "blocks.1"}
    assert paths["torch.aten.layer_norm"] == {"blocks.0.norm", "blocks.1.norm"}
    assert paths["torch.aten.linear"] == {"blocks.0.fc", "blocks.1.fc", "head"}
    assert location_text('loc("blocks.0.fc"("/m.py":3:0))') == 'blocks.0.fc ("/m.py":3:0)'
