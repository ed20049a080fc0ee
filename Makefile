# The README's two commands are `make demo` and `make test`; the rest are for developers.
BUILD_TYPE ?= Release
CMAKE_FLAGS ?=
CTEST_FLAGS ?= --output-on-failure --timeout 600
# Every gtest case is its own CTest test (cmake/SluiceTest.cmake), labelled
# with its tier (unit, system, app) and component. Cases run side by side,
# three per core up to 8: most of a system test's time is spent waiting
# (process start, connection set-up, peer timeouts), and no test asserts a
# timing. CTEST_JOBS=1 runs them one at a time.
CTEST_JOBS ?= $(shell n=$$(( $$(nproc 2>/dev/null || echo 1) * 3 )); [ $$n -gt 8 ] && n=8; echo $$n)

.PHONY: all deps test-tools test-packages test-programs format configure build demo demo-shuffle test test-unit test-slow asan tsan thread-safety checkheaders docs fuzz perf bench plot install clean

all: build

deps:
	@scripts/install-deps.sh

# What only the tests use: the adya history checker (crates.io, built into
# .tools/adya) and kv-porcupine (apps/kv/porcupine, a Go module, built into
# .tools/kv-porcupine), redis-tools (redis-cli and redis-benchmark for the
# kv RESP tests), redis-server (7.0, the reference kv's sorted sets are
# compared with, reply for reply), clang-format (hygiene.format checks every C++ file), kcat
# and Apache Kafka's jars (Maven Central, into .tools/kafka) for the stream
# Kafka tests, and the bytecode of .venv's packages (scripts/install-python-deps.sh),
# so that `make demo` does not wait for them. The packages come
# first; the rest (test-programs: downloads and small builds) make test runs
# beside the C++ build.
test-tools: test-packages
	@$(MAKE) --no-print-directory test-programs

test-packages:
	@scripts/install-deps.sh redis-tools redis-server clang-format kcat doxygen

test-programs:
	@scripts/install-python-deps.sh --bytecode
	@scripts/install-adya.sh
	@scripts/install-porcupine.sh
	@scripts/install-kafka.sh

# Formats every tracked C++ file with .clang-format (make test checks it).
format:
	@scripts/install-deps.sh clang-format
	git ls-files '*.cc' '*.h' | xargs clang-format -i

configure: deps
	cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)

# Everything: the library, tools, apps, the tests and sluice-perf-smoke (the
# benchmark with the sizes of its --smoke run; make perf builds the full one).
build: configure
	cmake --build build

# The main demo: the distributed join of apps/join on 4 processes, a radix
# hash join of two 8 M-tuple relations, then (auto picks it) a
# fragment-and-replicate join of 100 K tuples with 16 M, each checked against
# a single-process reference join ("verify: OK"). Builds only what it runs:
# the sluice launcher and sluice-join.
demo: configure
	cmake --build build --target sluice_tool sluice-join
	build/bin/sluice run -n 4 -- build/bin/sluice-join --algorithm radix --r 8000000 --s 8000000 --verify
	build/bin/sluice run -n 4 -- build/bin/sluice-join --algorithm auto --r 100000 --s 16000000 --verify

# The first demo: an N:M shuffle of 100 M tuples, 4 processes x 2 threads, verified exactly-once.
demo-shuffle: configure
	cmake --build build --target sluice_tool sluice-shuffle-demo
	build/bin/sluice run -n 4 -- build/bin/sluice-shuffle-demo --threads 2 --tuples 100000000

# Every test but the long soaks (label `slow`) and the fuzzers (label `fuzz`).
# The tests' programs are fetched and built while the C++ build runs (their
# downloads wait on the network, not the CPU).
test: test-packages
	@$(MAKE) --no-print-directory -j2 build test-programs
	cd build && ../scripts/test-env.sh ctest $(CTEST_FLAGS) -j$(CTEST_JOBS) -LE 'slow|fuzz'

# The unit tier alone (one process per case, no job): about 20 s.
test-unit: build
	cd build && ../scripts/test-env.sh ctest $(CTEST_FLAGS) -j$(CTEST_JOBS) -L unit -LE 'slow|fuzz'

# The long soaks and big shapes, and what only they need: the go-redis
# check program (about 35 CPU-seconds to build, so not in test-tools) and
# the test programs only they run (slow_tests: make test does not build
# them).
test-slow: build test-tools
	@scripts/install-go-redis-check.sh
	cmake --build build --target slow_tests
	cd build && ../scripts/test-env.sh ctest $(CTEST_FLAGS) -L slow

# The whole suite under AddressSanitizer + UndefinedBehaviorSanitizer.
asan: deps test-tools
	cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_SANITIZE=address $(CMAKE_FLAGS)
	cmake --build build-asan
	cd build-asan && ../scripts/test-env.sh ctest $(CTEST_FLAGS) -LE 'slow|fuzz'

# The concurrent tests under ThreadSanitizer, then the multi-threaded unit
# tests and the system tests whose ranks run several threads (flow,
# replicate, combiner, worker, faults, lifecycle; shm and ofi), with every
# rank built with it too.
TSAN_TESTS := '^(unit\.(replicate|fault_regression|registry)_test|system\.(flow|replicate|combiner|combiner_worker_thread|worker|faults|lifecycle|registry_fault)_test)'
tsan: deps
	cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_SANITIZE=thread $(CMAKE_FLAGS)
	cmake --build build-tsan
	cd build-tsan && ../scripts/test-env.sh ctest $(CTEST_FLAGS) -L concurrent
	cd build-tsan && ../scripts/test-env.sh ctest $(CTEST_FLAGS) -R $(TSAN_TESTS)

# clang's thread-safety analysis of the library (src/common/mutex.h: every
# member a lock guards says so) in build-tsa; a warning fails the target. Not
# part of `make test` (it needs clang).
thread-safety:
	@scripts/install-deps.sh clang
	cmake -S . -B build-tsa -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
	  -DSLUICE_BUILD_TESTS=OFF -DSLUICE_BUILD_APPS=OFF -DSLUICE_BUILD_TOOLS=OFF -DSLUICE_BUILD_BENCHMARKS=OFF \
	  "-DCMAKE_CXX_FLAGS=-Wthread-safety -Werror=thread-safety"
	cmake --build build-tsa --target sluice sluice_job

# Every public header compiled on its own (make test checks it too: hygiene.headers).
checkheaders: configure
	cmake --build build --target checkheaders

# The API reference, generated by Doxygen from the public headers
# (docs/reference/Doxyfile) into build/docs/html. Every public name must be
# documented: an undocumented one (or any other Doxygen warning) fails it.
docs:
	@command -v doxygen >/dev/null || scripts/install-deps.sh doxygen
	mkdir -p build/docs
	SLUICE_DOCS_OUT=build/docs doxygen docs/reference/Doxyfile
	@echo "API reference: build/docs/html/index.html"

# The libFuzzer targets (tests/fuzz), built with clang in build-fuzz, each run
# for FUZZ_SECONDS (default 60); prints executions and coverage.
FUZZ_SECONDS ?= 60
fuzz:
	tests/fuzz/run.sh $(FUZZ_SECONDS)

# The project's perftest, built-in bounds and peers only (see docs/benchmarks.md):
# sluice-perf (bench/perf), which `sluice perf` runs.
perf: configure
	cmake --build build --target sluice_tool sluice-perf
	build/bin/sluice perf

# The perftest with every installed peer (UCX, Open MPI, ZeroMQ), then the charts in docs/img.
bench: build
	bench/peers/install.sh
	cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)
	cmake --build build
	cmake --build build --target sluice-perf sluice-bench-python-baseline
	build/bin/sluice perf --peers bench/peers/run --json build/perf_shm.json
	build/bin/sluice perf --transport ofi --segment-bytes 65536 --peers bench/peers/run --json build/perf_ofi.json
	bench/plot build/perf_shm.json build/perf_ofi.json --out docs/img

plot:
	bench/plot build/perf_shm.json build/perf_ofi.json --out docs/img

install: build
	cmake --build build --target sluice-perf
	cmake --install build --prefix $(or $(PREFIX),/usr/local)

clean:
	rm -rf build build-asan build-tsan build-tsa build-fuzz
