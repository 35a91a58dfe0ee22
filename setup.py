from setuptools import find_packages, setup

setup(
    name="hvd_compress",
    version="0.1.0",
    description="Gradient compression for Horovod + PyTorch: a catalogue of 14 methods (top-k, 1-bit, "
                "AdaComp, PowerSGD, DGC, quantizers, ...) with measured routes",
    packages=find_packages(include=["hvd_compress", "hvd_compress.*"]),
    python_requires=">=3.10",
    # horovod==0.28.1 is built from source with a patch (third_party/horovod), not from here.
    install_requires=["torch>=2.1", "numba>=0.59", "numpy"],
)
