from glob import glob

from setuptools import find_packages, setup

setup(
    name="tvm_ext",
    version="0.1.0",
    description="Template-based auto-tuning (AutoTVM-style knobs, JSON logs, apply at build) "
                "for Apache TVM 0.27",
    packages=find_packages(include=["tvm_ext", "tvm_ext.*"]),
    python_requires=">=3.9",
    install_requires=[
        "apache-tvm==0.27.0.post1",
        # 0.1.15.x makes Schedule.tensorize segfault with apache-tvm 0.27.0.post1.
        "apache-tvm-ffi==0.1.14.post1",
        "numpy",
        # The CPU build of xgboost (same `xgboost` module) skips the 200 MB NCCL wheel.
        "xgboost-cpu>=2.0",
        # Needed by TVM at run time but not declared by its wheel.
        "psutil", "cloudpickle", "tornado",
    ],
    # matplotlib only draws the benchmark plots.
    # pytest-xdist: the suite in two processes (CI has 2 cores; most tests compile on one)
    extras_require={"test": ["pytest", "pytest-xdist"], "plot": ["matplotlib"]},
    # Spaces and shipped logs are data at the top of the repository; a non-editable install
    # puts them under <prefix>/share/tvm_ext (tvm_ext.space.data_dir finds either).
    data_files=[("share/tvm_ext/tuning_spaces", glob("tuning_spaces/*.json")),
                ("share/tvm_ext/logs", glob("logs/*.json"))],
)
