# -*- Python -*-
import os

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "TCC"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.tcc_obj_root, "test")
# Inputs for tests (ONNX files, helper scripts) are not tests themselves.
config.excludes = ["Inputs", "models", "onnx_node", "utils", "lit.cfg.py", "CMakeLists.txt"]

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(
    ("%expect_exit", config.tcc_python + " " + os.path.join(config.tcc_src_root, "test", "utils", "expect_exit.py")))
config.substitutions.append(("%python", config.tcc_python))
config.substitutions.append(("%tcc_src", config.tcc_src_root))
config.substitutions.append(
    ("%models", os.path.join(config.tcc_obj_root, "test", "models")))

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.tcc_tools_dir, append_path=True)

tool_dirs = [config.tcc_tools_dir, config.llvm_tools_dir]
tools = ["tcc", "tcc-opt", "tcc-translate"]
llvm_config.add_tool_substitutions(tools, tool_dirs)

# The CUDA target's tests need nvcc to build steps; whether a GPU is present
# decides what running one must do (an error naming the missing driver here).
import shutil
if os.path.exists("/usr/local/cuda/bin/nvcc") or shutil.which("nvcc"):
    config.available_features.add("nvcc")
if not os.path.exists("/dev/nvidia0"):
    config.available_features.add("no-gpu")
