# lit configuration for attnc: .mlir and .yaml files with RUN lines, run against build/bin.
import os

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "attnc"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".yaml", ".test"]
config.excludes = ["unit", "gpu", "templates", "kernel-specs", "lit.cfg.py", "lit.site.cfg.py", "CMakeLists.txt"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.attnc_obj_root, "test")

config.substitutions.append(("%examples", os.path.join(config.attnc_src_root, "examples")))
llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("ATTNC_CACHE_DIR", os.path.join(config.test_exec_root, "cache"))
# A missing tool is an error, never a silent fallback to some other PATH entry.
llvm_config.add_tool_substitutions(
    [ToolSubst(tool, unresolved="fatal")
     for tool in ("attnc-opt", "attnc", "jit-host", "decode-host")],
    [config.attnc_tools_dir])
