# Lit configuration for Tessera's FileCheck tests.
import os
import lit.formats

config.name = "Tessera"
config.test_format = lit.formats.ShTest(not config.execute_external)  # noqa
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "e2e", "unittests", "lit.cfg.py", "CMakeLists.txt"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.tessera_obj_root, "test")

# Tools: build dirs first, then LLVM's FileCheck/not/split-file.
tool_dirs = [
    os.path.join(config.tessera_obj_root, "tools", t)
    for t in ("tessera-opt", "tessera-import", "tessera-partition", "tessera-run",
              "tessera-eval", "tessera-check", "tessera-ckpt")
]
tool_dirs.append(os.path.join(config.tessera_obj_root, "test", "unittests", "executor"))  # tessera-pack-plan (test/Run)
config.environment["PATH"] = os.pathsep.join(
    tool_dirs + [config.llvm_tools_dir, config.environment.get("PATH", "")]
)
# MPI tests run as root in CI containers, oversubscribe the 2-core machine,
# and use one OpenBLAS thread per rank.
config.environment.update({
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "OPENBLAS_NUM_THREADS": "1",
})
# Sanitizer build (build-san, docs/Sanitizers.md): the ASan/UBSan/LSan
# options and suppression files its tools run with (set in CMakeLists.txt).
for assignment in filter(None, getattr(config, "sanitizer_env", "").split(";")):
    name, value = assignment.split("=", 1)
    config.environment[name] = value
    config.available_features.add("sanitizer")
if "HOME" in os.environ:
    config.environment["HOME"] = os.environ["HOME"]
config.substitutions.append(("%python", "/usr/bin/python3"))
config.substitutions.append(("%srcroot", config.tessera_src_root))
config.substitutions.append(("%objroot", config.tessera_obj_root))
config.substitutions.append(("%models", os.path.join(config.tessera_src_root, "test", "e2e", "models")))
