"""The IREE runtime seam: the only module that imports ``iree.runtime``."""

from __future__ import annotations

import numpy as np

from cuvil_mlir.diagnostics import RuntimeFailure


def runtime_version() -> str:
    from importlib.metadata import version

    return version("iree-base-runtime")


def available_drivers() -> list[str]:
    import iree.runtime as rt

    return list(rt.query_available_drivers())


class Session:
    """One compiled module loaded on one device; call ``invoke(name, arrays)``."""

    def __init__(self, vmfb: bytes, driver: str):
        import iree.runtime as rt

        self.driver = driver
        try:
            self._config = rt.Config(driver)
            self._ctx = rt.SystemContext(config=self._config)
            self._ctx.add_vm_module(rt.VmModule.copy_buffer(self._ctx.instance, vmfb))
        except Exception as e:
            raise RuntimeFailure(f"IREE runtime could not load the module on driver '{driver}': {e}") from e
        self._module = self._ctx.modules.module

    def invoke(self, function: str, arrays: list[np.ndarray]) -> list[np.ndarray]:
        try:
            fn = self._module[function]
        except Exception as e:
            raise RuntimeFailure(f"the module has no function '{function}'") from e
        try:
            result = fn(*arrays)
        except Exception as e:
            raise RuntimeFailure(f"calling '{function}' on driver '{self.driver}' failed: {e}") from e
        results = result if isinstance(result, (tuple, list)) else [result]
        return [np.asarray(r.to_host() if hasattr(r, "to_host") else r) for r in results]
