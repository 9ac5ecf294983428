"""The IREE runtime seam: the only module that imports ``iree.runtime``.

How host arrays reach a device depends on the driver. On the local CPU drivers (and HIP)
iree.runtime's call path imports numpy arrays. Every other driver gets device buffers
allocated and filled by copy, and results come back through host staging buffers kept across
calls: on CUDA that is faster than importing (HOST_IMPORT_DRIVERS), and on Vulkan importing
host pointers is not reliable (lavapipe rejects numpy's pointers, even 4096-aligned ones, with
"host allocation import pointer does not satisfy Vulkan minImportedHostPointerAlignment 4096").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cuvil_mlir.core.diagnostics import PackageError, RuntimeFailure, one_line

# Drivers whose inputs are imported as host memory, not copied. Not CUDA: measured on an H200
# (2026-12-03, benchmarks/results/gpu-io-paths-2026-12-03.md), the copy path with the caching
# allocator and staging buffers kept across calls takes 0.35-0.60 ms a call where importing
# took 0.51-2.5 ms (importing pins the host pages of every input on every call). HIP is listed
# on IREE's word (array_interop.py: "HIP/CUDA do"); not run here.
HOST_IMPORT_DRIVERS = frozenset({"local-task", "local-sync", "hip"})
# Drivers whose device gets IREE's caching allocator (as iree-benchmark-module's
# --device_allocator=caching): a call allocates its inputs and results, and on a GPU an
# uncached device allocation costs more than a small model's kernels (an fp32 block's 1 MiB
# input: 2.1 ms a call uncached, 0.6 ms cached). Not Vulkan: lavapipe
# rejects the caching allocator's queue allocations (INVALID_ARGUMENT, memory_type=DEVICE_LOCAL).
CACHING_DRIVERS = frozenset({"cuda"})
# IREE runtime flags set once, before this process creates its first driver (IREE reads them when
# it creates a driver; they are process-wide). Synchronous CUDA allocations (through the caching
# allocator, so still pooled): IREE's CUDA driver can hand a call's results to torch through
# DLPack only when they come from its allocator, not from the stream-ordered pool it uses by
# default. Measured on the H200 (benchmarks/results/gpu-profile-2026-12-03.md): a GPT block at
# batch 8 with CUDA tensors in and out took 0.35 ms a call this way against 0.80 ms with the pool
# and a copy of each result on the device; the module's own time changed by 1% (GPT-2 12 layers,
# iree-benchmark-module 2.19 vs 2.21 ms).
# CPU worker threads (local-task) get 1 MiB stacks instead of IREE's 128 KiB: the cpu target
# lets a dispatch use up to 256 KiB of stack (--iree-llvmcpu-stack-allocation-limit, targets/cpu.py),
# and GPT-2's batch-8 prefill at O3 has dispatches near that limit, which crashed (SIGSEGV at
# a stack address) on 128 KiB worker stacks.
CPU_WORKER_STACK_FLAG = "--task_worker_stack_size=1048576"
RUNTIME_FLAGS = ("--cuda_async_allocations=false", CPU_WORKER_STACK_FLAG)
_flags_set = False


def _runtime():
    """iree.runtime, with RUNTIME_FLAGS set the first time."""
    global _flags_set
    import iree.runtime as rt

    if not _flags_set:
        rt.flags.parse_flags(*RUNTIME_FLAGS)
        _flags_set = True
    return rt


def runtime_version() -> str:
    from importlib.metadata import version

    return version("iree-base-runtime")


def available_drivers() -> list[str]:
    """The drivers this IREE runtime was built with (whether or not a device is present)."""
    rt = _runtime()
    return list(rt.query_available_drivers())


@dataclass(frozen=True)
class DeviceInfo:
    driver: str
    name: str
    path: str
    device_id: int


@dataclass(frozen=True)
class DriverStatus:
    """One driver as this machine really has it: its devices, or why it has none."""

    driver: str
    devices: tuple[DeviceInfo, ...]
    reason: str | None = None  # set when there is no device


def probe_drivers() -> dict[str, DriverStatus]:
    """Create every built-in driver and list its devices. A driver that fails to load
    (no CUDA library, no Vulkan ICD) or finds no device is reported with the reason."""
    return {name: _probe(name) for name in available_drivers()}


def available_devices() -> dict[str, list[DeviceInfo]]:
    """Drivers that have at least one device on this machine -> their devices."""
    return {name: list(s.devices) for name, s in probe_drivers().items() if s.devices}


def _probe(driver: str) -> DriverStatus:
    import iree.runtime as rt

    try:
        found = _runtime().get_driver(driver).query_available_devices()
    except Exception as e:
        return DriverStatus(driver, (), one_line(e))
    devices = tuple(DeviceInfo(driver, d.get("name", ""), d.get("path", ""), int(d.get("device_id", 0))) for d in found)
    return DriverStatus(driver, devices, None if devices else "the driver loads but finds no device")


class Session:
    """One compiled module loaded on one device; call ``invoke(name, arrays)``.

    ``copy`` chooses how inputs reach the device: ``None`` imports host memory on the
    drivers of HOST_IMPORT_DRIVERS and copies everywhere else; ``True`` / ``False`` force it.
    ``allocator``: IREE's device allocator, ``caching`` (the default on CACHING_DRIVERS) or
    ``default``. ``parameters``: the program's external parameters
    (cuvil_mlir/runtime/parameters.py), given to the module through IREE's parameter provider.
    """

    def __init__(self, vmfb: bytes, driver: str, *, copy: bool | None = None, allocator: str | None = None,
                 parameters=None):
        rt = _runtime()

        self.driver = driver
        self.copies = copy if copy is not None else driver not in HOST_IMPORT_DRIVERS
        self.allocator = allocator or ("caching" if driver in CACHING_DRIVERS else "default")
        if self.allocator not in ("caching", "default"):
            raise RuntimeFailure(f"unknown device allocator '{self.allocator}' (caching or default)")
        try:
            if self.allocator == "caching":
                self._device = rt.get_driver(driver).create_default_device(allocators=["caching"])
                self._config = rt.Config(device=self._device)
            else:
                self._config = rt.Config(driver)
                self._device = self._config.device
            self._vm_module = rt.VmModule.copy_buffer(self._config.vm_instance, vmfb)
            if parameters is None:
                self._ctx = rt.SystemContext(config=self._config)
                self._ctx.add_vm_module(self._vm_module)
            else:
                provider = _parameter_index(parameters).create_provider(scope=parameters.scope)
                io = rt.create_io_parameters_module(self._config.vm_instance, provider)
                self._ctx = rt.SystemContext(vm_modules=[io, self._vm_module], config=self._config)
        except PackageError:
            raise
        except Exception as e:
            raise RuntimeFailure(f"IREE runtime could not load the module on driver '{driver}': {one_line(e)}") from e
        self._module = self._ctx.modules[self._vm_module.name]
        self._invokers: dict = {}
        self._staging: dict[int, list] = {}  # allocation size -> free host staging buffers, reused across reads
        self._uploads: dict[tuple, tuple] = {}  # (argument index, bytes) -> (host staging, device buffer): kept_inputs
        self.exports_results: bool | None = None  # whether invoke_dlpack can hand out IREE's result buffers (None: not tried)

    def invoke(self, function: str, arrays: list[np.ndarray]) -> list[np.ndarray]:
        try:
            if self.copies:
                return self._invoke_copying(self._vm_function(function), arrays)
            return self._invoke_importing(function, arrays)
        except RuntimeFailure:
            raise
        except Exception as e:
            raise RuntimeFailure(f"calling '{function}' on driver '{self.driver}' failed: {one_line(e)}") from e

    def device_zeros(self, shape, dtype: str):
        """A zero-filled buffer on this session's device (a HAL buffer view) that stays there:
        pass it to ``invoke_resident`` as often as needed, a function that updates it in
        place (a mutable argument) writes into it."""
        try:
            return self._to_device(np.zeros(tuple(shape), dtype=np.dtype(dtype)))
        except RuntimeFailure:
            raise
        except Exception as e:
            raise RuntimeFailure(f"allocating a {dtype}{list(shape)} buffer on driver '{self.driver}' failed: {one_line(e)}") from e

    def invoke_resident(self, function: str, args: list, *, kept_inputs: bool = False) -> list:
        """Call ``function`` with numpy arrays (copied to the device) and device buffers (from
        ``device_zeros`` or earlier results: passed as they are); its results stay on the
        device (``to_host`` brings them back).

        ``kept_inputs``: the numpy arrays go into device buffers the session keeps for the next
        call with arrays of the same sizes at the same places (written through kept host staging
        buffers, copied on the device's queue, one wait), not into fresh ones: a generate loop's
        small per-step inputs then cost no allocation and no synchronous copy each. Only for a
        function whose results are never its numpy inputs passed through (the next call
        overwrites those buffers)."""
        import iree.runtime as rt

        try:
            uploaded = iter(self._upload([a for a in args if isinstance(a, np.ndarray)]) if kept_inputs else ())
            vm_args = rt.VmVariantList(len(args))
            for a in args:
                if isinstance(a, np.ndarray):
                    a = next(uploaded) if kept_inputs else self._to_device(a)
                vm_args.push_ref(a)
            results = rt.VmVariantList(4)
            self._ctx.vm_context.invoke(self._vm_function(function), vm_args, results)
            return [results.get_as_object(i, rt.HalBufferView) for i in range(len(results))]
        except RuntimeFailure:
            raise
        except Exception as e:
            raise RuntimeFailure(f"calling '{function}' on driver '{self.driver}' failed: {one_line(e)}") from e

    def to_host(self, views, after=None) -> list[np.ndarray]:
        """Device buffers (results of ``invoke_resident`` or ``invoke_async``) as numpy arrays;
        ``after``: a (semaphore, value) the copies wait for on the device's queue (an
        ``invoke_async`` whose results these are)."""
        return self.queue_read(views, after)()

    def timeline(self):
        """A new timeline semaphore at 0 for ``invoke_async``'s waits and signals."""
        return self._device.create_semaphore(0)

    def wait(self, timeline, value: int) -> None:
        """Block until ``timeline`` (from ``timeline()``) reaches ``value``."""
        import iree.runtime as rt

        try:
            rt.HalFence.create_at(timeline, value).wait()
        except Exception as e:
            raise RuntimeFailure(f"waiting for the device on driver '{self.driver}' failed: {one_line(e)}") from e

    def invoke_async(self, function: str, args: list, *, wait: tuple, signal: tuple) -> list:
        """Queue ``function`` (its IREE ``<function>$async`` form, coarse fences) on device
        buffers ``args``, after the device reaches ``wait`` (a (semaphore, value)); it signals
        ``signal`` when done. Returns at once: its results' buffer views, not to be read (nor
        released: keep them until ``signal``) before then; ``to_host(views, after=signal)`` reads
        them in order. Chaining calls so (each waiting for the one before) keeps the device
        busy while the host queues the next one."""
        import iree.runtime as rt

        try:
            vm_args = rt.VmVariantList(len(args) + 2)
            for a in args:
                vm_args.push_ref(a)
            vm_args.push_ref(rt.HalFence.create_at(*wait))
            vm_args.push_ref(rt.HalFence.create_at(*signal))
            results = rt.VmVariantList(4)
            self._ctx.vm_context.invoke(self._vm_function(f"{function}$async"), vm_args, results)
            return [results.get_as_object(i, rt.HalBufferView) for i in range(len(results))]
        except RuntimeFailure:
            raise
        except Exception as e:
            raise RuntimeFailure(f"queueing '{function}' on driver '{self.driver}' failed: {one_line(e)}") from e

    # DLPack device type codes (dlpack.h): where this driver's buffers live
    DLPACK_DEVICE = {"cuda": 2, "hip": 10, "local-task": 1, "local-sync": 1}

    def invoke_dlpack(self, function: str, tensors: list, *, copy_out: bool = False) -> list:
        """Device-resident I/O: objects with ``__dlpack__`` (torch tensors on this session's
        device) in, DLPack capsules of results on the device out, with no host round trip.

        Inputs are imported as they are (IREE's ``from_dlpack_capsule``: the buffer wraps the
        tensor's memory; the caller keeps the tensors alive and has finished writing them;
        IREE's import needs 64-byte aligned data, which a fresh allocation is). The call is
        synchronous: IREE's ``main`` waits for its results before returning.

        Results: IREE's own result buffers (no copy), or with ``copy_out`` copies of them on the
        device into buffers of the device allocator. IREE's CUDA driver exports only buffers of
        its allocator, not the stream-ordered pool a call allocates its results from ("CUDA
        buffer type is not supported for export as an external device allocation", the H200)."""
        import iree.runtime as rt

        code = self.DLPACK_DEVICE.get(self.driver)
        if code is None:
            raise RuntimeFailure(f"driver '{self.driver}' has no DLPack device type")
        try:
            vm_function = self._vm_function(function)
            args = rt.VmVariantList(len(tensors))
            for t in tensors:
                args.push_ref(self._device.from_dlpack_capsule(t.__dlpack__()))
            results = rt.VmVariantList(4)
            self._ctx.vm_context.invoke(vm_function, args, results)
            views = [results.get_as_object(i, rt.HalBufferView) for i in range(len(results))]
            if copy_out:
                views = self._copy_on_device(views)
            return [self._device.create_dlpack_capsule(v, code, self.device_ordinal) for v in views]
        except RuntimeFailure:
            raise
        except Exception as e:
            raise RuntimeFailure(f"calling '{function}' on driver '{self.driver}' with device tensors failed: {one_line(e)}") from e

    def _copy_on_device(self, views) -> list:
        """Each result buffer copied into a fresh buffer of the device allocator (the caching
        one: pooled), one chain of copies waited on once; views of the copies, same shape."""
        import iree.runtime as rt

        device = self._device
        semaphore, step, out = device.create_semaphore(0), 0, []
        for view in views:
            source = view.get_buffer()  # may be longer than the view; the view starts at its start
            target = device.allocator.allocate_buffer(memory_type=rt.MemoryType.DEVICE_LOCAL,
                                                      allowed_usage=rt.BufferUsage.DEFAULT,
                                                      allocation_size=max(source.byte_length(), 1))
            if source.byte_length():
                device.queue_copy(source, target, wait_semaphores=rt.HalFence.create_at(semaphore, step),
                                  signal_semaphores=rt.HalFence.create_at(semaphore, step + 1))
                step += 1
            out.append(rt.HalBufferView(target, list(view.shape), view.element_type))
        rt.HalFence.create_at(semaphore, step).wait()
        return out

    # the ordinal of the device a Session creates (the driver's default device: the first)
    device_ordinal = 0

    def _vm_function(self, function: str):
        vm_function = self._vm_module.lookup_function(function)
        if vm_function is None:
            raise RuntimeFailure(f"the module has no function '{function}'")
        return vm_function

    def _invoker(self, function: str):
        """The runtime's call wrapper, built once per function (rebuilding it per call
        cost tens of microseconds, a large share of a small model's latency)."""
        if function not in self._invokers:
            self._vm_function(function)
            self._invokers[function] = self._module[function]
        return self._invokers[function]

    def _invoke_importing(self, function: str, arrays: list[np.ndarray]) -> list[np.ndarray]:
        result = self._invoker(function)(*arrays)
        results = result if isinstance(result, (tuple, list)) else [result]
        return [np.asarray(r.to_host() if hasattr(r, "to_host") else r) for r in results]

    def _invoke_copying(self, vm_function, arrays: list[np.ndarray]) -> list[np.ndarray]:
        import iree.runtime as rt

        args = rt.VmVariantList(len(arrays))
        for a in arrays:
            args.push_ref(self._to_device(a))
        results = rt.VmVariantList(4)
        self._ctx.vm_context.invoke(vm_function, args, results)
        views = [results.get_as_object(i, rt.HalBufferView) for i in range(len(results))]
        return self.to_host(views)

    def _to_device(self, a: np.ndarray):
        import iree.runtime as rt

        return self._device.allocator.allocate_buffer_copy(
            memory_type=rt.MemoryType.DEVICE_LOCAL, allowed_usage=rt.BufferUsage.DEFAULT,
            device=self._device, buffer=np.ascontiguousarray(a), element_type=_element_type(a.dtype))

    def _upload(self, arrays: list[np.ndarray]) -> list:
        """Buffer views of ``arrays`` in the kept device buffers (``invoke_resident``'s
        ``kept_inputs``): each written into its kept host staging buffer, copied by the device's
        queue (chained on one semaphore), waited on once."""
        import iree.runtime as rt

        device = self._device
        semaphore, step, views = device.create_semaphore(0), 0, []
        for index, a in enumerate(arrays):
            a = np.ascontiguousarray(a)
            if not a.nbytes:
                views.append(self._to_device(a))
                continue
            key = (index, a.nbytes)
            if key not in self._uploads:
                host = device.allocator.allocate_buffer(
                    memory_type=rt.MemoryType.HOST_LOCAL | rt.MemoryType.DEVICE_VISIBLE,
                    allowed_usage=rt.BufferUsage.TRANSFER_SOURCE | rt.BufferUsage.MAPPING_SCOPED, allocation_size=a.nbytes)
                target = device.allocator.allocate_buffer(memory_type=rt.MemoryType.DEVICE_LOCAL,
                                                          allowed_usage=rt.BufferUsage.DEFAULT, allocation_size=a.nbytes)
                self._uploads[key] = (host, target)
            host, target = self._uploads[key]
            np.copyto(host.map().asarray(list(a.shape), a.dtype), a)
            device.queue_copy(host, target, wait_semaphores=rt.HalFence.create_at(semaphore, step),
                              signal_semaphores=rt.HalFence.create_at(semaphore, step + 1))
            step += 1
            views.append(rt.HalBufferView(target, list(a.shape), _element_type(a.dtype)))
        rt.HalFence.create_at(semaphore, step).wait()
        return views

    def queue_read(self, views, after=None):
        """Queue the copies of device buffers to the host after ``after`` (a (semaphore,
        value); else at once) and return a function that waits for them and gives numpy
        arrays that own their memory. Between the two the device may take more work: a read
        queued before the next call runs before it. Copies go through host-visible staging
        buffers, chained and waited on once; the staging buffers are kept for later reads
        (allocating pinned host memory costs more than the copy). Errors, queueing or waiting,
        are a RuntimeFailure."""
        try:
            return self._queue_read(views, after)
        except RuntimeFailure:
            raise
        except Exception as e:
            raise RuntimeFailure(f"reading results back from driver '{self.driver}' failed: {one_line(e)}") from e

    def _queue_read(self, views, after):
        import iree.runtime as rt

        device = self._device
        semaphore, step, staged = device.create_semaphore(0), 0, []
        first = rt.HalFence.create_at(*after) if after is not None else None
        for view in views:
            if not view.byte_length:
                staged.append(None)
                continue
            source = view.get_buffer()  # may be longer than the view; the view starts at its start
            size = source.byte_length()
            if self._staging.get(size):  # a free one (a read in flight holds its own)
                host = self._staging[size].pop()
            else:
                host = device.allocator.allocate_buffer(
                    memory_type=rt.MemoryType.HOST_LOCAL | rt.MemoryType.DEVICE_VISIBLE,
                    allowed_usage=rt.BufferUsage.TRANSFER_TARGET | rt.BufferUsage.MAPPING_SCOPED,
                    allocation_size=size)
            wait = first if step == 0 and first is not None else rt.HalFence.create_at(semaphore, step)
            device.queue_copy(source, host, wait_semaphores=wait, signal_semaphores=rt.HalFence.create_at(semaphore, step + 1))
            staged.append((size, host))
            step += 1
        done = first if step == 0 and first is not None else rt.HalFence.create_at(semaphore, step)

        def finish() -> list[np.ndarray]:
            try:
                done.wait()
                out = []
                for view, kept in zip(views, staged):
                    dtype = rt.HalElementType.map_to_dtype(view.element_type)
                    shape = list(view.shape)
                    out.append(np.zeros(shape, dtype) if kept is None else np.array(kept[1].map().asarray(shape, dtype)))
                for kept in staged:
                    if kept is not None:
                        self._staging.setdefault(kept[0], []).append(kept[1])
                return out
            except Exception as e:
                raise RuntimeFailure(f"reading results back from driver '{self.driver}' failed: {one_line(e)}") from e

        return finish


def _element_type(dtype):
    """IREE's element type of a numpy dtype."""
    element_type = _runtime().array_interop.map_dtype_to_element_type(dtype)
    if element_type is None:
        raise RuntimeFailure(f"the IREE runtime has no element type for numpy dtype {dtype}")
    return element_type


def _parameter_index(parameters):
    """An IREE parameter index over ``parameters``: the in-memory arrays as they are (no
    copy), or the mapped archive (its entries point into the mapping)."""
    parameters.require_values()
    rt = _runtime()
    index = rt.ParameterIndex()
    if parameters.arrays is not None:
        for key, array in parameters.arrays.items():
            index.add_buffer(key, _bytes_view(array))
    else:
        try:
            index.load_from_file_handle(rt.FileHandle.wrap_memory(parameters.view()), "irpa")
        except Exception as e:
            raise PackageError(f"{parameters.path}: its parameter archive is not a valid IREE parameter archive: {one_line(e)}") from e
    return index


def _bytes_view(array: np.ndarray) -> np.ndarray:
    """The array's bytes as a flat uint8 view (no copy for a C-contiguous array)."""
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def write_parameter_archive(arrays, path) -> None:
    """An IREE parameter archive (``.irpa``) at ``path`` holding ``key -> array bytes``;
    IREE's writer streams the buffers to the file (no copy of them in memory). Weights that
    ``arrays`` computes when read (core/params.py ParameterArrays: derived ones with a recipe)
    are computed one at a time into a spill file beside ``path``, which IREE copies from: the
    writer never holds all of them at once. A weight that is a view of a mapped file (a .pt2's
    record, core/params.py ``file_region``) is copied from that file, not read through the mapping."""
    from pathlib import Path

    import contextlib

    from cuvil_mlir.core import params
    from cuvil_mlir.core.params import entry_tag

    rt = _runtime()
    index = rt.ParameterIndex()
    is_computed = getattr(arrays, "is_computed", None)
    computed = [key for key in arrays if is_computed is not None and is_computed(key)]
    spill_path = Path(f"{path}.computed")
    try:
        with open(spill_path, "w+b") as spill:
            placed = {}  # key -> (offset, length, metadata) in the spill file
            for key in computed:
                array = arrays[key]
                placed[key] = (spill.tell(), array.nbytes, entry_tag(array.shape, array.dtype))
                spill.write(_bytes_view(array).data)
                del array
            spill.flush()
            handle = rt.FileHandle.wrap_fd(spill.fileno()) if placed else None
            with contextlib.ExitStack() as files:
                handles = {}  # a mapped file's path -> its IREE file handle
                for key in arrays:
                    if key in placed:
                        offset, length, tag = placed[key]
                        index.add_from_file_handle(key, handle, length, offset, metadata=tag)
                        continue
                    array = arrays[key]
                    tag = entry_tag(array.shape, array.dtype)
                    region = params.file_region(array)
                    if region is None:
                        index.add_buffer(key, _bytes_view(array), metadata=tag)
                        continue
                    if region[0] not in handles:
                        handles[region[0]] = rt.FileHandle.wrap_fd(files.enter_context(open(region[0], "rb")).fileno())
                    index.add_from_file_handle(key, handles[region[0]], array.nbytes, region[1], metadata=tag)
                index.create_archive_file(str(path))
                del index, handle, handles
    finally:
        spill_path.unlink(missing_ok=True)


def archive_entries(path) -> dict[str, tuple[int, str]]:
    """key -> (byte length, metadata text) of the entries of the parameter archive at ``path``."""
    rt = _runtime()
    index = rt.ParameterIndex()
    try:
        index.load(str(path))
    except Exception as e:
        raise PackageError(f"{path} is not a valid IREE parameter archive: {one_line(e)}") from e
    return {key: (int(entry.length), bytes(entry.metadata or b"").decode(errors="replace")) for key, entry in index.items()}


def tool_path(name: str) -> str:
    """The path of one of the IREE runtime's command-line tools (``iree-benchmark-module``,
    ``iree-profile``), shipped in the runtime wheel beside its extension module."""
    from pathlib import Path

    import iree.runtime as rt

    path = Path(rt.__file__).resolve().parent.parent / "_runtime_libs" / name
    if not path.exists():
        raise RuntimeFailure(f"the IREE runtime at {path.parent} has no '{name}' tool")
    return str(path)
