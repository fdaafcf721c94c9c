"""Builds the Python module (python/, target dnnc_python) with CMake for the interpreter
that runs pip, and packages <build>/python/dnnc. The CMake build folder is build-pip (or
$DNNC_BUILD_DIR: an existing build configured for this interpreter is reused)."""
import os
import shutil
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


class BuildWithCMake(build_py):
    def run(self):
        super().run()  # dnnc/__init__.py
        build = os.environ.get("DNNC_BUILD_DIR", os.path.join(ROOT, "build-pip"))
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            subprocess.run(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                            f"-DPython_EXECUTABLE={sys.executable}", "-DBUILD_TESTING=OFF", "-DDNNC_BENCH=OFF"], check=True)
        subprocess.run(["cmake", "--build", build, "--target", "dnnc_python"], check=True)
        package = os.path.join(build, "python", "dnnc")
        for name in os.listdir(package):
            if name.startswith("_dnnc"):
                shutil.copy2(os.path.join(package, name), os.path.join(self.build_lib, "dnnc"))


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # the wheel holds a native module: tag it for this platform
        return True


setup(packages=["dnnc"], package_dir={"dnnc": "python/dnnc"}, cmdclass={"build_py": BuildWithCMake}, distclass=BinaryDistribution,
      options={"build": {"build_base": os.path.join("build-pip", "setuptools")},
               "egg_info": {"egg_base": "build-pip"}})
