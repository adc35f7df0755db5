"""Checks every file of deploy/ as CI runs it (deploy/tests/run; deploy/README.md):

- each Kustomize overlay renders with `kubectl kustomize`, and every object validates
  against the Kubernetes schemas of a current release (kubernetes-validate, offline, strict)
  or, for ServiceMonitor and BackupStorageLocation, against the CRD schemas vendored in
  deploy/tests/crds/ (unknown fields refused, as the API server's strict field validation
  does);
- every container kura ships runs as non-root on a read-only root filesystem, without
  privilege escalation or capabilities, under seccomp RuntimeDefault, with requests and
  limits; the shapes each overlay promises (replicas, probes, sidecars on loopback, a
  block device for the CronJob) hold;
- deploy/velero/ and deploy/observability/ validate the same way, and every metric the
  dashboard and the alert rules name is one the running gateway serves on /metrics;
- the image assembled by deploy/image/assemble runs under podman (read-only, its own
  non-root user, no capabilities) with each gateway.toml the overlays render, in front of
  a real S3 upstream, and a PUT and a GET through it round-trip while the upstream holds
  only ciphertext.

Prints `ok NAME` or `FAIL NAME: reason` per check and exits 1 if any failed.
"""

import copy
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import traceback
import urllib.request
from pathlib import Path

import boto3
import jsonschema
import kubernetes_validate
import yaml
from botocore.config import Config

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
OVERLAYS = ["standalone", "velero-sidecar", "repo-cronjob"]
# The newest Kubernetes release whose schemas kubernetes-validate carries.
KUBERNETES_VERSION = "1.37"
IMAGE = "localhost/kura:latest"
KURA = ROOT / "target" / "release" / "kura"
UPSTREAM = ROOT / "target" / "release" / "s3s-fs-upstream"
# podman as this machine allows it: runc (crun refuses hybrid cgroups) and limits within
# the sandbox's hard limits (podman's defaults exceed them).
PODMAN_RUN = ["podman", "--runtime", "runc", "run", "--ulimit", "nofile=8192:8192",
              "--ulimit", "nproc=4096:4096"]

results = []
# Metric names the image's gateway served on /metrics, for the dashboard and alert check.
SERVED_METRICS = set()


def check(name):
    def wrap(fn):
        def run(*args):
            try:
                fn(*args)
            except Exception as e:  # a failed check is reported, the others still run
                detail = str(e) or type(e).__name__
                if not isinstance(e, AssertionError):
                    detail = traceback.format_exc(limit=3).strip().splitlines()[-1]
                print(f"FAIL {name}: {detail}", flush=True)
                results.append(False)
            else:
                print(f"ok {name}", flush=True)
                results.append(True)
        return run
    return wrap


def render(overlay):
    path = DEPLOY / "observability" if overlay == "observability" else \
        KUBERNETES / "overlays" / overlay
    out = subprocess.run(["kubectl", "kustomize", str(path)],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, f"kubectl kustomize {overlay}: {out.stderr.strip()}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def strict(schema):
    """A CRD's structural schema, refusing fields it does not name (the API server prunes
    them silently; a field it would drop is a mistake in the manifest)."""
    schema = copy.deepcopy(schema)

    def walk(s):
        if not isinstance(s, dict):
            return
        # Go's regexps take `(?i)` anywhere, Python's only at the start.
        if "(?i)" in s.get("pattern", ""):
            s["pattern"] = "(?i)" + s["pattern"].replace("(?i)", "")
        if "properties" in s and "additionalProperties" not in s \
                and not s.get("x-kubernetes-preserve-unknown-fields"):
            s["additionalProperties"] = False
        for key in ("properties", "patternProperties"):
            for sub in s.get(key, {}).values():
                walk(sub)
        for key in ("items", "additionalProperties", "not"):
            walk(s.get(key))
        for key in ("allOf", "anyOf", "oneOf"):
            for sub in s.get(key, []):
                walk(sub)

    walk(schema)
    # Every object has apiVersion, kind and metadata; CRD schemas leave metadata open.
    schema.setdefault("properties", {}).setdefault("metadata", {"type": "object"})
    schema["properties"]["metadata"] = {"type": "object"}
    return schema


def crd_schemas():
    schemas = {}
    for path in sorted((DEPLOY / "tests" / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version.get("served"):
                schemas[(f"{group}/{version['name']}", kind)] = strict(
                    version["schema"]["openAPIV3Schema"])
    return schemas


CRDS = None


def validate(doc):
    global CRDS
    if CRDS is None:
        CRDS = crd_schemas()
    key = (doc["apiVersion"], doc["kind"])
    name = f"{doc['kind']}/{doc['metadata']['name']}"
    if key in CRDS:
        try:
            jsonschema.validate(doc, CRDS[key])
        except jsonschema.ValidationError as e:
            raise AssertionError(f"{name}: {e.message} at {'/'.join(map(str, e.path))}") from None
    else:
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            raise AssertionError(f"{name}: {e.message} at {'/'.join(map(str, e.path))}") from None
        except kubernetes_validate.SchemaNotFoundError:
            raise AssertionError(f"{name}: no schema for {doc['apiVersion']}") from None


def pod_specs(doc):
    kind, spec = doc["kind"], doc.get("spec", {})
    if kind in ("Deployment", "DaemonSet", "StatefulSet", "Job"):
        yield spec["template"]["spec"]
    elif kind == "CronJob":
        yield spec["jobTemplate"]["spec"]["template"]["spec"]


def kura_containers(docs):
    """(object name, container, pod spec) of every container running kura's image."""
    for doc in docs:
        for pod in pod_specs(doc):
            for c in pod.get("containers", []) + pod.get("initContainers", []):
                if c["image"].split(":")[0] == IMAGE.split(":")[0]:
                    yield f"{doc['kind']}/{doc['metadata']['name']}/{c['name']}", c, pod


def assert_hardened(where, c, pod):
    sc, psc = c.get("securityContext", {}), pod.get("securityContext", {})
    eff = lambda k: sc.get(k, psc.get(k))  # noqa: E731 - the container's, else the pod's
    assert eff("runAsNonRoot") is True, f"{where}: runAsNonRoot"
    assert eff("runAsUser") not in (None, 0), f"{where}: runs as user {eff('runAsUser')}"
    assert sc.get("readOnlyRootFilesystem") is True, f"{where}: root filesystem writable"
    assert sc.get("allowPrivilegeEscalation") is False, f"{where}: privilege escalation"
    assert not sc.get("privileged"), f"{where}: privileged"
    assert "ALL" in sc.get("capabilities", {}).get("drop", []), f"{where}: capabilities kept"
    assert not sc.get("capabilities", {}).get("add"), f"{where}: capabilities added"
    seccomp = sc.get("seccompProfile", psc.get("seccompProfile", {}))
    assert seccomp.get("type") == "RuntimeDefault", f"{where}: seccomp {seccomp}"
    res = c.get("resources", {})
    for part in ("requests", "limits"):
        for what in ("cpu", "memory"):
            assert what in res.get(part, {}), f"{where}: no {what} in {part}"


def objects(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def gateway_configs(docs):
    return {d["metadata"]["name"]: d["data"]["gateway.toml"]
            for d in objects(docs, "ConfigMap") if "gateway.toml" in d.get("data", {})}


@check("every overlay renders and validates")
def overlays_validate(rendered):
    for overlay, docs in rendered.items():
        assert docs, f"{overlay}: renders nothing"
        for doc in docs:
            validate(doc)


@check("every container kura ships is non-root, read-only, unprivileged and limited")
def containers_hardened(rendered):
    for overlay in OVERLAYS:
        docs = rendered[overlay]
        found = list(kura_containers(docs))
        assert found, f"{overlay}: no kura container"
        for where, c, pod in found:
            assert_hardened(f"{overlay}: {where}", c, pod)


@check("standalone: 2 replicas, probes on the admin port, PDB, Service, policy, monitor")
def standalone_shape(rendered):
    docs = rendered["standalone"]
    assert all(d["metadata"].get("namespace") == "velero" for d in docs), "namespace"
    (dep,) = objects(docs, "Deployment")
    assert dep["spec"]["replicas"] == 2
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"s3": 9000, "admin": 9001}
    (pdb,) = objects(docs, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    (svc,) = objects(docs, "Service")
    assert {p["name"] for p in svc["spec"]["ports"]} == {"s3", "admin"}
    assert objects(docs, "NetworkPolicy"), "no NetworkPolicy"
    (mon,) = objects(docs, "ServiceMonitor")
    assert mon["spec"]["endpoints"][0]["port"] == "admin"
    labels = dep["spec"]["template"]["metadata"]["labels"]
    for sel in (svc["spec"]["selector"], pdb["spec"]["selector"]["matchLabels"],
                mon["spec"]["selector"]["matchLabels"]):
        assert all(labels.get(k) == v for k, v in sel.items()), f"selector {sel} misses"
    secrets = secret_names(docs)
    assert secrets == {"kura-keys", "kura-clients", "kura-upstream"}, secrets
    readme = (DEPLOY / "README.md").read_text()
    for s in secrets:
        assert f"`{s}`" in readme, f"deploy/README.md does not say how to create {s}"
    conf = tomllib.loads(gateway_configs(docs).popitem()[1])
    assert conf["key_file"].startswith("/etc/kura/keys/"), "key file outside the Secret mount"


def secret_names(docs):
    names = set()
    for doc in docs:
        for pod in pod_specs(doc):
            for v in pod.get("volumes", []):
                if "secret" in v:
                    names.add(v["secret"]["secretName"])
            for c in pod["containers"]:
                for e in c.get("env", []):
                    ref = e.get("valueFrom", {}).get("secretKeyRef")
                    if ref:
                        names.add(ref["name"])
    return names


@check("velero-sidecar: the gateway beside Velero's server only, S3 on loopback; node-agent left with one container")
def sidecar_shape(rendered):
    docs = rendered["velero-sidecar"]
    pods = {(d["kind"], d["metadata"]["name"]): list(pod_specs(d)) for d in docs}
    (server,) = pods[("Deployment", "velero")]
    names = [c["name"] for c in server["containers"]]
    assert "kura-gateway" in names and len(names) == 2, names
    mounted = {v["name"] for v in server["volumes"]}
    assert {"kura-config", "kura-keys", "kura-clients"} <= mounted, mounted
    # Velero 1.14+ builds its data-mover pods from node-agent's pod template and refuses
    # one with more than one container (exposer's getInheritedPodInfo): a sidecar there
    # fails every CSI data movement.
    (agent,) = pods[("DaemonSet", "node-agent")]
    assert [c["name"] for c in agent["containers"]] == ["node-agent"], agent["containers"]
    (conf,) = gateway_configs(docs).values()
    assert tomllib.loads(conf)["listen"].startswith("127.0.0.1:"), "S3 must listen on loopback"


@check("repo-cronjob: a block-mode PVC backed up through the standalone gateway")
def cronjob_shape(rendered):
    docs = rendered["repo-cronjob"]
    (job,) = objects(docs, "CronJob")
    pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    (dev,) = c["volumeDevices"]
    assert c["args"][:3] == ["backup", "--block", dev["devicePath"]], c["args"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    (svc,) = objects(docs, "Service")
    assert env["KURA_ENDPOINT"] == f"http://{svc['metadata']['name']}:9000"
    assert job["spec"]["concurrencyPolicy"] == "Forbid"
    ids = [cr["access_key_id"] for cr in
           tomllib.loads(gateway_configs(docs).popitem()[1])["credentials"]]
    assert "kura-repo" in ids, ids
    assert objects(docs, "Deployment"), "the gateway is part of this overlay"


@check("deploy/velero: BackupStorageLocation and credentials validate")
def velero_files(_rendered):
    bsl = yaml.safe_load((DEPLOY / "velero" / "backupstoragelocation.yaml").read_text())
    validate(bsl)
    cfg = bsl["spec"]["config"]
    assert cfg["s3ForcePathStyle"] == "true" and cfg["s3Url"].startswith("http")
    assert "checksumAlgorithm" not in cfg, "checksums stay at Velero's default"
    secret = yaml.safe_load((DEPLOY / "velero" / "credentials-secret.yaml").read_text())
    validate(secret)
    assert secret["metadata"]["name"] == bsl["spec"]["credential"]["name"]
    assert bsl["spec"]["credential"]["key"] in secret["stringData"]
    values = yaml.safe_load((DEPLOY / "velero" / "values.yaml").read_text())
    (loc,) = values["configuration"]["backupStorageLocation"]
    assert loc["bucket"] == bsl["spec"]["objectStorage"]["bucket"]
    assert loc["config"] == cfg, "the Helm values and the BSL file disagree"
    assert loc["prefix"] == bsl["spec"]["objectStorage"]["prefix"]
    assert loc["credential"] == bsl["spec"]["credential"]
    assert values["credentials"]["existingSecret"] == secret["metadata"]["name"]


def metric_names(text):
    """Every metric an exposition names: those with samples, and those declared by `# TYPE`
    (a counter with labels has no sample until it first counts), histograms with their
    `_bucket`, `_sum` and `_count` series."""
    names = set(re.findall(r"(?m)^(kura_[a-z_]+)", text))
    for name, kind in re.findall(r"(?m)^# TYPE (kura_[a-z_]+) (\w+)", text):
        names.add(name)
        if kind == "histogram":
            names.update(f"{name}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
    return names


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, proc=None, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} did not answer 200 within {timeout} s")


@check("the image runs each rendered gateway.toml: PUT and GET through it, ciphertext upstream")
def image_runs(rendered):
    out = subprocess.run([DEPLOY / "image" / "assemble", KURA, IMAGE],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, f"assemble: {out.stderr.strip()[-400:]}"
    print(f"   {out.stdout.strip()}", flush=True)
    user = subprocess.run(["podman", "image", "inspect", "--format", "{{.Config.User}}", IMAGE],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert user == "65532:65532", f"the image runs as {user!r}"
    configs = {}
    for overlay in OVERLAYS:
        docs = rendered[overlay]
        for name, text in gateway_configs(docs).items():
            configs.setdefault(text, f"{overlay}/{name}")
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        os.chmod(work, 0o755)
        up_dir, up_port = work / "upstream", free_port()
        up_dir.mkdir()
        upstream = subprocess.Popen(
            [UPSTREAM, "--listen", f"127.0.0.1:{up_port}", "--access-key", "upstream-ak",
             "--secret-key", "upstream-sk", up_dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            for text, where in configs.items():
                run_config(work / where.replace("/", "-"), text, where, up_port, up_dir)
        finally:
            upstream.terminate()
            upstream.wait()


def run_config(work, text, where, up_port, up_dir):
    """Starts the image as a pod would (the config, key and client Secrets mounted read-only
    at /etc/kura/...), with only the upstream's address and the ports changed."""
    s3_port, admin_port = free_port(), free_port()
    text = re.sub(r'(?m)^url = .*$', f'url = "http://127.0.0.1:{up_port}"', text)
    text = re.sub(r'(?m)^listen = "([0-9.]+):\d+"$', rf'listen = "\g<1>:{s3_port}"', text)
    text = re.sub(r'(?m)^admin_listen = .*$', f'admin_listen = "127.0.0.1:{admin_port}"', text)
    conf = tomllib.loads(text)
    mounts = {"config": work / "config", "keys": work / "keys", "clients": work / "clients"}
    for d in mounts.values():
        d.mkdir(parents=True)
    (mounts["config"] / "gateway.toml").write_text(text)
    key_file = Path(conf["key_file"])
    assert key_file.parent == Path("/etc/kura/keys"), conf["key_file"]
    subprocess.run([KURA, "keys", "generate", "--out", mounts["keys"] / key_file.name],
                   check=True, capture_output=True)
    secrets = {}
    for cred in conf["credentials"]:
        path = Path(cred["secret_access_key_file"])
        assert path.parent == Path("/etc/kura/clients"), path
        secrets[cred["access_key_id"]] = f"secret-of-{cred['access_key_id']}-0123456789"
        (mounts["clients"] / path.name).write_text(secrets[cred["access_key_id"]] + "\n")
    for d in mounts.values():
        for f in d.iterdir():
            f.chmod(0o444)
    name = f"kura-deploy-check-{s3_port}"
    cmd = PODMAN_RUN + [
        "--rm", "-d", "--name", name, "--network", "host", "--read-only", "--cap-drop", "ALL",
        "--security-opt", "no-new-privileges",
        "-e", "AWS_ACCESS_KEY_ID=upstream-ak", "-e", "AWS_SECRET_ACCESS_KEY=upstream-sk"]
    for what, d in mounts.items():
        cmd += ["-v", f"{d}:/etc/kura/{what}:ro"]
    cmd += [IMAGE, "gateway", "--config", "/etc/kura/config/gateway.toml"]
    started = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert started.returncode == 0, f"{where}: podman run: {started.stderr.strip()[-400:]}"
    try:
        wait_ready(f"http://127.0.0.1:{admin_port}/readyz")
        cred = conf["credentials"][0]
        bucket = cred["buckets"][0]
        s3 = boto3.client(
            "s3", endpoint_url=f"http://127.0.0.1:{s3_port}", region_name="us-west-002",
            aws_access_key_id=cred["access_key_id"],
            aws_secret_access_key=secrets[cred["access_key_id"]],
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
        if bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
            s3.create_bucket(Bucket=bucket)
        body = b"KURA-DEPLOY-CHECK-PLAINTEXT " * 40_000
        s3.put_object(Bucket=bucket, Key="check/object", Body=body)
        got = s3.get_object(Bucket=bucket, Key="check/object")["Body"].read()
        assert got == body, f"{where}: the GET returned other bytes"
        stored = (up_dir / bucket / "check" / "object").read_bytes()
        assert stored[:4] == b"KURA" and b"KURA-DEPLOY-CHECK" not in stored, \
            f"{where}: the upstream holds plaintext"
        s3.delete_object(Bucket=bucket, Key="check/object")
        with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=5) as r:
            SERVED_METRICS.update(metric_names(r.read().decode()))
    except Exception:
        logs = subprocess.run(["podman", "logs", name], capture_output=True, text=True)
        print(f"   {where}: gateway log tail:\n{logs.stdout[-1500:]}{logs.stderr[-1500:]}")
        raise
    finally:
        subprocess.run(["podman", "rm", "-f", name], capture_output=True)


@check("the Containerfile's runtime stage is the image assemble builds: entrypoint, user, ports")
def containerfile_matches_image(_rendered):
    # The Containerfile's base images come from registries this machine cannot reach, so it
    # is not built here; its runtime stage must describe the image that is built and run.
    lines = (DEPLOY / "Containerfile").read_text().splitlines()
    stages = [i for i, l in enumerate(lines) if l.startswith("FROM ")]
    runtime = lines[stages[-1]:]
    directive = lambda word: [l.split(None, 1)[1] for l in runtime if l.startswith(word + " ")]  # noqa: E731
    inspect = json.loads(subprocess.run(["podman", "image", "inspect", IMAGE],
                                        capture_output=True, text=True, check=True).stdout)[0]
    config = inspect["Config"]
    assert json.loads(directive("ENTRYPOINT")[0]) == config["Entrypoint"], config["Entrypoint"]
    assert directive("USER") == [config["User"]], config["User"]
    exposed = {p.removesuffix("/tcp") for l in directive("EXPOSE") for p in l.split()}
    ports = {p.removesuffix("/tcp") for p in config.get("ExposedPorts", {})}
    assert exposed == ports, (exposed, ports)
    copied = [l for l in runtime if l.startswith("COPY ")]
    assert any(l.endswith(" " + config["Entrypoint"][0]) for l in copied), copied
    assert "nonroot" in runtime[0] or directive("USER") == ["65532:65532"], runtime[0]


@check("the dashboard and alert rules name only metrics the gateway serves")
def observability_metrics(rendered):
    assert SERVED_METRICS, "no /metrics scraped (the image check failed)"
    (rule,) = objects(rendered["observability"], "PrometheusRule")
    exprs = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    (board,) = objects(rendered["observability"], "ConfigMap")
    dashboard = json.loads(board["data"]["grafana-dashboard.json"])
    exprs += [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [v["query"]["query"] for v in dashboard["templating"]["list"] if "query" in v
              and isinstance(v["query"], dict)]
    named = {m for e in exprs for m in re.findall(r"kura_[a-z_]+", e)}
    assert named, "no kura metric named"
    missing = sorted(named - SERVED_METRICS)
    assert not missing, f"not served on /metrics: {missing}"
    wanted = {"kura_requests_total", "kura_upstream_errors_total", "kura_upstream_retries_total",
              "kura_request_duration_seconds_bucket", "kura_upstream_ready",
              "kura_key_file_modified_timestamp_seconds"}
    assert wanted <= named, f"not watched: {sorted(wanted - named)}"


def main():
    missing = [t for t in ("kubectl", "podman", "buildah") if shutil.which(t) is None]
    if missing:
        sys.exit(f"deploy check: missing {', '.join(missing)} (deploy/tests/run installs them)")
    rendered = {}
    for overlay in [*OVERLAYS, "observability"]:
        rendered[overlay] = render(overlay)
    overlays_validate(rendered)
    containers_hardened(rendered)
    standalone_shape(rendered)
    sidecar_shape(rendered)
    cronjob_shape(rendered)
    velero_files(rendered)
    image_runs(rendered)
    containerfile_matches_image(rendered)
    observability_metrics(rendered)
    print(f"deploy check: {sum(results)} passed, {len(results) - sum(results)} failed")
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
