# Two commands for people: `make demo` and `make check` (see README.md). Both install missing
# Debian packages first (scripts/install-deps.sh) and build with $(JOBS) parallel jobs: the CI
# machines have 2 cores, and LLVM/MLIR-heavy C++ units need about 1 GB of memory each.
JOBS       ?= 2
BUILD_DIR  ?= build
BUILD_TYPE ?= Release
LLVM_ROOT  ?= /usr/lib/llvm-22
# Where `make install` puts bin/, lib/ (libattnc.so, libattncRuntime.a, the CMake package) and
# include/; DESTDIR, as for any CMake install, stages it elsewhere.
PREFIX     ?= /usr/local
export JOBS BUILD_DIR BUILD_TYPE LLVM_ROOT

.PHONY: all deps build check demo docs install wheel clean
all: build

deps:
	@scripts/install-deps.sh --python $(BUILD_DIR)

build:
	@scripts/build.sh

# The Python package's tests run in $(BUILD_DIR)/python-venv, which install-deps --python fills.
check: build
	@scripts/install-deps.sh --python $(BUILD_DIR)
	@scripts/check.sh

demo: build
	@scripts/demo.sh

# The attnc CLI, libattnc, the public headers with the device templates, and the CMake package
# that find_package(attnc) reads (set CMAKE_PREFIX_PATH to PREFIX if it is not a default one).
install: build
	cmake --install $(BUILD_DIR) --prefix $(PREFIX)

# The Python package's wheel (python/, docs/python.md) with this build's libattnc.so, in
# $(BUILD_DIR)/dist; built in the venv, offline.
wheel: build
	@scripts/install-deps.sh --python $(BUILD_DIR)
	ATTNC_LIB_PREBUILT=$(abspath $(BUILD_DIR))/lib/libattnc.so $(BUILD_DIR)/python-venv/bin/python \
	  -m build --wheel --no-isolation --outdir $(BUILD_DIR)/dist python

# Regenerates the dialect, op and pass reference in docs/dialect from the .td files.
docs: build
	cp $(BUILD_DIR)/docs/Attn/*.md docs/dialect/

clean:
	rm -rf $(BUILD_DIR)
