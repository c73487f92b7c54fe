"""Other languages can use the .proto files as they are: a Node.js client (@grpc/grpc-js + @grpc/proto-loader, no
generated code) streams an answer from a real router, and buf lints the protos with the STANDARD rules."""

import json
import os
import subprocess

import pytest

from pdserve.client.client import PdserveClient
from tests import REPO_ROOT
from tests.helpers import require_tool

ROOT = REPO_ROOT
NODE_DIR = ROOT / "examples" / "node"


def require_npm_packages(*paths: str) -> None:
    missing = [p for p in paths if not (NODE_DIR / "node_modules" / p).exists()]
    if missing:
        message = (f"{', '.join(missing)} missing in examples/node/node_modules: run `npm ci --prefix examples/node` "
                   "(scripts/test.sh does when npm is present)")
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)


def run_node_client(router: str, *args: str) -> tuple[str, dict]:
    node = require_tool("node", "nodejs")
    require_npm_packages("@grpc/grpc-js", "@grpc/proto-loader")
    done = subprocess.run([node, str(NODE_DIR / "generate.mjs"), "--router", router, *args], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout, json.loads(done.stderr.strip().splitlines()[-1])


def test_node_client_streams_the_same_answer_as_the_python_client(tiny_stack):
    stdout, final = run_node_client(tiny_stack.router_target, "--prompt", "hello world", "--max-tokens", "9")
    with PdserveClient(tiny_stack.router_target) as client:
        expected = client.complete("hello world", max_tokens=9)
    assert final["finish_reason"] == expected.finish_reason == "length"
    assert final["text"] == expected.text and stdout.rstrip("\n") == expected.text
    usage = final["usage"]
    assert usage["completion_tokens"] == 9 and usage["prompt_tokens"] == expected.usage.prompt_tokens
    assert usage["total_tokens"] == usage["prompt_tokens"] + 9
    assert final["request_id"] and final["timings"]["ttft_wall_s"] > 0


def test_node_client_sees_the_routers_error_status(tiny_stack):
    node = require_tool("node", "nodejs")
    require_npm_packages("@grpc/grpc-js", "@grpc/proto-loader")
    done = subprocess.run([node, str(NODE_DIR / "generate.mjs"), "--router", tiny_stack.router_target,
                           "--prompt", "hi", "--max-tokens", "4", "--temperature=-1"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "INVALID_ARGUMENT" in done.stderr and "temperature" in done.stderr


def test_buf_lint_passes_with_the_standard_rules():
    require_npm_packages(".bin/buf")
    done = subprocess.run([str(NODE_DIR / "node_modules" / ".bin" / "buf"), "lint"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_buf_lint_would_catch_a_package_that_does_not_match_its_directory(tmp_path):
    """The lint is live: a .proto whose package does not match its folder fails it."""
    require_npm_packages(".bin/buf")
    (tmp_path / "protos" / "pdserve" / "v1").mkdir(parents=True)
    (tmp_path / "buf.yaml").write_text((ROOT / "buf.yaml").read_text())
    (tmp_path / "protos" / "pdserve" / "v1" / "x.proto").write_text('syntax = "proto3";\npackage pdserve.v2;\n')
    done = subprocess.run([str(NODE_DIR / "node_modules" / ".bin" / "buf"), "lint"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "must be within a directory \"pdserve/v2\"" in done.stdout
