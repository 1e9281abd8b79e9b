#!/bin/bash
# Prepares .gpu/ (git-ignored) for a run on a lent GPU machine that reaches no network:
# llama.cpp's source from the llama-cpp-python sdist this venv runs (pruned to what a CUDA build of
# the libraries and llama-server needs), wheels for the machine's Python 3.12 of what Fireside needs
# beyond that machine's image, this venv's llama_cpp package without its libraries, and SmolLM2's
# vocabulary for tests/fixtures/make_synthetic_pair.py. Then: the device tool's run with
# carry [".gpu"] and command `bash tests/bench/gpu/run.sh` (about 250 s of build, 30 s of models).
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=.venv/bin/python
VERSION=$($PY -c "import importlib.metadata as m; print(m.version('llama_cpp_python'))")
# .gpu/ is in .gitignore
rm -rf .gpu && mkdir -p .gpu/llama.cpp .gpu/whl /tmp/fireside-sdist
$PY -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d /tmp/fireside-sdist
tar xzf "/tmp/fireside-sdist/llama_cpp_python-$VERSION.tar.gz" -C /tmp/fireside-sdist
SRC=/tmp/fireside-sdist/llama_cpp_python-$VERSION/vendor/llama.cpp
(cd "$SRC" && tar cf - --exclude=./models --exclude=./docs --exclude=./examples --exclude=./media --exclude=./gguf-py \
  --exclude=./tests --exclude=./pocs --exclude=./benches --exclude=./tools/ui/src --exclude=./tools/ui/tests \
  --exclude=./tools/ui/static --exclude=./tools/server/tests --exclude=./conversion --exclude='*.py' --exclude=./ci \
  --exclude=./app .) | tar xf - -C .gpu/llama.cpp
(cd .gpu/llama.cpp/ggml/src && rm -rf ggml-virtgpu ggml-cann ggml-openvino ggml-webgpu ggml-et ggml-metal ggml-hexagon \
  ggml-sycl ggml-vulkan ggml-opencl ggml-zdnn ggml-musa)
# the machine's image has numpy, httpx, jinja2, pillow, huggingface_hub, prometheus-client and the like
$PY -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 \
  --platform manylinux1_x86_64 --platform any -d /tmp/fireside-whl312 "litestar>=2.12,<3" "uvicorn>=0.30" httptools \
  msgspec platformdirs tomlkit jsonschema diskcache "gguf>=0.10" py-spy
for wheel in /tmp/fireside-whl312/*.whl; do
  case $(basename "$wheel" | sed 's/-[0-9].*//' | tr "[:upper:]" "[:lower:]") in
    anyio|attrs|certifi|charset_normalizer|click|h11|httpcore|httpx|idna|markdown_it_py|mdurl|multidict|numpy|pygments|pyyaml|requests|rich|tqdm|typing_extensions|urllib3) ;;
    *) cp "$wheel" .gpu/whl/ ;;
  esac
done
SITE=$($PY -c "import llama_cpp, os; print(os.path.dirname(llama_cpp.__file__))")
mkdir -p .gpu/llama_cpp_py && cp -r "$SITE"/. .gpu/llama_cpp_py/ && rm -rf .gpu/llama_cpp_py/lib && find .gpu/llama_cpp_py -name __pycache__ -prune -exec rm -rf {} +
$PY - <<'PYTHON'
import gguf
from backends.registry import default_model_path
from tests.fixtures.make_synthetic_pair import copy_vocabulary
writer = gguf.GGUFWriter(".gpu/tokenizer.gguf", "llama")
copy_vocabulary(default_model_path(), writer)
writer.write_header_to_file(); writer.write_kv_data_to_file(); writer.write_tensors_to_file(); writer.close()
PYTHON
du -sh .gpu
