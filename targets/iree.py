"""The IREE compiler seam: the only module that imports ``iree.compiler``.

Cuvil IR lives in torch-mlir's MLIR context; IREE bundles its own MLIR. IR objects never
cross: the fully lowered module is written as bytecode (generic-form text if bytecode
fails) and handed to the IREE compiler as bytes.
"""

from __future__ import annotations

import functools
import re
import shlex

from cuvil_mlir.core import params, repro
from cuvil_mlir.core.diagnostics import CompileError
from cuvil_mlir.core.ir import ir, module_to_bytecode
from cuvil_mlir.core.patterns import BARRIER_OP


def serialize(module: ir.Module) -> bytes:
    """Bytecode of the module, or its generic-form text when bytecode cannot be written."""
    try:
        return module_to_bytecode(module)
    except Exception:
        return module.operation.get_asm(print_generic_op_form=True, binary=True)


def compiler_version() -> str:
    from importlib.metadata import version

    return version("iree-base-compiler")


def compile_to_vmfb(module: ir.Module, flags: list[str], *, input_type: str = "torch", kernels=None,
                    report: list | None = None, parameters: set | None = None) -> bytes:
    """Compile a lowered module with IREE; a failure says why and how to reproduce it.

    ``kernels`` (a target's, e.g. targets/cuda_kernels.materialize) fills the kernel functions
    lower-cuvil-to-kernels declared, in IREE's context (materialize_kernels); what it chose per
    function is appended to ``report``. The keys of the external parameters the module
    reads (core/params.py) are added to ``parameters``."""
    from iree.compiler import CompilerToolError

    data = iree_input(serialize(module), kernels, report if report is not None else [],
                      parameters if parameters is not None else set())
    try:
        return _compile(data, input_type, list(flags))
    except CompilerToolError as e:
        first = _first_error(str(e))

        def still_fails(small: bytes) -> bool:  # the same first error without the weights
            try:
                _compile(small, input_type, list(flags))
            except CompilerToolError as again:
                return _first_error(str(again)) == first
            return False

        path, note = repro.write(data, "cuvil-repro-iree-", still_fails)
        # quoted: a flag may carry an attribute (a #hal.device.target with spaces, quotes, <>, |)
        cmd = shlex.join(["iree-compile", path, f"--iree-input-type={input_type}", *flags, "-o", "out.vmfb"]) if path else None
        raise CompileError(f"IREE failed to compile the module: {first}" + (f" ({note})" if note else ""), repro=cmd) from e


def _compile(data: bytes, input_type: str, flags: list[str]) -> bytes:
    """IREE's compile of the module (bytecode or text) with ``flags`` (a ``--compile-to`` among
    them stops early). A module that writes an argument in place (``torch.overwrite.tensor.contents``:
    compile_causal_lm's KV cache) is compiled in two steps around ``tie_written_arguments``."""
    from iree.compiler import compile_str

    if b"overwrite.tensor.contents" not in data:
        return compile_str(data, input_type=input_type, extra_args=flags)
    first = [f for f in flags if not f.startswith("--compile-to")]  # the caller's stop applies to the second step
    staged = compile_str(data, input_type=input_type, extra_args=[*first, "--compile-to=input", "--emit-mlir-bytecode"])
    return compile_str(tie_written_arguments(staged), input_type="none", extra_args=[*flags, "--compile-from=input"])


def tie_written_arguments(data: bytes) -> bytes:
    """IREE's input-phase module (bytecode or text) with each argument a function writes in
    place tied after the function's barrier instead of before it.

    IREE's torch input turns ``torch.overwrite.tensor.contents %v overwrites %arg`` into
    ``%a = hal.tensor.alias %v to %arg`` joined into the ``hal.tensor.barrier`` that signals the
    call's fence. The barrier's results get an allocation of their own, so IREE 3.13 copies the
    whole written tensor into it every call (GPT-2 decode at 2080 cache slots: 153 MB of cache
    copied per token, about half the step on the CPU), although ``%v`` was already computed in
    the argument's buffer. Here the barrier joins ``%v`` itself and the alias ties the barrier's
    result to the argument after it (kept by an optimization barrier): the fence still waits for
    the write, and the value stays where it was written (no copy).

    Only for a value written into the argument's own buffer (slices inserted into the imported
    argument: a cache update), which IREE computes in place. Any other value would need a copy
    into the argument, which IREE would then order after the fence's signal; that keeps IREE's form."""
    from iree.compiler import ir as iree_ir

    with iree_ir.Context(), iree_ir.Location.unknown():
        module = iree_ir.Module.parse(data)
        aliases: list = []
        _collect_ops(module.operation, lambda op: op.name == "hal.tensor.alias", aliases)
        moved = 0
        for alias in aliases:
            uses = list(alias.results[0].uses)
            if len(uses) != 1 or uses[0].owner.operation.name != "hal.tensor.barrier" or not _updates_in_place(alias):
                continue
            barrier, index = uses[0].owner, uses[0].operand_number
            barrier.operands[index] = alias.operands[0]
            alias.move_after(barrier)
            alias.operands[0] = barrier.results[index]
            with iree_ir.InsertionPoint(alias):  # created detached, IREE's bindings crash: insert, then reorder
                keep = iree_ir.Operation.create("util.optimization_barrier", results=[alias.results[0].type],
                                                operands=[alias.results[0]], loc=alias.location)
            alias.move_before(keep)
            moved += 1
        return _bytecode_or_text(module) if moved else data


def _updates_in_place(operation) -> bool:
    """Whether the value a ``hal.tensor.alias`` ties to its storage was written in place of that
    same storage's import: a chain of ``tensor.insert_slice`` (into its destination) and
    ``hal.dispatch.extern`` results tied to an operand (a cache-write kernel) down to
    ``hal.tensor.import`` of it."""
    from iree.compiler import ir as iree_ir

    alias = operation.opview
    value = alias.source
    while True:
        producer = getattr(value.owner, "operation", None)  # None: a block argument
        if producer is None:
            return False
        if producer.name == "tensor.insert_slice":
            value = producer.operands[1]  # the destination
        elif producer.name == "hal.dispatch.extern":
            tied = [iree_ir.IntegerAttr(a).value for a in iree_ir.ArrayAttr(producer.attributes["tied_operands"])] \
                if "tied_operands" in producer.attributes else []
            index = iree_ir.OpResult(value).result_number
            if index >= len(tied) or tied[index] < 0:
                return False
            workload = iree_ir.DenseI32ArrayAttr(producer.attributes["operandSegmentSizes"])[0]
            value = producer.operands[workload + tied[index]]
        else:
            break
    return producer.name == "hal.tensor.import" and producer.operands[0] == alias.storage


def _collect_ops(op, keep, out: list) -> None:
    """Every operation nested in ``op`` that ``keep(operation)`` accepts, in order (not inside those)."""
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = inner.operation
                if keep(inner):
                    out.append(inner)
                else:
                    _collect_ops(inner, keep, out)


def _operator_named(name: str):
    """A ``_collect_ops`` filter: the ``torch.operator``s of that ``name``."""
    return lambda op: op.name == "torch.operator" and "name" in op.attributes and \
        str(op.attributes["name"]).strip('"') == name


def iree_input(data: bytes, kernels, report: list, parameters: set) -> bytes:
    """The lowered module (bytecode or text) as IREE takes it: the ops torch-mlir's context
    cannot spell, written there as stand-ins, replaced by IREE's own: kernel functions
    (``kernels``, what it chose appended to ``report``), optimization barriers, parameter
    references (their keys added to ``parameters``)."""
    if kernels is not None:
        data = materialize_kernels(data, kernels, report)
    data = materialize_barriers(data)
    return externalize_parameters(data, parameters)


def materialize_barriers(data: bytes) -> bytes:
    """The module (bytecode or text) with each barrier stand-in of core/patterns.py,
    ``torch.operator "util.optimization_barrier"(%x)``, replaced by IREE's
    ``util.optimization_barrier`` on the builtin tensor::

        %t = torch_c.to_builtin_tensor %x : !torch.vtensor<...> -> tensor<...>
        %b = util.optimization_barrier %t : tensor<...>
        %y = torch_c.from_builtin_tensor %b : tensor<...> -> !torch.vtensor<...>

    A module without stand-ins is returned as it is."""
    if BARRIER_OP.encode() not in data:
        return data
    from iree.compiler import ir as iree_ir

    with iree_ir.Context(), iree_ir.Location.unknown():
        module = iree_ir.Module.parse(data)
        stand_ins = []
        _collect_ops(module.operation, _operator_named(BARRIER_OP), stand_ins)
        for op in stand_ins:
            vtensor = op.results[0].type
            builtin = iree_ir.Type.parse(_builtin_tensor_text(vtensor, "optimization barrier"))
            with iree_ir.InsertionPoint(op), op.location:
                plain = iree_ir.Operation.create("torch_c.to_builtin_tensor", results=[builtin], operands=[op.operands[0]])
                held = iree_ir.Operation.create("util.optimization_barrier", results=[builtin], operands=[plain.result])
                value = iree_ir.Operation.create("torch_c.from_builtin_tensor", results=[vtensor], operands=[held.result])
            op.results[0].replace_all_uses_with(value.result)
            op.erase()
        return _bytecode_or_text(module)


def externalize_parameters(data: bytes, keys: set) -> bytes:
    """The module (bytecode or text) with each parameter reference of core/params.py,
    ``torch.operator "cuvil.parameter" {cuvil.key = K} : () -> !torch.vtensor<...>``, replaced
    by a load of a global IREE initializes from the parameter ``K`` of scope ``model``::

        util.global private @__cuvil_param_0 = #stream.parameter.named<"model"::"K"> : tensor<...>
        %t = util.global.load immutable @__cuvil_param_0 : tensor<...>
        %w = torch_c.from_builtin_tensor %t : tensor<...> -> !torch.vtensor<...>

    In IREE's context (torch-mlir's has no util dialect); references no op uses are dropped.
    The keys used are added to ``keys``. A module without references is returned as it is."""
    if params.PARAMETER_OP.encode() not in data:
        return data
    from iree.compiler import ir as iree_ir

    with iree_ir.Context(), iree_ir.Location.unknown():
        module = iree_ir.Module.parse(data)
        references = []
        _collect_ops(module.operation, _operator_named(params.PARAMETER_OP), references)
        symbols: dict[str, tuple[str, object]] = {}  # key -> (global name, builtin tensor type)
        for op in references:
            if not list(op.results[0].uses):
                op.erase()
                continue
            key = iree_ir.StringAttr(op.attributes[params.KEY_ATTR]).value
            if key not in symbols:
                symbols[key] = _declare_parameter(iree_ir, module, key, op.results[0].type, len(symbols))
            name, tensor_type = symbols[key]
            with iree_ir.InsertionPoint(op):
                load = iree_ir.Operation.create("util.global.load", results=[tensor_type], attributes={
                    "global": iree_ir.FlatSymbolRefAttr.get(name), "is_immutable": iree_ir.UnitAttr.get()})
                value = iree_ir.Operation.create("torch_c.from_builtin_tensor", results=[op.results[0].type],
                                                 operands=[load.result])
            op.results[0].replace_all_uses_with(value.result)
            op.erase()
        keys.update(symbols)
        return _bytecode_or_text(module)


_VTENSOR = re.compile(r"^!torch\.vtensor<\[([\d,?]*)\],([a-z]+\d*)>$")
_BUILTIN_ELEMENT = {"si64": "i64", "si32": "i32", "si16": "i16", "si8": "i8", "ui8": "i8"}


def _builtin_tensor_text(vtensor_type, what: str, *, static: bool = False) -> str:
    """The builtin tensor type (text) of a ranked ``!torch.vtensor`` type."""
    m = _VTENSOR.match(str(vtensor_type))
    if m is None or (static and "?" in m.group(1)):
        raise CompileError(f"{what} has type {vtensor_type}: expected a {'static ' if static else ''}ranked !torch.vtensor")
    dims = [d for d in m.group(1).split(",") if d]
    return f"tensor<{''.join(d + 'x' for d in dims)}{_BUILTIN_ELEMENT.get(m.group(2), m.group(2))}>"


def _declare_parameter(iree_ir, module, key: str, vtensor_type, index: int):
    """A ``util.global`` for parameter ``key`` at the top of ``module``: (its name, its tensor type)."""
    tensor_text = _builtin_tensor_text(vtensor_type, f"external parameter '{key}'", static=True)
    name = f"__cuvil_param_{index}"
    quoted = key.replace("\\", "\\\\").replace('"', '\\"')
    with iree_ir.InsertionPoint.at_block_begin(module.body):
        iree_ir.Operation.create("util.global", attributes={
            "sym_name": iree_ir.StringAttr.get(name), "sym_visibility": iree_ir.StringAttr.get("private"),
            "type": iree_ir.TypeAttr.get(iree_ir.Type.parse(tensor_text)),
            "initial_value": iree_ir.Attribute.parse(f'#stream.parameter.named<"{params.SCOPE}"::"{quoted}"> : {tensor_text}')})
    return name, iree_ir.Type.parse(tensor_text)


KERNEL_ATTR = "cuvil.kernel"
SPEC_ATTR = "cuvil.kernel_spec"
SITES_ATTR = "cuvil.kernel_sites"


def materialize_kernels(data: bytes, kernels, report: list) -> bytes:
    """The module (bytecode or text) with the body of each function marked ``cuvil.kernel``
    replaced by what ``kernels(symbol, spec) -> (function text | None, record)`` gives: a
    ``hal.dispatch.extern`` of a prebuilt kernel. This happens in IREE's own context because
    torch-mlir's has no HAL dialect. A function ``kernels`` leaves (None) keeps its body, the
    torch lowering of the op, which IREE compiles with its own codegen."""
    from iree.compiler import ir as iree_ir

    with iree_ir.Context(), iree_ir.Location.unknown():
        module = iree_ir.Module.parse(data)
        replaced = 0
        for op in list(module.body.operations):
            if op.operation.name != "func.func" or KERNEL_ATTR not in op.attributes:
                continue
            symbol = iree_ir.StringAttr(op.attributes["sym_name"]).value
            spec = _read_spec(iree_ir, op.attributes[SPEC_ATTR])
            text, record = kernels(symbol, spec)
            if SITES_ATTR in op.attributes:  # where the ops it computes came from (nn.Module paths)
                record["sites"] = [iree_ir.StringAttr(a).value for a in iree_ir.ArrayAttr(op.attributes[SITES_ATTR])]
            report.append(record)
            if text is None:
                continue
            try:
                fresh = iree_ir.Module.parse(text)
            except iree_ir.MLIRError as e:
                raise CompileError(f"the kernel function for {symbol} does not parse in IREE's context: {e}") from e
            new = fresh.body.operations[0]
            new.move_before(op)
            op.erase()
            replaced += 1
        if not replaced:
            return data
        return _bytecode_or_text(module)


def _read_spec(iree_ir, attr) -> dict:
    d = iree_ir.DictAttr(attr)
    out = {}
    for i in range(len(d)):
        named = d[i]
        value = named.attr
        if isinstance(value, iree_ir.BoolAttr) or str(value) in ("true", "false"):
            out[named.name] = str(value) == "true"
        elif isinstance(value, iree_ir.IntegerAttr) or str(value).endswith(": i64"):
            out[named.name] = iree_ir.IntegerAttr(value).value
        else:
            out[named.name] = iree_ir.StringAttr(value).value
    return out


def _bytecode_or_text(module) -> bytes:
    import io

    buf = io.BytesIO()
    try:
        module.operation.write_bytecode(buf)
        return buf.getvalue()
    except Exception:
        return module.operation.get_asm(print_generic_op_form=True, binary=True)


def _first_error(text: str) -> str:
    for line in text.splitlines():
        if "error:" in line:
            return line.strip()
    lines = [l for l in text.splitlines() if l.strip()]
    return lines[0] if lines else "unknown error"


# A function IREE compiles for the llvm-cpu backend in well under a second: the executable
# target IREE assigns to it names the CPU and its features.
_PROBE = "func.func @probe(%a: tensor<4xf32>) -> tensor<4xf32> {\n  %0 = arith.addf %a, %a : tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n"
_EXECUTABLE_TARGET = re.compile(r'#hal\.executable\.target<"llvm-cpu",\s*"([^"]+)",\s*\{cpu = "([^"]*)", cpu_features = "([^"]*)"')


@functools.lru_cache(maxsize=None)
def llvm_cpu_requirements(flags: tuple[str, ...]) -> dict:
    """What a module compiled with these llvm-cpu ``flags`` needs of the CPU that runs it:
    ``{"format": "embedded-elf-x86_64", "cpu": "znver4", "cpu_features": ["avx2", ...]}``
    (the features IREE's LLVM codegen may use). Empty for flags that do not target llvm-cpu."""
    from iree.compiler import CompilerToolError, compile_str

    keep = [f for f in flags if f.startswith(("--iree-hal-target-device", "--iree-hal-local-target-device-backends", "--iree-llvmcpu-"))]
    if not any("llvm-cpu" in f for f in keep):
        return {}
    try:
        text = compile_str(_PROBE, input_type="auto", extra_args=[*keep, "--compile-to=flow"]).decode()
    except CompilerToolError as e:
        raise CompileError(f"IREE could not resolve the CPU target: {_first_error(str(e))}") from e
    m = _EXECUTABLE_TARGET.search(text)
    if m is None:
        return {}
    features = sorted({f[1:] for f in m.group(3).split(",") if f.startswith("+")})
    return {"format": m.group(1), "cpu": m.group(2), "cpu_features": features}


# ---------------------------------------------------------------------------------------
# Dispatch sites: what each dispatch of a compiled module does and where it came from, for
# the profiler (cuvil_mlir/profiler.py). IREE names each dispatch's exported function
# (``main$async_dispatch_3_matmul_like_128x768x2304_f16``) when it forms dispatch regions,
# in the flow stage; the runtime's profiling reports time under that name. Compiling to
# flow again with debug info gives, per ``flow.dispatch`` call site, the export it calls,
# the tensors it reads and writes and the location of the ops it was formed from (named
# after their nn.Module path by the importer).

# ops of a linalg body counted as one floating-point operation per loop iteration
_FLOP_OPS = frozenset({
    "arith.addf", "arith.subf", "arith.mulf", "arith.divf", "arith.maximumf", "arith.minimumf", "arith.maxnumf",
    "arith.minnumf", "arith.negf", "arith.remf", "math.exp", "math.exp2", "math.log", "math.erf", "math.tanh",
    "math.rsqrt", "math.sqrt", "math.powf", "math.fma", "math.absf", "arith.addi", "arith.muli",
})


def dispatch_sites(module: ir.Module | bytes, flags: list[str], *, input_type: str = "torch", kernels=None) -> list[dict]:
    """Every ``flow.dispatch`` of the module compiled with ``flags``, in program order:
    ``{"key": export name, "function": the module function that calls it, "location": the call site's loc,
    "reads": [[shape, dtype], ...],
    "writes": [...], "bytes": what it reads and writes, "flops": its loop nests' arithmetic}``.
    ``kernels``: the target's kernel builder, as compile_to_vmfb got it: the kernel functions are
    materialized first, so the sites are those of the module that runs (IREE numbers its
    dispatches in order: without the externs every later name would differ). Plain data: IREE's
    IR objects stay in this module."""
    from iree.compiler import CompilerToolError
    from iree.compiler import ir as iree_ir

    data = module if isinstance(module, bytes) else serialize(module)
    records: list[dict] = []
    data = iree_input(data, kernels, records, set())
    kernel_flops = {r["kernel"]: _kernel_flops(r) for r in records if r.get("kernel")}
    keep = [f for f in flags if not f.startswith("--iree-opt-level")] + [f for f in flags if f.startswith("--iree-opt-level")]
    try:
        text = _compile(data, input_type, [*keep, "--compile-to=flow", "--mlir-print-debuginfo",
                                           "--mlir-elide-elementsattrs-if-larger=8"])
    except CompilerToolError as e:
        raise CompileError(f"IREE failed to compile the module to its dispatches: {_first_error(str(e))}") from e
    with iree_ir.Context() as ctx:
        ctx.allow_unregistered_dialects = True
        flow = iree_ir.Module.parse(text.decode() if isinstance(text, bytes) else text)
        flops = {}
        for op in flow.body.operations:
            if op.operation.name == "flow.executable":
                flops.update(_executable_flops(op.operation))
        sites = []
        for op in flow.body.operations:
            if op.operation.name in ("util.func", "func.func"):
                # the exported function that makes the call (IREE's "$async" body of a public function)
                name = str(op.operation.attributes["sym_name"]).strip('"').removesuffix("$async")
                _walk_dispatches(op.operation, flops, sites, name)
    for site in sites:
        if site["key"] in kernel_flops:  # a prebuilt kernel (hal.dispatch.extern): no loop nest to count
            site["flops"] = kernel_flops[site["key"]]
            site["kernel"] = True
            # the extern op was parsed from text ("-":line:col), inlined at the op's call site: keep the caller's
            site["location"] = _EXTERN_LOC.sub(r"loc(\1)", site["location"])
    return sites


_EXTERN_LOC = re.compile(r'^loc\(callsite\("-":\d+:\d+ at (.*)\)\)$', re.S)


def _kernel_flops(record: dict) -> int:
    """A prebuilt kernel's arithmetic per call, from the spec its metadata record carries:
    a linear 2*M*N*K; an attention 2*(D + D) per (batch, head, query, key), as IREE's attention
    op is counted (_count_flops; no causal discount)."""
    if record.get("op") == "attention":
        return 4 * record["batch"] * record["heads"] * record["tq"] * record["tkv"] * record["d"]
    if all(k in record for k in ("m", "n", "k")):
        return 2 * record["m"] * record["n"] * record["k"] * record.get("batch", 1)
    return 0


def _walk_dispatches(op, flops: dict, sites: list, function: str) -> None:
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = inner.operation
                if inner.name != "flow.dispatch":
                    _walk_dispatches(inner, flops, sites, function)
                    continue
                for ref in inner.attributes["entry_points"]:
                    key = str(ref).rsplit("::@", 1)[-1].strip('"@')
                    reads = [_tensor(v.type) for v in inner.operands if _tensor(v.type)]
                    writes = [_tensor(r.type) for r in inner.results if _tensor(r.type)]
                    sites.append({"key": key, "function": function, "location": str(inner.location), "reads": reads, "writes": writes,
                                  "bytes": sum(_nbytes(t) for t in reads + writes), "flops": flops.get(key, 0)})


_TENSOR = re.compile(r"^tensor<((?:\d+x)*)([a-z]+\d*)>$")


def _tensor(type_) -> list | None:
    """tensor<4x8xf16> -> [[4, 8], "f16"]; None for a dynamic tensor or a non-tensor."""
    m = _TENSOR.match(str(type_))
    return [[int(d) for d in m.group(1).split("x") if d], m.group(2)] if m else None


def _nbytes(t) -> int:
    shape, dtype = t
    bits = int(re.sub(r"\D", "", dtype) or 8)
    n = 1
    for d in shape:
        n *= d
    return n * max(bits, 8) // 8


def _executable_flops(executable) -> dict[str, int]:
    """export name -> floating-point operations of one call, from the loop nests of its function."""
    out = {}
    for region in executable.regions:
        for block in region.blocks:
            for op in block.operations:
                if op.operation.name != "builtin.module":
                    continue
                for func in op.operation.regions[0].blocks[0].operations:
                    if func.operation.name == "func.func":
                        out[str(func.operation.attributes["sym_name"]).strip('"')] = _count_flops(func.operation)
    return out


def _count_flops(op) -> int:
    total = 0
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = inner.operation
                total += _op_flops(inner) if inner.name.startswith(("linalg.", "iree_linalg_ext.")) else _count_flops(inner)
    return total


def _op_flops(op) -> int:
    """One structured op: its iteration domain times the arithmetic of its body (a matmul's
    mul+add: 2 per point); softmax ~5 per element; attention 2 per point of Q*K^T and of P*V."""
    shapes = [t[0] if t else None for t in (_tensor(v.type) for v in op.operands)]
    if op.name == "linalg.softmax" and shapes and shapes[0] is not None:
        return 5 * _prod(shapes[0])
    if op.name in ("linalg.mmt4d", "linalg.batch_mmt4d") and len(shapes) >= 2 and shapes[0] and shapes[1]:
        # data-tiled matmul (the CPU's data tiling): lhs [(B,) M1, K1, M0, K0], rhs [(B,) N1, K1,
        # N0, K0]; 2 per point of the padded tiles
        return 2 * _prod(shapes[0]) * shapes[1][-4] * shapes[1][-2]
    if "indexing_maps" not in op.attributes:
        return 0
    maps = [_map_dims(str(m)) for m in op.attributes["indexing_maps"]]
    ranges: dict[int, int] = {}
    for dims, shape in zip(maps, shapes):
        for d, size in zip(dims, shape or ()):
            if d is not None:
                ranges.setdefault(d, size)
    points = _prod(ranges.values())
    if op.name == "iree_linalg_ext.attention" and len(maps) >= 3 and maps[0] and maps[2]:
        # Q: (batch.., M, K1), V: (batch.., N, K2): 2*K1 + 2*K2 per (batch, M, N) point
        k1, k2 = ranges.get(maps[0][-1], 1), ranges.get(maps[2][-1], 1)
        return 2 * points // (k1 * k2) * (k1 + k2)
    if not op.regions or not op.regions[0].blocks:
        return 0
    per_point = sum(1 for o in op.regions[0].blocks[0].operations if o.operation.name in _FLOP_OPS)
    return per_point * points


_DIM = re.compile(r"^d(\d+)$")


def _map_dims(text: str) -> list:
    """``affine_map<(d0, d1, d2) -> (d0, d2)>`` -> [0, 2] (None for a result that is not one dim)."""
    if "->" not in text:
        return []
    results = text.split("->", 1)[1].strip().removesuffix(">").strip().removeprefix("(").removesuffix(")")
    out = []
    for expr in (r.strip() for r in results.split(",") if r.strip()):
        m = _DIM.match(expr)
        out.append(int(m.group(1)) if m else None)
    return out


def _prod(xs) -> int:
    n = 1
    for x in xs:
        n *= x
    return n
