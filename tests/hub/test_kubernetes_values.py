"""The course on Kubernetes (``deploy/kubernetes/``), checked without a cluster:

- ``values.yaml`` is valid for the Zero to JupyterHub chart it pins, as ``helm install`` checks it:
  the chart's default values with the course's merged over them, validated against the chart's own
  ``values.schema.json`` (JSON Schema draft 7, as Helm uses); and the schema is strict enough to
  reject a misspelt setting, so the check can fail;
- KubeSpawner 7.0 (the chart's spawner, from PyPI) builds the pods from those values: a learner
  gets the learner image with the per-learner limits and the learner settings, cannot choose the
  instructor profile, and an instructor gets the instructor image with the gradebook's Secret;
- ``ngshare.yaml``, ``values.yaml`` and the ``Dockerfile`` agree on names, ports, labels and paths.

The chart's schema and default values are test data from the chart's repository at its tag (the
chart is published on no package registry), shipped in ``tests/data/z2jh/4.4.0/`` (its README says
how they were made); ``ATTNLAB_Z2JH_DIR`` names another folder.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlparse

import pytest
import yaml
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from tests.hub.hubdriver import ROOT

CHART_VERSION = "4.4.0"
KUBERNETES = ROOT / "deploy" / "kubernetes"
VALUES = yaml.safe_load((KUBERNETES / "values.yaml").read_text())
NGSHARE = list(yaml.safe_load_all((KUBERNETES / "ngshare.yaml").read_text()))
DOCKERFILE = (KUBERNETES / "Dockerfile").read_text()
COURSE_ID = PyFileConfigLoader(str(ROOT / "autograder" / "nbgrader_config.py")).load_config().CourseDirectory.course_id
INSTRUCTORS = "attnlab-instructors"


def chart_data() -> Path:
    folder = Path(os.environ.get("ATTNLAB_Z2JH_DIR") or ROOT / "tests" / "data" / "z2jh" / CHART_VERSION)
    missing = [name for name in ("values.schema.json", "values.yaml") if not (folder / name).is_file()]
    assert not missing, f"the chart's {', '.join(missing)} (Zero to JupyterHub {CHART_VERSION}) are not in {folder}"
    return folder


def coalesce(defaults, overrides):
    """Helm's merge of a chart's values with the user's: maps merge key by key, anything else is
    replaced, and a null removes the chart's key."""
    if not (isinstance(defaults, dict) and isinstance(overrides, dict)):
        return copy.deepcopy(overrides)
    merged = copy.deepcopy(defaults)
    for key, value in overrides.items():
        if value is None:
            merged.pop(key, None)
        elif key in merged:
            merged[key] = coalesce(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def schema_errors(values: dict) -> list[str]:
    from jsonschema import Draft7Validator

    folder = chart_data()
    schema = json.loads((folder / "values.schema.json").read_text())
    merged = coalesce(yaml.safe_load((folder / "values.yaml").read_text()), values)
    return sorted(f"{'.'.join(map(str, error.absolute_path)) or '(top)'}: {error.message}"
                  for error in Draft7Validator(schema).iter_errors(merged))


def test_the_values_are_valid_for_the_chart_as_helm_checks_them():
    assert schema_errors(VALUES) == []


def test_the_chart_schema_rejects_a_misspelt_setting():
    typo = copy.deepcopy(VALUES)
    typo["singleuser"]["memmory"] = typo["singleuser"].pop("memory")
    typo["cull"]["timout"] = typo["cull"].pop("timeout")
    errors = schema_errors(typo)
    assert any("memmory" in error for error in errors) and any("timout" in error for error in errors), errors


# --- the pods KubeSpawner makes ----------------------------------------------------------------------

def spawner_config(values: dict) -> Config:
    """KubeSpawner's configuration from the chart's values: the part of the chart's hub configuration
    (its files/hub/jupyterhub_config.py) that these values use, then the values' own
    hub.extraConfig, run as the chart runs it."""
    single = values["singleuser"]
    c = Config()
    k = c.KubeSpawner
    k.image = f"{single['image']['name']}:{single['image']['tag']}"
    k.cmd = [single["cmd"]]
    c.Spawner.default_url = single["defaultUrl"]
    k.uid, k.fs_gid = single["uid"], single["fsGid"]
    k.mem_limit, k.mem_guarantee = single["memory"]["limit"], single["memory"]["guarantee"]
    k.cpu_limit, k.cpu_guarantee = single["cpu"]["limit"], single["cpu"]["guarantee"]
    k.environment = dict(single["extraEnv"])
    k.extra_labels = dict(single.get("extraLabels", {}))
    k.profile_list = copy.deepcopy(single["profileList"])
    storage = single["storage"]
    assert storage["type"] == "dynamic"
    k.storage_pvc_ensure = True
    k.storage_capacity = storage["capacity"]
    k.volumes = [{"name": "volume-{user_server}", "persistentVolumeClaim": {"claimName": "{pvc_name}"}}]
    k.volume_mounts = [{"mountPath": storage["homeMountPath"], "name": "volume-{user_server}"}]
    for _, code in sorted(values["hub"].get("extraConfig", {}).items()):
        exec(code, {"c": c})  # noqa: S102 (the course's own configuration, as the chart executes it)
    return c


@pytest.fixture(scope="module")
def spawn(tmp_path_factory):
    """``spawn(name, groups, profile)``: the pod KubeSpawner would ask Kubernetes for, or the error it
    raises. KubeSpawner reads a kube-config when it is made (it calls no API here): a throwaway one,
    named before kubernetes_asyncio is imported (it reads KUBECONFIG then)."""
    kubeconfig = tmp_path_factory.mktemp("kube") / "config"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "none",
        "clusters": [{"name": "none", "cluster": {"server": "https://127.0.0.1:9"}}],
        "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none"}}],
        "users": [{"name": "none", "user": {"token": "none"}}],
    }))
    # The throwaway config is the only one KubeSpawner may read, whatever ran before in this session
    # (kubernetes_asyncio reads KUBECONFIG once, when first imported) and wherever the tests run (in a
    # pod, KUBERNETES_SERVICE_HOST would make it try the pod's own service account first).
    saved = {name: os.environ.pop(name, None) for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST",
                                                            "KUBERNETES_SERVICE_PORT")}
    os.environ["KUBECONFIG"] = str(kubeconfig)
    from kubernetes_asyncio.config import kube_config
    from kubespawner import KubeSpawner, clients

    saved_location = kube_config.KUBE_CONFIG_DEFAULT_LOCATION
    kube_config.KUBE_CONFIG_DEFAULT_LOCATION = str(kubeconfig)
    clients.load_config.cache_clear()

    config = spawner_config(VALUES)

    def make(name: str, groups: list[str], profile: str | None):
        user = SimpleNamespace(name=name, id=1, url=f"/user/{name}/",
                               groups=[SimpleNamespace(name=group) for group in groups])

        async def pod():  # KubeSpawner makes its API client in the event loop it will run in
            spawner = KubeSpawner(_mock=True, config=copy.deepcopy(config), user=user)
            spawner.user_options = {"profile": profile} if profile else {}
            await spawner.load_user_options()
            # the pod as the API would receive it (JSON: camelCase keys)
            return spawner.api.api_client.sanitize_for_serialization(await spawner.get_pod_manifest())

        # In a thread of its own: Playwright's sync API (the session's Chromium, when the browser
        # tests ran first) keeps an event loop running in this one, where asyncio.run() refuses.
        with ThreadPoolExecutor(max_workers=1) as thread:
            return thread.submit(asyncio.run, pod()).result()

    yield make
    kube_config.KUBE_CONFIG_DEFAULT_LOCATION = saved_location
    clients.load_config.cache_clear()
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _env(container: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def _dockerfile_env(target: str) -> dict[str, str]:
    stage = DOCKERFILE.split(f" AS {target}\n", 1)[1].split("\nFROM ", 1)[0]
    found = {}
    for block in re.findall(r"^ENV (.*?)(?<!\\)$", stage, flags=re.M | re.S):
        for key, value in re.findall(r"(\w+)=(\S+)", block.replace("\\\n", " ")):
            found[key] = value
    return found


def test_a_learner_gets_the_learner_pod_with_the_per_learner_limits(spawn):
    pod = spawn("alice", [], None)
    container = pod["spec"]["containers"][0]
    single = VALUES["singleuser"]
    assert container["image"] == f"{single['image']['name']}:{single['image']['tag']}"
    assert container["resources"]["limits"] == {"memory": 2 * 2**30, "cpu": 1.0}
    assert container["resources"]["requests"] == {"memory": 2**30, "cpu": 0.25}
    env = _env(container)
    assert env["ATTNLAB_HUB_COURSE_ID"] == COURSE_ID  # nbgrader's course id, as the course tool sets it
    assert env["JUPYTER_CONFIG_PATH"] == _dockerfile_env("learner")["JUPYTER_CONFIG_PATH"]
    assert env["JUPYTER_CONFIG_PATH"].endswith("/share/attnlab/etc/learner")  # where image-env.sh writes it
    assert urlparse(env["ATTNLAB_HUB_NGSHARE_URL"]).path == "/services/ngshare"
    assert "ATTNLAB_GRADEBOOK_URL" not in env
    assert container["securityContext"]["runAsUser"] == single["uid"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"]
              if "persistentVolumeClaim" in v}
    assert claims[mounts[single["storage"]["homeMountPath"]]] == "claim-alice"  # a home volume of their own
    assert pod["metadata"]["labels"]["hub.jupyter.org/network-access-proxy-http"] == "true"


def test_a_learner_cannot_choose_the_instructor_profile(spawn):
    with pytest.raises(ValueError, match="No such profile: instructor"):
        spawn("alice", ["some-other-group"], "instructor")


def test_an_instructor_gets_the_instructor_pod_with_the_gradebook_secret(spawn):
    pod = spawn("teacher", [INSTRUCTORS], "instructor")
    container = pod["spec"]["containers"][0]
    assert container["image"].endswith("/attnlab/instructor:0.1.0")
    assert container["resources"]["limits"] == {"memory": 4 * 2**30, "cpu": 2.0}
    env = _env(container)
    assert env["JUPYTER_CONFIG_PATH"] == _dockerfile_env("instructor")["JUPYTER_CONFIG_PATH"]
    assert env["ATTNLAB_GRADEBOOK_URL"] == {"secretKeyRef": {"name": "attnlab-gradebook", "key": "url"}}
    assert env["ATTNLAB_HUB_COURSE_ID"] == COURSE_ID and env["ATTNLAB_HUB_COURSE_DIR"] == "course"
    # an instructor may still open the learner's view
    assert spawn("teacher", [INSTRUCTORS], "learner")["spec"]["containers"][0]["image"].endswith("/attnlab/learner:0.1.0")


# --- the exchange service ----------------------------------------------------------------------------

def _kind(kind: str) -> dict:
    (found,) = [doc for doc in NGSHARE if doc["kind"] == kind]
    return found


def test_the_exchange_service_matches_what_the_hub_and_the_proxy_expect():
    service, deployment = _kind("Service"), _kind("Deployment")
    url = urlparse(VALUES["hub"]["services"]["ngshare"]["url"])
    assert (url.hostname, url.port) == (service["metadata"]["name"], service["spec"]["ports"][0]["port"])
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    # the proxy may forward to it; it may call the hub's API
    (rule,) = VALUES["proxy"]["chp"]["networkPolicy"]["egress"]
    assert rule["to"][0]["podSelector"]["matchLabels"].items() <= labels.items()
    assert rule["ports"][0]["port"] == service["spec"]["ports"][0]["port"]
    assert labels["hub.jupyter.org/network-access-hub"] == "true"
    (container,) = pod["spec"]["containers"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    # as JupyterHub would start it: its token is the one the chart made for hub.services.ngshare
    assert env["JUPYTERHUB_API_TOKEN"] == {"secretKeyRef": {"name": "hub", "key": "hub.services.ngshare.apiToken"}}
    assert env["JUPYTERHUB_SERVICE_PREFIX"] == urlparse(VALUES["singleuser"]["extraEnv"]["ATTNLAB_HUB_NGSHARE_URL"]).path + "/"
    assert urlparse(env["JUPYTERHUB_SERVICE_URL"]).port == service["spec"]["ports"][0]["port"]
    # its admins, who may create the course, are the hub's instructors
    admins = next(a.split("=", 1)[1] for a in container["args"] if a.startswith("--admins="))
    assert set(admins.split(",")) == set(VALUES["hub"]["config"]["JupyterHub"]["load_groups"][INSTRUCTORS]["users"])
    # its files live on the claim the manifest makes, where --storage points
    claim = _kind("PersistentVolumeClaim")["metadata"]["name"]
    volume = next(v for v in pod["spec"]["volumes"] if v["persistentVolumeClaim"]["claimName"] == claim)
    mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
    storage = next(a.split("=", 1)[1] for a in container["args"] if a.startswith("--storage="))
    assert Path(storage).is_relative_to(mount["mountPath"])
    # the image the manifest runs is the Dockerfile's exchange stage, which runs ngshare_service.py
    assert "ngshare_service.py" in DOCKERFILE.split(" AS exchange\n", 1)[1]
