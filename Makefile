# Tessera top-level commands. Each target installs what is missing first.
#   make demo   build and train a Hugging Face LLaMA (examples/llama) on 4 MPI
#               ranks with the plan tessera-partition --devices 4 chooses
#   make test   build and run every test (lit, unit, end-to-end)
#   make docs   regenerate the dialect and pass references (mlir-tblgen from
#               the .td files) into docs/dialects and docs/passes; the
#               docs.generated test fails until the committed copies match
#   make bench  Tessera vs PyTorch eager vs torch.compile per model, serial
#               and 2-rank (dp2/tp2 vs DDP), with kernel counts
#               (bench/compare.py; BENCH_REPEATS, BENCH_MODELS, ... for
#               more); serial CPU step time vs PyTorch; pipeline bubble, predicted
#               vs measured (bench/pipeline_bubble.sh); ZeRO memory per
#               rank, formula vs predicted vs measured (bench/memory_table.sh);
#               the plan search's speed and its fidelity to Narayanan et al.
#               2021, Table 1, and to torchtitan's Llama 3.1 H100 runs
#               (tessera-planner-bench, docs/Planner.md)
#   make sanitize  a second build, $(SAN_BUILD) (clang-22, ASan + UBSan,
#               no CUDA, no benchmarks), and in it the lit suite, every unit
#               test and the end-to-end tests labelled "sanitize"
#               (TESSERA_SANITIZE_TESTS in test/CMakeLists.txt);
#               docs/Sanitizers.md
#   make bundle $(BUILD)/bundle: tessera-run, Open MPI and a launcher for a
#               node without LLVM, OpenBLAS or Open MPI (scripts/bundle.sh)
#   make fuzz   build the libFuzzer targets (test/fuzz) in $(SAN_BUILD)
#               (clang-22, ASan + UBSan) and run each for FUZZ_SECONDS
#               (default 60); prints executions and corpus sizes, fails on
#               any finding (scripts/fuzz.sh, docs/Fuzzing.md)
BUILD ?= build
JOBS ?= 2
# The sanitizer build; the fuzz targets (TESSERA_FUZZ) are built in it too.
SAN_BUILD ?= build-san
FUZZ_SECONDS ?= 60
# libFuzzer's -seed for make fuzz (empty: a new random seed each run).
FUZZ_SEED ?=

.PHONY: all deps build test sanitize docs demo bench bundle fuzz clean

all: build

deps:
	./scripts/install-deps.sh
	./scripts/python-env.sh test >/dev/null

build: deps
	cmake -G Ninja -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# Mixed instrumentation (Tessera instrumented, Debian's MLIR/LLVM, libonnx,
# Open MPI not) is handled by the options and suppression files each test
# gets (CMakeLists.txt, test/sanitize/); nothing is needed in the shell.
SAN_CTEST = ctest --output-on-failure -j $(JOBS)
sanitize: deps
	cmake -G Ninja -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
	  -DTESSERA_SANITIZE=address,undefined -DTESSERA_ENABLE_CUDA=OFF \
	  -DTESSERA_FUZZ=ON
	cmake --build $(SAN_BUILD) -j $(JOBS)
	cd $(SAN_BUILD)/test/unittests && $(SAN_CTEST)
	cd $(SAN_BUILD)/test/conformance && $(SAN_CTEST)
	cd $(SAN_BUILD) && $(SAN_CTEST) -L '^sanitize$$'

# Needs only a configured build tree and mlir-tblgen, not a full build.
GENERATED_DOCS = dialects passes
docs:
	test -f $(BUILD)/CMakeCache.txt || \
	  cmake -G Ninja -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS) --target tessera-docs
	for d in $(GENERATED_DOCS); do \
	  rm -rf docs/$$d && cp -R $(BUILD)/docs/$$d docs/$$d || exit 1; \
	done

demo: build
	./scripts/demo.sh $(BUILD)

bench: build
	./scripts/python-env.sh export-ts >/dev/null
	./scripts/python-env.sh export-dynamo >/dev/null
	/usr/bin/python3 bench/compare.py --build $(BUILD)
	./bench/run.sh $(BUILD)
	./bench/pipeline_bubble.sh $(BUILD)
	./bench/memory_table.sh $(BUILD)
	$(BUILD)/bench/planner/tessera-planner-bench speed
	./bench/planner_search.sh $(BUILD)
	$(BUILD)/bench/planner/tessera-planner-bench fidelity
	$(BUILD)/bench/planner/tessera-planner-bench torchtitan

bundle: build
	./scripts/bundle.sh $(BUILD) $(BUILD)/bundle

fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_SEED=$(FUZZ_SEED) JOBS=$(JOBS) \
	  ./scripts/fuzz.sh $(SAN_BUILD)

clean:
	rm -rf $(BUILD)
