"""``jupyter gpuqueue`` as users run it: real subprocesses of the console script.

``simulate`` needs no server. The other commands talk to the pytest-jupyter server through
GPUQUEUE_URL / GPUQUEUE_TOKEN (the test server is not in the runtime dir, so it cannot be
discovered); those tests are async so that the server keeps serving while the CLI runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_gpuqueue.errors import GpuQueueError
from jupyter_gpuqueue.ports import free_port

SCRIPT = Path(sys.executable).parent / "jupyter-gpuqueue"
# The console script once `pip install -e .` has run; else the same main() through -m.
CLI = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "jupyter_gpuqueue.cli"]
PY = sys.executable

SETUP = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata:
  name: a100
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata:
  name: research-cq
spec:
  namespaceSelector: {}
  resourceGroups:
    - coveredResources: ["nvidia.com/gpu"]
      flavors:
        - name: a100
          resources:
            - name: nvidia.com/gpu
              nominalQuota: 2
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata:
  namespace: team-a
  name: team-a-queue
spec:
  clusterQueue: research-cq
"""


def job(name: str, gpus: int) -> str:
    return f"""
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: team-a
  labels:
    kueue.x-k8s.io/queue-name: team-a-queue
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: main
          image: pytorch/pytorch
          command: ["python", "train.py"]
          resources:
            limits:
              nvidia.com/gpu: {gpus}
"""


JOBS = job("first", 2) + "---\n" + job("second", 1)


def run(*args, input=None, env=None, cwd=None):
    return subprocess.run(
        [*CLI, *args], input=input, capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )


def entry(result: dict, name: str) -> dict:
    """The simulate entry of the workload made from Job ``name`` (keys are namespace/name)."""
    matches = [v for k, v in result["workloads"].items() if k.startswith("team-a/") and name in k]
    assert len(matches) == 1, (name, list(result["workloads"]))
    return matches[0]


# -- simulate ------------------------------------------------------------------------------------


def test_simulate_prints_the_json_contract(tmp_path):
    setup, jobs = tmp_path / "setup.yaml", tmp_path / "jobs.yaml"
    setup.write_text(SETUP)
    jobs.write_text(JOBS)
    r = run("simulate", str(setup), str(jobs))
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert set(result) == {"workloads", "cycles"} and isinstance(result["cycles"], int)
    first, second = entry(result, "first"), entry(result, "second")
    assert first["state"] == "admitted" and first["clusterQueue"] == "research-cq"
    assert [ps["flavors"] for ps in first["podSets"].values()] == [{"nvidia.com/gpu": "a100"}]
    assert first["positionInClusterQueue"] is None
    assert second["state"] == "pending"
    assert second["positionInClusterQueue"] == 0 and second["reason"]


def test_simulate_reads_stdin_for_dash(tmp_path):
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(JOBS)
    r = run("simulate", "-", str(jobs), input=SETUP)
    assert r.returncode == 0, r.stderr
    assert entry(json.loads(r.stdout), "first")["state"] == "admitted"


def test_simulate_takes_a_workload_requesting_gpu_as_kueue_does(tmp_path):
    """A kind: Workload requesting a resource named ``gpu`` is valid for Kueue (its webhook refuses
    only ``pods``): simulate queues it (no ClusterQueue offers ``gpu``, so it stays pending)."""
    jobs = tmp_path / "wl.yaml"
    jobs.write_text("""
apiVersion: kueue.x-k8s.io/v1beta1
kind: Workload
metadata: {name: wl-gpu, namespace: team-a}
spec:
  queueName: team-a-queue
  podSets:
  - name: main
    count: 1
    template:
      spec:
        containers:
        - name: main
          resources: {requests: {gpu: 1}}
""")
    setup = tmp_path / "setup.yaml"
    setup.write_text(SETUP)
    r = run("simulate", str(setup), str(jobs))
    assert r.returncode == 0, r.stderr
    wl = json.loads(r.stdout)["workloads"]["team-a/wl-gpu"]
    assert (wl["state"], wl["clusterQueue"], wl["reason"]) == ("pending", "research-cq", "NoFit")


def test_simulate_invalid_manifest_exits_2_with_the_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(SETUP.replace("nominalQuota: 2", "nominalQuota: -2"))
    r = run("simulate", str(bad))
    assert r.returncode == 2
    assert r.stdout == ""
    assert "bad.yaml" in r.stderr and "nominalQuota" in r.stderr, r.stderr

    r = run("simulate", "-", input="kind: [unclosed\n")
    assert r.returncode == 2 and r.stdout == "" and r.stderr.strip()


def test_simulate_unreadable_file_exits_2(tmp_path):
    r = run("simulate", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2 and r.stdout == ""
    assert "missing.yaml" in r.stderr and "cannot read" in r.stderr


def test_usage_errors_exit_2_and_help_exits_0():
    r = run("submit", "--gpus", "0", "train.py")
    assert r.returncode == 2 and "--gpus" in r.stderr and "positive" in r.stderr
    r = run("frobnicate")
    assert r.returncode == 2 and "frobnicate" in r.stderr
    r = run("submit", "--help")
    assert r.returncode == 0 and "--max-runtime" in r.stdout and "--mig" in r.stdout


def test_jupyter_dispatches_to_the_console_script():
    if not SCRIPT.exists():
        pytest.skip("the console script is not installed (pip install -e .)")
    jupyter = Path(sys.executable).parent / "jupyter"
    r = subprocess.run([str(jupyter), "gpuqueue", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "simulate" in r.stdout


def test_unreachable_server_is_a_clear_error():
    port = free_port()  # a port nobody listens on
    env = {**os.environ, "GPUQUEUE_URL": f"http://127.0.0.1:{port}/", "GPUQUEUE_TOKEN": "x"}
    r = run("list", env=env)
    assert r.returncode == 2 and "cannot reach" in r.stderr and r.stdout == ""


def test_no_running_server_is_a_clear_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUQUEUE_")}
    env["JUPYTER_RUNTIME_DIR"] = str(tmp_path)  # no server info files here
    r = run("queues", env=env)
    assert r.returncode == 2 and r.stdout == ""
    assert "no running Jupyter server with jupyter_gpuqueue found" in r.stderr
    assert "jupyter lab" in r.stderr


# -- against a running server --------------------------------------------------------------------


async def arun(*args, env: dict, cwd=None, timeout=120):
    """Run the CLI without blocking the server's event loop; (returncode, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        *CLI, *args,
        env={**os.environ, **env},
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return proc.returncode, out.decode(), err.decode()


async def test_the_server_running_this_process_is_discovered(gpuqueue_env):
    """Without GPUQUEUE_URL the CLI finds the server whose process is its ancestor (here pytest's
    own server, listed in the runtime dir), as a kernel finds the server that started it."""
    assert "GPUQUEUE_URL" not in os.environ
    rc, out, err = await arun("info", "--json", env={})
    assert rc == 0, err
    assert json.loads(out)["user"] == "alice"


async def test_submit_script_wait_list_and_logs(gpuqueue_env, tmp_path):
    script = tmp_path / "hello.py"
    script.write_text("import os, sys\nprint('hello from', os.path.basename(sys.argv[0]), sys.argv[1:])\n")
    rc, out, err = await arun("submit", "hello.py", "--gpus", "1", "--max-runtime", "2m",
                              "--name", "cli-hello", "--wait", "--", "alpha", env=gpuqueue_env,
                              cwd=tmp_path)
    # '--' ends our options: "alpha" is the script's argument
    assert rc == 0, err
    assert "cli-hello" in out and "Succeeded" in out and "estimated cost $" in out

    rc, out, err = await arun("list", env=gpuqueue_env)
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["NAMESPACE", "NAME", "STATE"]
    assert any("cli-hello" in line and "Succeeded" in line for line in lines[1:])

    rc, out, err = await arun("list", "--json", "--state", "Succeeded", env=gpuqueue_env)
    assert rc == 0, err
    items = json.loads(out)["items"]
    assert [w["name"] for w in items] == ["cli-hello"]
    assert items[0]["command"][1] == str(script) and items[0]["costUsd"] > 0

    rc, out, err = await arun("logs", "cli-hello", env=gpuqueue_env)
    assert rc == 0, err
    assert "hello from hello.py ['alpha']" in out


async def test_submit_command_prints_position_and_cost_then_cancel(gpuqueue_env, tmp_path):
    rc, out, err = await arun("submit", "--json", "--max-runtime", "10m", "--name", "cli-sleeper",
                              PY, "-c", "import time; print('sleeping', flush=True); time.sleep(60)",
                              env=gpuqueue_env)
    assert rc == 0, err
    wl = json.loads(out)
    assert wl["name"] == "cli-sleeper" and wl["command"][:2] == [PY, "-c"]
    assert wl["podSets"][0]["requests"] == {"nvidia.com/gpu": "1"}  # --gpus defaults to 1

    rc, out, err = await arun("submit", "--max-runtime", "10m", "--name", "cli-text",
                              PY, "-c", "pass", env=gpuqueue_env)
    assert rc == 0, err
    assert out.startswith(f"{wl['namespace']}/cli-text: ") and "estimated cost $" in out

    rc, out, err = await arun("cancel", "cli-sleeper", env=gpuqueue_env)
    assert rc == 0, err
    assert f"cancelled {wl['namespace']}/cli-sleeper" in out
    rc, out, err = await arun("list", "--json", env=gpuqueue_env)
    states = {w["name"]: w["state"] for w in json.loads(out)["items"]}
    assert states["cli-sleeper"] == "Cancelled"


async def test_submit_array_runs_one_job_per_task_id(gpuqueue_env):
    code = "import os; print('task', os.environ['GPUQUEUE_ARRAY_TASK_ID'])"
    rc, out, err = await arun("submit", "--json", "--array", "0-4:2,7", "--name", "sweep", "--wait",
                              "--max-runtime", "2m", PY, "-c", code, env=gpuqueue_env, timeout=120)
    assert rc == 0, err
    items = json.loads(out)["items"]
    assert [w["name"] for w in items] == ["sweep-0", "sweep-2", "sweep-4", "sweep-7"]
    assert {w["state"] for w in items} == {"Succeeded"}
    rc, out, err = await arun("logs", "sweep-7", env=gpuqueue_env)
    assert rc == 0 and "task 7" in out, (out, err)
    # a task name already taken refuses the whole array
    rc, out, err = await arun("submit", "--array", "6-8", "--name", "sweep", PY, "-c", "pass", env=gpuqueue_env)
    assert rc == 2 and "items[1].name" in err, err
    rc, out, err = await arun("list", "--json", env=gpuqueue_env)
    assert sorted(w["name"] for w in json.loads(out)["items"]) == ["sweep-0", "sweep-2", "sweep-4", "sweep-7"]


@pytest.mark.parametrize("spec", ["", "5-1", "0-9:0", "a", "0-1000", "1%2"])
def test_array_spec_errors_name_the_field(spec):
    from jupyter_gpuqueue.cli import parse_array
    from jupyter_gpuqueue.errors import ValidationError

    with pytest.raises(ValidationError) as e:
        parse_array(spec)
    assert e.value.field == "array"


def test_array_spec_follows_sbatch():
    from jupyter_gpuqueue.cli import parse_array

    assert parse_array("0-3") == [0, 1, 2, 3]
    assert parse_array("1,3,5") == [1, 3, 5]
    assert parse_array("0-15:4,2,4") == [0, 4, 8, 12, 2]
    assert len(parse_array("0-999")) == 1000


async def test_logs_follow_streams_until_the_job_ends(gpuqueue_env):
    code = "import time\nfor i in range(3):\n    print('tick', i, flush=True); time.sleep(0.3)\n"
    rc, out, err = await arun("submit", "--name", "cli-ticker", PY, "-c", code, env=gpuqueue_env)
    assert rc == 0, err
    rc, out, err = await arun("logs", "--follow", "cli-ticker", env=gpuqueue_env, timeout=90)
    assert rc == 0, err
    assert [line for line in out.splitlines() if line.startswith("tick")] == ["tick 0", "tick 1", "tick 2"]


async def test_bad_input_names_the_field_and_submits_nothing(gpuqueue_env, jp_fetch):
    cases = [
        # the server's errors name the flag typed, not the API field (maxRuntime, priorityClass)
        (["submit", "--flavor", "nvidia-nonexistent", PY, "-c", "pass"], "--flavor: "),
        (["submit", "--priority", "no-such-class", PY, "-c", "pass"], "--priority: "),
        (["submit", "--queue", "team-a/no-such-queue", PY, "-c", "pass"], "--queue: "),
        (["submit", "--max-runtime", "soon", PY, "-c", "pass"], "--max-runtime: "),
        (["submit", "--max-runtime", "3000000000", PY, "-c", "pass"], "--max-runtime: does not match"),
        (["estimate", "--max-runtime", "30000d"], "must be at most 2147483647 seconds"),
        (["submit", "--name", "Bad_Name", PY, "-c", "pass"], "--name: "),
        (["submit", "--env", "NOEQUALS", PY, "-c", "pass"], "--env: must be KEY=VALUE"),
        (["submit", "no-such-dir/missing.py"], "SCRIPT_OR_COMMAND: "),
        (["submit", "--gpus", "0", PY], "--gpus"),
        (["submit", "--gpus", "2"], "script or command"),
        # abbreviations are refused: --gpu is not --gpus, --max is not --max-runtime
        (["submit", "--gpu", "1", PY, "-c", "pass"], "--gpu"),
        (["estimate", "--max", "2h"], "--max"),
        (["list", "--al"], "--al"),
        (["cancel", "no-such-job"], "name"),
        (["logs", "no-such-job"], "name"),
        (["list", "--state", "Sleeping"], "state"),
    ]
    for argv, field in cases:
        rc, out, err = await arun(*argv, env=gpuqueue_env)
        assert rc == 2, (argv, out, err)
        assert field in err, (argv, err)
        assert "maxRuntime" not in err and "priorityClass" not in err and "localQueue" not in err, (argv, err)
        assert out == "", (argv, out)
    r = await jp_fetch("gpuqueue", "api", "workloads")
    assert json.loads(r.body)["items"] == []


async def test_estimate_queues_inventory_info_prices(gpuqueue_env):
    rc, out, err = await arun("estimate", "--gpus", "2", "--max-runtime", "30m", "--json", PY, "-c", "pass",
                              env=gpuqueue_env)
    assert rc == 0, err
    est = json.loads(out)
    assert est["quantity"] == 2 and est["maxRuntimeSeconds"] == 1800
    rc, out, err = await arun("estimate", "--gpus", "2", "--max-runtime", "30m", "train.py", env=gpuqueue_env)
    assert rc == 0, err
    assert "GPU-hours" in out and "$" in out

    # the README's example: an estimate needs no script or command
    rc, out, err = await arun("estimate", "--gpus", "2", "--flavor", "nvidia-h100", "--max-runtime", "2h",
                              env=gpuqueue_env)
    assert rc == 0, err
    assert out.startswith("2 × nvidia.com/gpu on nvidia-h100 for at most ") and ": 4 GPU-hours, $" in out, out
    assert "up to" not in out  # the flavor was chosen: the price is exact
    rc, out, err = await arun("estimate", "--gpus", "1", "--json", env=gpuqueue_env)
    assert rc == 0, err
    assert json.loads(out)["quantity"] == 1
    # the queue picks the flavor: the price is an upper bound, said so
    rc, out, err = await arun("estimate", "--gpus", "1", "--max-runtime", "1h", env=gpuqueue_env)
    assert rc == 0 and "on any flavor" in out and "the flavor the queue would pick now" in out, (out, err)

    rc, out, err = await arun("queues", env=gpuqueue_env)
    assert rc == 0 and "ClusterQueue" in out and "NOMINAL" in out, err
    rc, out, err = await arun("inventory", env=gpuqueue_env)
    assert rc == 0 and "FREE" in out and "GPU 0" in out, err
    rc, out, err = await arun("info", env=gpuqueue_env)
    assert rc == 0 and "alice" in out and "LocalQueues" in out, err
    rc, out, err = await arun("prices", env=gpuqueue_env)
    assert rc == 0 and "USD/GPU-HOUR" in out, err


async def test_client_raises_the_servers_errors(gpuqueue_env):
    from jupyter_gpuqueue.client import GpuQueueClient
    from jupyter_gpuqueue.errors import NotFound, ValidationError

    client = GpuQueueClient(gpuqueue_env["GPUQUEUE_URL"], gpuqueue_env["GPUQUEUE_TOKEN"])
    with pytest.raises(ValidationError) as e:
        await asyncio.to_thread(client.submit, {"command": [PY, "-c", "pass"], "flavor": "nope"})
    assert e.value.field == "flavor" and e.value.status == 400 and "nope" in e.value.message
    with pytest.raises(NotFound) as e:
        await asyncio.to_thread(client.get, "team-a", "missing")
    assert e.value.status == 404
    bad_token = GpuQueueClient(gpuqueue_env["GPUQUEUE_URL"], "wrong-token")
    with pytest.raises(GpuQueueError) as e:
        await asyncio.to_thread(bad_token.info)
    assert e.value.status == 403
    wls = await asyncio.to_thread(
        client.submit_manifest,
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: via-client\n  namespace: team-a\n"
        "  labels:\n    kueue.x-k8s.io/queue-name: team-a-queue\nspec:\n  template:\n    spec:\n"
        "      restartPolicy: Never\n"
        f"      containers:\n        - name: main\n          command: [{PY!r}, '-c', 'pass']\n"
        "          resources:\n            limits:\n              nvidia.com/gpu: 1\n",
    )
    assert [w["name"] for w in wls] == ["via-client"]
    assert (await asyncio.to_thread(client.find, "via-client"))["namespace"] == "team-a"


async def test_list_shows_ones_own_and_says_how_to_see_the_others(gpuqueue_env, gpuqueue_service):
    # Issue 34 item 10: an admin's `list` printed "no workloads" while the queue was full.
    gpuqueue_service.submit({"name": "bobs-job", "command": [PY, "-c", "pass"], "gpus": 1,
                             "localQueue": "team-b/team-b-queue"}, user="bob")
    rc, out, err = await arun("list", env=gpuqueue_env)
    assert rc == 0, err
    assert out.strip() == "no workloads of yours"
    assert "1 more workload of other users not shown: `jupyter gpuqueue list --all` lists them" in err
    rc, out, err = await arun("list", "--all", env=gpuqueue_env)
    assert rc == 0 and "bobs-job" in out and out.splitlines()[0].split()[-1] == "OWNER" and not err.strip()
    rc, out, _ = await arun("list", "--help", env=gpuqueue_env)
    assert "--all lists them" in " ".join(out.split())
