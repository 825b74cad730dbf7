"""The one piece of build configuration pyproject.toml cannot say: the wheel's tag.

A wheel that carries the AOT libraries (kernel/aot/<arch>/libdecode_topk.so, written by
`python -m decode_topk.kernel.aot --arch sm_90a sm_100a`) holds x86-64 Linux binaries, so it
must not be tagged pure: it becomes py3-none-manylinux_2_<X>_<machine> (no Python ABI: the
libraries are loaded through ctypes), X the newest glibc symbol version the libraries ask
for. Without libraries the wheel stays pure (py3-none-any). Everything else is in
pyproject.toml.
"""

import platform
import re
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py

LIBRARIES = sorted(Path(__file__).resolve().parent.glob("kernel/aot/*/libdecode_topk.so"))


def manylinux_tag(libraries) -> str:
    """manylinux_2_X_<machine>: X the highest GLIBC_2.X the libraries' dynamic symbols need
    (they need only libc: the CUDA runtime and the DSL's runtime are linked in statically)."""
    minors = [int(m) for lib in libraries for m in re.findall(rb"GLIBC_2\.(\d+)", lib.read_bytes())]
    return f"manylinux_2_{max(minors, default=17)}_{platform.machine()}"


class DistributionWithLibraries(Distribution):
    # Binaries inside: setuptools then builds into a platform folder, installs into platlib
    # and makes bdist_wheel's root impure, as for an extension module.
    def has_ext_modules(self):
        return bool(LIBRARIES)


class bdist_wheel_with_libraries(bdist_wheel):
    def get_tag(self):
        if not LIBRARIES:
            return super().get_tag()
        plat = self.plat_name if self.plat_name_supplied else manylinux_tag(LIBRARIES)
        return "py3", "none", plat.lower().replace("-", "_").replace(".", "_")


class build_py_without_setup(build_py):
    # The repository root is the package decode_topk (pyproject.toml's package-dir), so
    # this file sits in it: keep it out of the installed package.
    def find_package_modules(self, package, package_dir):
        return [m for m in super().find_package_modules(package, package_dir) if m[:2] != ("decode_topk", "setup")]


setup(distclass=DistributionWithLibraries,
      cmdclass={"bdist_wheel": bdist_wheel_with_libraries, "build_py": build_py_without_setup})
