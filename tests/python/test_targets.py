"""Targets as data (targets/): parsing target strings, the flag tables, and compiling for
CUDA, ROCm and Vulkan on this machine (IREE cross-compiles; nothing here needs a GPU).

Three layers, fastest first:
  - parsing and tables: aliases, errors that list the valid names, frozen objects, cache keys;
  - the flag tables against the pinned IREE compiler: a tiny torch module compiles with the
    flags of every name a user can type (slow: ~45 compiles, ~30 s) and of each default (fast);
  - every e2e model compiles for cuda:sm_86, cuda:h200 (both Hopper modes), rocm:gfx942,
    vulkan and vulkan:ampere, and each artifact holds the executable format (and PTX arch)
    it should. One compile per model (all targets at once), shared by a module fixture.
"""

import dataclasses
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import cuvil_mlir
from cuvil_mlir.compiler.context import make_context
from cuvil_mlir.core.diagnostics import CompileError, CuvilError
from cuvil_mlir.core.ir import parse_module
from cuvil_mlir.targets import KINDS, cuda, describe_targets, iree, parse_target, parse_targets, rocm, vulkan
from cuvil_mlir.targets.cuda import CudaTarget
from cuvil_mlir.targets.rocm import RocmTarget
from cuvil_mlir.targets.vulkan import VulkanTarget

GPU_KINDS = {"cuda": CudaTarget, "rocm": RocmTarget, "vulkan": VulkanTarget}
TARGET_DESCRIPTION = "{hopper-mode=target-description}"

# --- parsing -----------------------------------------------------------------------------


@pytest.mark.parametrize("spec, cls, arch, product", [
    ("cuda", CudaTarget, "sm_80", ""),
    ("cuda:sm_86", CudaTarget, "sm_86", ""),
    ("cuda:a100", CudaTarget, "sm_80", "a100"),
    ("cuda:rtx4090", CudaTarget, "sm_89", "rtx4090"),
    ("cuda:h200", CudaTarget, "sm_90", "h200"),
    ("rocm", RocmTarget, "gfx942", ""),
    ("rocm:mi300x", RocmTarget, "gfx942", "mi300x"),
    ("rocm:rx7900xtx", RocmTarget, "gfx1100", "rx7900xtx"),
    ("vulkan", VulkanTarget, "portable", ""),
    ("vulkan:lavapipe", VulkanTarget, "llvmpipe", "lavapipe"),
    ("vulkan:h200", VulkanTarget, "ampere", "h200"),
    ("vulkan:sm_90", VulkanTarget, "ampere", "sm_90"),
])
def test_names_and_aliases(spec, cls, arch, product):
    t = parse_target(spec)
    assert type(t) is cls and t.arch == arch and t.product == product
    assert t.spec == spec  # an alias stays in the spec: it is what the user asked for
    assert parse_target(t.spec) == t


def every_spec():
    """Every name of every GPU kind, and each Hopper name in both modes."""
    for kind, cls in GPU_KINDS.items():
        for name in (*cls.archs, *cls.aliases):
            yield f"{kind}:{name}"
            if kind == "cuda" and cls.aliases.get(name, name) == "sm_90":
                yield f"{kind}:{name}{TARGET_DESCRIPTION}"


def test_every_spec_round_trips():
    for spec in every_spec():
        t = parse_target(spec)
        assert parse_target(t.spec) == t, spec
        assert t.driver == {"cuda": "cuda", "rocm": "hip", "vulkan": "vulkan"}[t.kind]


def test_options_parse_and_round_trip():
    t = parse_target("cuda:h200{hopper-mode=target-description}")
    assert t.hopper_mode == "target-description" and t.options() == {"hopper-mode": "target-description"}
    assert parse_target(t.spec) == t
    assert parse_target("cuda:h200{hopper-mode=ptx-jit}").spec == "cuda:h200"  # the default is not written
    cpu = parse_target("cpu{stack-allocation-limit=524288}")  # an int option, converted by its default's type
    assert cpu.stack_allocation_limit == 524288 and parse_target(cpu.spec) == cpu


def test_cpu_data_tiling_is_on_by_default_and_an_option():
    on, off = parse_target("cpu"), parse_target("cpu{data-tiling=false}")
    assert "--iree-global-opt-data-tiling" in on.iree_flags() and off.spec == "cpu:host{data-tiling=false}"
    assert not any("data-tiling" in f for f in off.iree_flags())
    assert on.relaxed() == [off] and off.relaxed() == [] and on.cache_key() != off.cache_key()


def test_parse_targets_keeps_options_whole():
    specs = [t.spec for t in parse_targets("cuda:h200{hopper-mode=target-description},vulkan,cpu")]
    assert specs == ["cuda:h200{hopper-mode=target-description}", "vulkan", "cpu"]
    with pytest.raises(CuvilError, match="given twice"):
        parse_targets("cuda:h200,cuda:h200{hopper-mode=ptx-jit}")


def test_unknown_kind_lists_every_kind_and_name():
    with pytest.raises(CuvilError, match="unknown target 'tpu'; valid targets: cpu") as e:
        parse_target("tpu")
    for kind, cls in KINDS.items():
        assert kind in str(e.value)
        for name in (*cls.archs, *cls.aliases):
            assert name in str(e.value), name


@pytest.mark.parametrize("spec, listed", [
    ("cuda:sm_70", ["sm_80", "sm_86", "sm_89", "sm_90", "a100", "h200"]),
    ("cuda:sm_90a", ["sm_90", "h100"]),
    ("rocm:gfx906", ["gfx90a", "gfx942", "gfx1100", "mi300x", "mi250x"]),
    ("vulkan:hopper2", ["portable", "ampere", "rdna3", "lavapipe", "h200"]),
])
def test_unknown_arch_lists_the_valid_ones(spec, listed):
    with pytest.raises(CuvilError, match=f"target '{spec}': unknown {spec.split(':')[0]} arch") as e:
        parse_target(spec)
    for name in listed:
        assert name in str(e.value)


@pytest.mark.parametrize("spec, message", [
    ("cuda:h200{hopper-mode=fast}", "hopper-mode=fast is not one of ptx-jit, target-description"),
    ("cuda:h200{hopper_mode=ptx-jit}", "unknown option 'hopper_mode=ptx-jit'; cuda options: hopper-mode=<ptx-jit|target-description>"),
    ("cuda:h200{hopper-mode}", "malformed option 'hopper-mode'"),
    ("cuda:sm_86{hopper-mode=target-description}", "hopper-mode applies to sm_90"),
    ("rocm{hopper-mode=ptx-jit}", "unknown option .*rocm options: none"),
    ("cpu{stack-allocation-limit=big}", "option stack-allocation-limit=big is not an int"),
    ("cuda:h200{hopper-mode=ptx-jit", "unknown target"),
])
def test_bad_options(spec, message):
    with pytest.raises(CuvilError, match=message):
        parse_target(spec)


def test_direct_construction_is_validated():
    assert CudaTarget("sm_90", product="h200") == parse_target("cuda:h200")
    with pytest.raises(ValueError, match="unknown cuda arch 'h200'"):
        CudaTarget("h200")  # an alias is resolved by parse_target, not stored as an arch
    with pytest.raises(ValueError, match="'h200' is not a cuda product with arch sm_86"):
        CudaTarget("sm_86", product="h200")


def test_targets_are_frozen():
    t = parse_target("cuda:h200")
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.arch = "sm_86"
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.hopper_mode = "target-description"
    assert hash(t) == hash(parse_target("cuda:h200"))


CACHE_SPECS = ["cuda:sm_86", "cuda:h200", f"cuda:h200{TARGET_DESCRIPTION}", "cuda:h100", "rocm:gfx942", "rocm:mi300x", "vulkan", "vulkan:ampere"]


def test_cache_keys_differ_across_names_options_and_opt_levels():
    keys = [parse_target(s).cache_key() for s in CACHE_SPECS]
    keys += [parse_target(s, opt_level=0).cache_key() for s in CACHE_SPECS]
    assert len(set(keys)) == len(keys)
    assert parse_target("cuda:h200").cache_key() == CudaTarget("sm_90", product="h200").cache_key()


def test_cache_keys_are_stable_across_processes():
    code = ("from cuvil_mlir.targets import parse_target\n"
            f"print(' '.join(parse_target(s).cache_key() for s in {CACHE_SPECS!r}))")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert other == [parse_target(s).cache_key() for s in CACHE_SPECS]


# --- the tables ---------------------------------------------------------------------------


@pytest.mark.parametrize("module", [cuda, rocm, vulkan])
def test_tables_agree(module):
    """Every product resolves to a listed arch; every name IREE is given as-is is a product."""
    assert set(module.PRODUCTS.values()) <= set(module.ARCHS)
    assert not set(module.PRODUCTS) & set(module.ARCHS)
    assert getattr(module, "IREE_KNOWS", frozenset()) <= set(module.PRODUCTS)


def test_describe_targets():
    described = {d["kind"]: d for d in describe_targets()}
    assert list(described) == list(KINDS)
    for kind, d in described.items():
        assert d["driver"] == KINDS[kind].driver and d["needs"] and d["archs"]
        assert d["default"] in d["archs"]
        assert set(d["aliases"].values()) <= set(d["archs"])
    assert described["cuda"]["options"] == {"hopper-mode": ["ptx-jit", "target-description"], "kernels": ["auto", "off"]}
    assert described["cuda"]["aliases"]["h200"] == "sm_90" and described["rocm"]["aliases"]["mi300x"] == "gfx942"
    assert described["cpu"]["options"] == {"stack-allocation-limit": [262144], "data-tiling": [True]}


@pytest.mark.parametrize("spec, expected", [
    ("cuda:sm_86", ["--iree-hal-target-device=cuda", "--iree-cuda-target=sm_86", "--iree-opt-level=O3"]),
    ("cuda:a100", ["--iree-hal-target-device=cuda", "--iree-cuda-target=a100", "--iree-opt-level=O3"]),
    ("cuda:l4", ["--iree-hal-target-device=cuda", "--iree-cuda-target=sm_89", "--iree-opt-level=O3"]),  # IREE has no "l4"
    ("cuda:h200", ["--iree-hal-target-device=cuda", "--iree-cuda-target=sm_89", "--iree-opt-level=O3"]),  # ptx-jit
    ("rocm:gfx942", ["--iree-hal-target-device=hip", "--iree-rocm-target=gfx942", "--iree-opt-level=O3"]),
    ("rocm:mi300x", ["--iree-hal-target-device=hip", "--iree-rocm-target=mi300x", "--iree-opt-level=O3"]),
    ("vulkan:ampere", ["--iree-hal-target-device=vulkan", "--iree-vulkan-target=ampere", "--iree-opt-level=O3"]),
    ("vulkan:lavapipe", ["--iree-hal-target-device=vulkan", "--iree-vulkan-target=llvmpipe", "--iree-opt-level=O3"]),
    ("vulkan:h200", ["--iree-hal-target-device=vulkan", "--iree-vulkan-target=ampere", "--iree-opt-level=O3"]),
])
def test_flag_tables(spec, expected):
    assert parse_target(spec).iree_flags() == expected


def test_opt_level_reaches_the_flags():
    for spec in ("cuda:h200", f"cuda:h200{TARGET_DESCRIPTION}", "rocm", "vulkan"):
        assert parse_target(spec, opt_level=0).iree_flags()[-1] == "--iree-opt-level=O0"


def test_hopper_target_description():
    device, opt = parse_target(f"cuda:h200{TARGET_DESCRIPTION}").iree_flags()
    assert opt == "--iree-opt-level=O3"
    assert device.startswith('--iree-hal-target-device=#hal.device.target<"cuda", [#hal.executable.target<"cuda", "cuda-nvptx-fb"')
    for part in ('arch = "sm_90"', "max_workgroup_memory_bytes = 232448", "wgp_count = 132", 'sku = "h200"',
                 "<NV_MMA_SYNC_F32_16x8x16_F16>", "subgroup_size_choices = [32]"):
        assert part in device, part
    bare = parse_target(f"cuda:sm_90{TARGET_DESCRIPTION}").iree_flags()[0]
    assert 'arch = "sm_90"' in bare and "chip" not in bare  # no product, no SM count


def test_no_name_sends_sm_90_to_iree_vulkan():
    """--iree-vulkan-target=sm_90 segfaults iree-compile 3.13; Hopper names map to ampere."""
    for name in (*VulkanTarget.archs, *VulkanTarget.aliases):
        assert "--iree-vulkan-target=sm_90" not in parse_target(f"vulkan:{name}").iree_flags()


@pytest.mark.parametrize("spec,extra", [("vulkan", ""), ("cpu", " pad_rows=16 flatten=true causal_block=128")])
def test_vulkan_and_cpu_lower_attention_decomposed_first(spec, extra):
    passes = [[p for _, ps in stages for p in ps] for stages in parse_target(spec).variants()]
    assert [p for p in passes[0] if p.startswith("lower-cuvil-to-torch")] == [f"lower-cuvil-to-torch{{attention=decomposed{extra}}}"]
    assert [p for p in passes[1] if p.startswith("lower-cuvil-to-torch")] == [f"lower-cuvil-to-torch{{attention=sdpa{extra}}}"]
    cuda_passes = [p for _, ps in parse_target("cuda").variants()[0] for p in ps]
    assert "lower-cuvil-to-torch{attention=sdpa}" in cuda_passes


# --- the flags against the pinned IREE compiler ------------------------------------------------

TINY = """
func.func @main(%a: !torch.vtensor<[4,8],f32>, %b: !torch.vtensor<[8,16],f32>) -> !torch.vtensor<[4,16],f32> {
  %0 = torch.aten.mm %a, %b : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8,16],f32> -> !torch.vtensor<[4,16],f32>
  return %0 : !torch.vtensor<[4,16],f32>
}
"""

FORMAT = {"cuda": b"cuda-nvptx-fb", "rocm": b"rocm-hsaco-fb", "vulkan": b"vulkan-spirv-fb"}


def is_vmfb(data: bytes) -> bool:
    """An IREE module: the flatbuffer identifier "IREE" near the start (after a zip header when
    the executables are stored beside the flatbuffer)."""
    return b"IREE" in data[:256]


@pytest.fixture(scope="module")
def tiny():
    return parse_module(TINY, make_context())


def distinct_flag_sets():
    """One spec per distinct flag list (a product IREE does not know compiles as its arch)."""
    seen = {}
    for spec in every_spec():
        seen.setdefault(tuple(parse_target(spec).iree_flags()), spec)
    return list(seen.values())


def check_tiny(module, spec):
    t = parse_target(spec)
    vmfb = iree.compile_to_vmfb(module, t.iree_flags())
    assert is_vmfb(vmfb) and FORMAT[t.kind] in vmfb
    return vmfb


@pytest.mark.parametrize("spec", ["cuda", "cuda:h200", f"cuda:h200{TARGET_DESCRIPTION}", "rocm", "vulkan"])
def test_defaults_compile_a_tiny_module(tiny, spec):
    vmfb = check_tiny(tiny, spec)
    if spec.startswith("cuda:h200"):
        assert (b".target sm_90" in vmfb) == (TARGET_DESCRIPTION in spec)


@pytest.mark.slow
@pytest.mark.parametrize("spec", distinct_flag_sets())
def test_every_name_compiles_a_tiny_module(tiny, spec):
    check_tiny(tiny, spec)


def test_failed_compile_repro_quotes_the_device_attribute(tiny):
    flags = parse_target(f"cuda:h200{TARGET_DESCRIPTION}").iree_flags()
    with pytest.raises(CompileError) as e:
        iree.compile_to_vmfb(tiny, [*flags, "--iree-no-such-flag"])
    args = shlex.split(e.value.repro)
    assert args[0] == "iree-compile" and flags[0] in args  # the attribute survives the shell as one word


# --- e2e models: every one compiles for each GPU target ----------------------------------------

E2E_TARGETS = ["cuda:sm_86", "cuda:h200", f"cuda:h200{TARGET_DESCRIPTION}", "rocm:gfx942", "vulkan", "vulkan:ampere"]
PTX = {"cuda:sm_86": b".target sm_86", "cuda:h200": b".target sm_89", f"cuda:h200{TARGET_DESCRIPTION}": b".target sm_90"}
ATTENTION_MODELS = {"transformer", "gpt2", "bert", "llama"}


def _models():
    import models

    return models.E2E_MODELS


@pytest.fixture(scope="module", params=["mlp", "cnn", "transformer", "gpt2", "bert", "llama"])
def compiled(request):
    """(model name, CompiledModel with one module per E2E target): one import, six IREE compiles."""
    name = request.param
    model, args = _models()[name]()
    targets = E2E_TARGETS + (["rocm:gfx90a", "rocm:gfx1100"] if name == "mlp" else [])
    return name, cuvil_mlir.compile(model, args, target=",".join(targets))


@pytest.mark.slow
def test_e2e_model_compiles_for_every_gpu_target(compiled):
    name, cm = compiled
    assert cm.targets[:len(E2E_TARGETS)] == [parse_target(s).spec for s in E2E_TARGETS]  # rocm:gfx942 is "rocm"
    for m in cm.modules:
        kind = m.target.partition(":")[0]
        assert len(m.vmfb) > 1000 and is_vmfb(m.vmfb), m.target
        assert FORMAT[kind] in m.vmfb, m.target
        assert m.driver == KINDS[kind].driver
        if m.target in PTX:
            found = {t for t in (b".target sm_86", b".target sm_89", b".target sm_90") if t in m.vmfb}
            assert found == {PTX[m.target]}, m.target
        if kind == "vulkan" and name in ATTENTION_MODELS:  # decomposed first: f32 sdpa fails on Vulkan
            assert "lower-cuvil-to-torch{attention=decomposed}" in m.passes


@pytest.mark.slow
@pytest.mark.parametrize("compiled", ["mlp"], indirect=True)  # one model is enough (and is compiled already)
def test_e2e_modules_dump_with_their_executable_format(compiled, tmp_path):
    """iree-dump-module reads each artifact; only the Hopper description says sm_90."""
    _, cm = compiled
    tool = shutil.which("iree-dump-module") or str(Path(sys.executable).parent / "iree-dump-module")
    for i, m in enumerate(cm.modules):
        path = tmp_path / f"{i}.vmfb"
        path.write_bytes(m.vmfb)
        dump = subprocess.run([tool, str(path)], capture_output=True, text=True, check=True).stdout
        assert f"`{FORMAT[m.target.partition(':')[0]].decode()}`" in dump, m.target
        assert ('arch = "sm_90"' in dump) == (m.target == f"cuda:h200{TARGET_DESCRIPTION}"), m.target
