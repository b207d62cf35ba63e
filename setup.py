"""Build of luce-chat: the native engine (CMake) and its Cython binding.

build_ext first configures and builds engine/native with CMake against the ggml that
llama-cpp-python installed (find_package(ggml CONFIG) under its site-packages prefix), then links
the static `luce` library into the `luce_engine._core` extension. llama-cpp-python installs ggml
twice (site-packages/lib and site-packages/llama_cpp/lib); we link and run against the copy that
llama_cpp itself loads, so both share one ggml (one backend registry, one CUDA context) in a
process. The RPATH finds it relative to the extension (`$ORIGIN/../llama_cpp/lib`, then
`$ORIGIN/../lib`) or at the absolute directory found at build time (editable installs), so no
LD_LIBRARY_PATH is needed.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
NATIVE = ROOT / "engine" / "native"


def find_ggml_prefix() -> Path:
    """The site-packages prefix holding llama-cpp-python's lib/cmake/ggml."""
    env = os.environ.get("LUCE_GGML_PREFIX")
    candidates = [Path(env)] if env else []
    candidates += [Path(p) for p in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}]
    candidates += [Path(p) for p in sys.path if p]
    for prefix in candidates:
        if (prefix / "lib" / "cmake" / "ggml" / "ggml-config.cmake").is_file():
            return prefix
    raise RuntimeError(
        "ggml not found: install llama-cpp-python==0.3.36 first (it provides ggml and its CMake config), "
        "or set LUCE_GGML_PREFIX to the site-packages directory that holds lib/cmake/ggml"
    )


class CMakeBuildExt(build_ext):
    def run(self):
        prefix = find_ggml_prefix()
        build_dir = Path(os.environ.get("LUCE_NATIVE_BUILD_DIR", ROOT / "build" / "native")).resolve()
        build_dir.mkdir(parents=True, exist_ok=True)
        cmake = shutil.which("cmake") or "cmake"
        generator = ["-G", "Ninja"] if shutil.which("ninja") and not (build_dir / "Makefile").exists() else []
        subprocess.check_call([cmake, "-S", str(NATIVE), "-B", str(build_dir), *generator,
                               f"-DCMAKE_PREFIX_PATH={prefix}", "-DCMAKE_BUILD_TYPE=Release"])
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        subprocess.check_call([cmake, "--build", str(build_dir), "--parallel", jobs])

        libdir = prefix / "llama_cpp" / "lib"
        if not (libdir / "libggml.so").exists():
            libdir = prefix / "lib"
        for ext in self.extensions:
            ext.include_dirs += [str(NATIVE / "include")]
            ext.extra_objects += [str(build_dir / "libluce.a")]
            ext.library_dirs += [str(libdir)]
            ext.libraries += ["ggml", "ggml-base", "stdc++"]
            ext.runtime_library_dirs += ["$ORIGIN/../llama_cpp/lib", "$ORIGIN/../lib", str(libdir)]
            # the CUDA runtime, when the engine was built with its CUDA kernels (lib dir, then name)
            link = (build_dir / "luce_link.txt").read_text().split() if (build_dir / "luce_link.txt").exists() else []
            if link:
                ext.library_dirs += [link[0]]
                ext.libraries += link[1:]
                ext.runtime_library_dirs += [link[0]]
            ext.depends += [str(p) for p in NATIVE.rglob("*.[ch]*")]
        super().run()


def extensions():
    from Cython.Build import cythonize

    ext = Extension("luce_engine._core", sources=["engine/_core.pyx"], language="c++",
                    extra_compile_args=["-O2", "-std=c++17"])
    return cythonize([ext], compiler_directives={"language_level": "3"}, include_path=[str(ROOT)])


setup(
    # themes/ sits at the top level (the design card's layout) and ships inside luce_tui
    package_dir={"luce_engine": "engine", "luce_tui": "luce_tui", "luce_sessions": "sessions",
                 "luce_tui.builtin_themes": "themes"},
    packages=["luce_engine", "luce_tui", "luce_tui.screens", "luce_tui.widgets", "luce_tui.builtin_themes",
              "luce_sessions"],
    package_data={"luce_tui.builtin_themes": ["*.toml"], "luce_engine": ["drafts/*.gguf"]},
    ext_modules=extensions(),
    cmdclass={"build_ext": CMakeBuildExt},
)
