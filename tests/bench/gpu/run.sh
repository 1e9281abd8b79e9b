#!/bin/bash
# One device run (after tests/bench/gpu/prepare.sh, with carry [".gpu"]): a CUDA build of the
# vendored llama.cpp (the libraries llama-cpp-python loads, and llama-server), a synthetic 3B-class
# model with an exact and a useless draft, then the benches. Results under $OUT. A second run on
# the same warm machine reuses /tmp/build and /tmp/models. Seen on an H200 (2026-12-04): the
# build took 241 s on 16 cores, the models 26 s.
set -uo pipefail
export PYTHONUNBUFFERED=1
T0=$(date +%s); END=$((T0 + ${BUDGET:-560}))
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/summary.txt"; }
left() { echo $(( END - $(date +%s) )); }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$OUT/summary.txt"
say "cores $(nproc)"
python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .gpu/whl/*.whl || { say "pip failed"; exit 1; }
export PYTHONPATH=$PWD:/tmp/site
if [ ! -f /tmp/models/draft-other.gguf ]; then
  ( python3 tests/fixtures/make_synthetic_pair.py /tmp/models --tokenizer .gpu/tokenizer.gguf > "$OUT/models.log" 2>&1; echo "models rc=$?" >> "$OUT/models.log" ) &
fi
[ -f /tmp/build/build.ninja ] || cmake -S .gpu/llama.cpp -B /tmp/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
  -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real -DGGML_RPC=ON -DGGML_NATIVE=ON \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF > "$OUT/build.log" 2>&1 || { say "cmake failed"; tail -30 "$OUT/build.log"; exit 1; }
say "configured"
timeout "$(left)" cmake --build /tmp/build --target llama-server llama mtmd -j "$(nproc)" >> "$OUT/build.log" 2>&1
rc=$?; say "build rc=$rc ($(grep -c '\.cu\.o' "$OUT/build.log") CUDA objects)"
[ $rc -eq 0 ] || { grep -m3 -A8 " error" "$OUT/build.log"; tail -3 "$OUT/build.log"; exit 1; }
# the package's libraries are the build's own files (a copy would be a second libggml beside the
# one libllama's RUNPATH finds)
mkdir -p /tmp/site/llama_cpp && cp -r .gpu/llama_cpp_py/. /tmp/site/llama_cpp/ && ln -sfn /tmp/build/bin /tmp/site/llama_cpp/lib
wait; cat "$OUT/models.log" 2>/dev/null; du -h /tmp/models/*.gguf | tee -a "$OUT/summary.txt"
python3 -c "import llama_cpp; print('gpu offload:', llama_cpp.llama_supports_gpu_offload())" 2>&1 | tail -1 | tee -a "$OUT/summary.txt"
M=/tmp/models
say "draft servers"
timeout $(( $(left) - 150 )) python3 tests/bench/bench_draft_servers.py --model $M/target.gguf --draft exact=$M/draft-exact.gguf \
  --draft useless=$M/draft-other.gguf --gpu-layers 999 --streams 1 4 --tokens 256 --reps 2 \
  --llama-server /tmp/build/bin/llama-server 2>&1 | tee "$OUT/draft_servers.txt"
say "draft models in the engine"
timeout $(( $(left) - 90 )) python3 tests/bench/bench_draft_model.py --model $M/target.gguf --draft exact=$M/draft-exact.gguf \
  --draft useless=$M/draft-other.gguf --gpu-layers 999 --streams 1 4 --rounds 3 --tokens 128 2>&1 | grep -E "stream|rror" \
  | tee "$OUT/draft_engine.txt"
say "step overhead"
timeout $(( $(left) - 15 )) python3 tests/bench/bench_step_overhead.py --model $M/target.gguf --draft-model $M/draft-exact.gguf \
  --gpu-layers 999 --extras none draft grammar logprobs --streams 1 4 8 --tokens 128 2>&1 \
  | grep -E "streams:|Error|error" | tee "$OUT/step_overhead.txt"
say "fit on the GPU"
timeout $(( $(left) > 5 ? $(left) : 5 )) python3 -m app.cli doctor --model $M/target.gguf --gpu-memory 3GiB 2>&1 | tail -25 | tee "$OUT/fit.txt"
say "done"
