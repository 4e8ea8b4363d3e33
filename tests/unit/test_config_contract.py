"""Contract: every `spec.inference` the CRD accepts renders a server configuration the server accepts.

A pod of a valid OcrService must not crash at startup on its own configuration. This walks the
chain a pod really goes through, without a cluster, for a generated set of specs (every enum value,
the range boundaries, the visual-token values on and next to each crop step, and the runtime knobs
at their bounds, each also left out so the schema default applies):

1. the CRD's schema defaults, applied the way the API server does (recursively, missing only);
2. its OpenAPI checks (type, enum, minimum, maximum) with jsonschema;
3. its CEL rules (`x-kubernetes-validations`) evaluated by celpy, a pure-Python CEL;
4. the operator: `spec.parse` (which repeats the CRD's rules), the ConfigMap's config.yaml and the
   server container's env;
5. the server: `ocr_server.runtime.config.load_config` (its startup validation) on that file and env, then
   `validate_against_model` with the real model's query embeddings (768 px -> 144, 1024 px -> 256).

It also pins that the defaults agree: an OcrService without `spec.inference` runs the server's own
defaults for its engine (MAX_VISUAL_TOKENS 1024, or 1120 with vLLM: the CRD has no default for it,
the operator and the server both take the engine's), so the two cannot drift apart.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

import celpy
import jsonschema
import pytest
import yaml

from ocr_operator.api.ocrservice import FIELD_FOR_ENV
from ocr_operator import spec as spec_mod
from ocr_operator.ocrservice.render import configmap, deployment
from ocr_limits import SERVER_SETTINGS, SETTINGS
from ocr_limits.settings import MODEL_REVISION
from ocr_server.runtime.config import CROP_TOKENS, ENV_KEYS, GLOBAL_TOKENS, ConfigError, ServerConfig, load_config, validate_against_model

ROOT = Path(__file__).resolve().parents[2]
CRD = yaml.safe_load((ROOT / "crds" / "ocr.causalflow.dev_ocrservices.yaml").read_text())
SPEC_SCHEMA = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
INFERENCE_SCHEMA = SPEC_SCHEMA["properties"]["inference"]
SCHEMA_VALIDATOR = jsonschema.Draft7Validator(SPEC_SCHEMA)
# The real DeepSeek-OCR-2 has learned queries for these view sizes only (the tiny test model too).
MODEL_QUERY_SIZES = {768: CROP_TOKENS, 1024: GLOBAL_TOKENS}

# CRD field -> (server config section, key).
FIELD_TO_SERVER = {
    "inputSize": ("model", "input_size"),
    "baseSize": ("model", "base_size"),
    "minVisualTokens": ("model", "min_visual_tokens"),
    "maxVisualTokens": ("model", "max_visual_tokens"),
    "concurrency": ("runtime", "concurrency"),
    "batchSize": ("runtime", "batch_size"),
    "decodeSlots": ("runtime", "decode_slots"),
    "timeoutSeconds": ("runtime", "timeout_sec"),
    "maxNewTokens": ("runtime", "max_new_tokens"),
}

SIZES = (None, 768, 1024)
# 256 + 144k and its neighbours (k crops: 0, 2..6), the range ends and the default 1024.
TOKENS = (None, 256, 257, 543, 544, 545, 687, 688, 689, 831, 832, 833, 975, 976, 977, 1024, 1119, 1120)
RUNTIME = {
    "concurrency": (None, 1, 256),
    "batchSize": (None, 1, 64),
    "decodeSlots": (None, 0, 1024),
    "timeoutSeconds": (None, 1, 3600),
    "maxNewTokens": (None, 1, 8192),
}


# --- the CRD, evaluated in Python ---------------------------------------------------------------

def apply_defaults(value: Any, schema: dict[str, Any]) -> Any:
    """Structural defaulting as the API server does it: a missing property with a `default` gets
    it, then defaults apply inside it too; present values are never changed."""
    if isinstance(value, dict) and schema.get("type") == "object":
        for key, sub in (schema.get("properties") or {}).items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = apply_defaults(value[key], sub)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [apply_defaults(v, schema["items"]) for v in value]
    return value


@lru_cache(maxsize=None)
def _program(rule: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(rule))


@lru_cache(maxsize=None)
def _holds(rule: str, self_json: str) -> bool:
    """One CEL rule on one value (JSON text, so that equal values are evaluated once)."""
    return bool(_program(rule).evaluate({"self": celpy.json_to_cel(json.loads(self_json))}))


@lru_cache(maxsize=None)
def _paths_read(rule: str) -> tuple[tuple[tuple[str, ...], ...], tuple[tuple[str, ...], ...]] | None:
    """The field paths a rule reads, and those it only tests with `has()`, when it reads `self` only
    through fields (`self.a`, `self.a.b`; `self.a.all(...)` reads `a` whole); else None (`self`
    whole, or a macro or method on it such as `self.all(...)`)."""
    read, tested = set(), set()
    for has, path, call in re.findall(r"(\bhas\(\s*)?\bself((?:\.\w+)*)(\s*\()?", rule):
        parts = tuple(path[1:].split(".")[:-1 if call else None]) if path else ()
        if not parts:
            return None
        (tested if has and not call else read).add(parts)
    ordered = sorted(read, key=lambda p: (len(p), p))
    # A path under one already read whole adds nothing.
    return (tuple(p for i, p in enumerate(ordered) if not any(p[:len(q)] == q for q in ordered[:i])),
            tuple(sorted(tested - read)))


def _project(value: dict[str, Any], read: tuple[tuple[str, ...], ...],
             tested: tuple[tuple[str, ...], ...] = ()) -> dict[str, Any]:
    """`value` cut down to the paths `read` (each kept where present, its parents as objects), and
    the paths only `tested` for presence (kept present, an object among them emptied)."""
    seen: dict[str, Any] = {}
    for path, whole in [(p, True) for p in read] + [(p, False) for p in tested]:
        src, dst = value, seen
        for depth, key in enumerate(path):
            if not isinstance(src, dict) or key not in src:
                break
            if depth < len(path) - 1 and isinstance(src[key], dict):
                src, dst = src[key], dst.setdefault(key, {})
            elif whole or not isinstance(src[key], dict):
                dst[key] = src[key]
                break
            else:
                dst.setdefault(key, {})
                break
    return seen


def cel_errors(value: Any, schema: dict[str, Any], path: str = "spec") -> list[str]:
    """Messages of the failing `x-kubernetes-validations` rules at every object level.

    A rule that reads `self` only through field paths (`self.inference.maxVisualTokens`) is
    evaluated on those paths alone (what it cannot see cannot change its verdict), so equal inputs
    are evaluated once: the interpreter is slow, and the generated specs share most of their fields."""
    errors: list[str] = []
    if isinstance(value, dict):
        for rule in schema.get("x-kubernetes-validations") or ():
            paths = _paths_read(rule["rule"])
            seen = value if paths is None else _project(value, *paths)
            if not _holds(rule["rule"], json.dumps(seen, sort_keys=True)):
                errors.append(f"{path}: {rule['message']}")
        for key, sub in (schema.get("properties") or {}).items():
            if key in value:
                errors += cel_errors(value[key], sub, f"{path}.{key}")
    return errors


def crd_errors(spec: dict[str, Any]) -> list[str]:
    """What the API server would say about `spec` (already defaulted): schema, then CEL."""
    return list(_crd_errors(json.dumps(spec, sort_keys=True)))


@lru_cache(maxsize=None)
def _crd_errors(spec_json: str) -> tuple[str, ...]:
    spec = json.loads(spec_json)
    schema_errors = [f"spec.{'.'.join(map(str, e.path))}: {e.message}" for e in SCHEMA_VALIDATOR.iter_errors(spec)]
    return tuple(schema_errors or cel_errors(spec, SPEC_SCHEMA))


def ocrservice_spec(inference: dict[str, Any], engine: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"image": "registry.example.com/causalflow/ocr-server:0.1.0", "inference": dict(inference)}
    if engine is not None:
        spec["engine"] = engine
    return apply_defaults(spec, SPEC_SCHEMA)


# --- the operator's rendering and the server's startup validation --------------------------------

def server_startup_check(spec: dict[str, Any], tmp: Path) -> Any:
    """Render the ConfigMap and container env as the operator does, then load and validate them
    as `python -m ocr_server` does at startup. Raises ConfigError (or SpecError) on refusal."""
    parsed = spec_mod.parse(spec)
    owner = {"apiVersion": spec_mod.API_VERSION, "kind": spec_mod.KIND,
             "metadata": {"name": "contract", "namespace": "default", "uid": "0000"}, "spec": spec}
    cm = configmap.render(owner, parsed)
    config_file = tmp / configmap.CONFIG_KEY
    config_file.write_text(cm["data"][configmap.CONFIG_KEY])
    template = deployment.render_pod_template(owner, parsed, config_hash=configmap.config_hash(cm))
    container = next(c for c in template["spec"]["containers"] if c["name"] == deployment.CONTAINER)
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert env["CONFIG_FILE"] == configmap.CONFIG_PATH, "the pod reads the ConfigMap's file"
    env["CONFIG_FILE"] = str(config_file)
    cfg = load_config(env=env)
    validate_against_model(cfg, MODEL_QUERY_SIZES)
    return cfg


def generated_inference() -> Iterator[dict[str, Any]]:
    """Every size/token combination, with the runtime knobs cycling through their bounds; then
    every runtime combination with the size/token defaults. Absent (None) keys take defaults."""
    runtime = list(itertools.product(*RUNTIME.values()))
    for i, (inp, base, lo, hi) in enumerate(itertools.product(SIZES, SIZES, TOKENS, TOKENS)):
        values = dict(zip(("inputSize", "baseSize", "minVisualTokens", "maxVisualTokens"), (inp, base, lo, hi)))
        values.update(zip(RUNTIME, runtime[i % len(runtime)]))
        yield {k: v for k, v in values.items() if v is not None}
    for combo in runtime:
        yield {k: v for k, v in zip(RUNTIME, combo) if v is not None}


# --- the contract -------------------------------------------------------------------------------

ENGINES = (None, "transformers", "vllm")  # None: the CRD's default


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e or "engine-defaulted")
def test_every_crd_valid_inference_spec_starts_the_server(engine, tmp_path):
    accepted, refused = 0, []
    for inference in generated_inference():
        spec = ocrservice_spec(inference, engine)
        if crd_errors(spec):
            continue
        accepted += 1
        try:
            cfg = server_startup_check(spec, tmp_path)
        except (ConfigError, spec_mod.SpecError) as exc:
            refused.append(f"spec.engine={engine} spec.inference={inference}: {exc}")
            continue
        assert cfg.runtime.engine == (engine or "transformers"), "spec.engine reaches the server through config.yaml"
    assert refused == [], f"{len(refused)} CRD-valid specs refused, e.g.:\n" + "\n".join(refused[:10])
    # 4 of the 9 size pairs are valid (768/1024, each side possibly defaulted), times the token pairs
    # the crop arithmetic allows: fewer means the generator (or the CRD) lost coverage. vLLM's
    # processor narrows the token pairs (maxVisualTokens 1120, at most 2 crops demanded).
    assert accepted >= (10 if engine == "vllm" else 300), f"only {accepted} generated specs passed the CRD: the generator lost its coverage"


@pytest.mark.parametrize("inference", [{"minVisualTokens": 545, "maxVisualTokens": 1120}, {"minVisualTokens": 545},
                                       {"maxVisualTokens": 1119}, {"minVisualTokens": 256, "maxVisualTokens": 256}])
def test_the_crd_refuses_what_the_vllm_engine_cannot_serve(inference, tmp_path):
    """The other direction: what ENGINE=vllm refuses at startup, the CRD and the operator refuse first,
    and the same inference with the transformers engine starts."""
    spec = ocrservice_spec(inference, "vllm")
    errors = crd_errors(spec)
    assert errors and "spec.engine" in errors[0], errors
    with pytest.raises(spec_mod.SpecError, match="spec.engine"):
        spec_mod.parse(spec)
    broken = tmp_path / "vllm.yaml"
    model = {key: inference[field] for field, (_, key) in FIELD_TO_SERVER.items() if field in inference}
    broken.write_text(yaml.safe_dump({"runtime": {"engine": "vllm"}, "model": model}))
    with pytest.raises(ConfigError, match="VISUAL_TOKENS"):
        load_config(str(broken), env={})
    assert server_startup_check(ocrservice_spec(inference, "transformers"), tmp_path).runtime.engine == "transformers"


def test_choosing_the_vllm_engine_alone_is_accepted_and_starts_the_server(tmp_path):
    """spec.engine: vllm with nothing else: the CRD has no static token cap that vLLM would refuse,
    the operator fills in the engine's (1120) and the server starts with it; ENGINE=vllm alone too."""
    spec = ocrservice_spec({}, "vllm")
    assert "maxVisualTokens" not in spec["inference"]
    assert crd_errors(spec) == []
    cfg = server_startup_check(spec, tmp_path)
    assert (cfg.runtime.engine, cfg.model.max_visual_tokens) == ("vllm", 1120)
    assert load_config(env={"ENGINE": "vllm"}).model.max_visual_tokens == 1120


def test_the_crd_refuses_an_unknown_engine_and_the_server_names_the_key():
    errors = crd_errors(ocrservice_spec({}, "tensorrt"))
    assert errors and "spec.engine" in errors[0], errors
    with pytest.raises(ConfigError, match="ENGINE='tensorrt' is not allowed: transformers or vllm"):
        load_config(env={"ENGINE": "tensorrt"})


OTHER_SETTINGS = [
    {"service": {"port": port}, "model": model}
    for port in (1, 8080, 65535)
    for model in ({}, {"name": "m" * 253, "cacheDir": "/"}, {"path": "/opt/weights", "revision": "r" * 128},
                  {"pvc": {"claimName": "weights", "subPath": "v2"}, "cacheDir": "/cache"})
]


@pytest.mark.parametrize("other", OTHER_SETTINGS, ids=lambda o: f"port{o['service']['port']}-{sorted(o['model'])}")
def test_the_other_rendered_server_settings_are_accepted_at_their_bounds(other, tmp_path):
    """spec.service.port and spec.model also end up in config.yaml: their CRD bounds start too."""
    spec = apply_defaults({"image": "img:1", **copy.deepcopy(other)}, SPEC_SCHEMA)
    assert crd_errors(spec) == []
    cfg = server_startup_check(spec, tmp_path)
    assert cfg.service.port == other["service"]["port"]
    assert str(cfg.model.model_dir) == (other["model"].get("path") or f"{spec['model']['cacheDir'].rstrip('/')}/{spec['model']['name']}")


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e or "engine-defaulted")
def test_the_operator_accepts_exactly_what_the_crd_accepts(engine):
    """spec.validate repeats the CRD's rules for objects that never met the API server."""
    disagree = []
    for inference in generated_inference():
        spec = ocrservice_spec(inference, engine)
        crd_ok = not crd_errors(spec)
        try:
            spec_mod.parse(spec)
            operator_ok = True
        except spec_mod.SpecError:
            operator_ok = False
        if crd_ok != operator_ok:
            disagree.append(f"{inference}: CRD {'accepts' if crd_ok else 'rejects'}, operator {'accepts' if operator_ok else 'rejects'}")
    assert disagree == [], "\n".join(disagree[:10])


def env_item_errors(item: dict[str, Any]) -> list[str]:
    """What the API server says about one spec.env item: its CEL rules."""
    rules = SPEC_SCHEMA["properties"]["env"]["items"]["x-kubernetes-validations"]
    return [r["message"] for r in rules if not _holds(r["rule"], json.dumps(item, sort_keys=True))]


@pytest.mark.parametrize("name", sorted(FIELD_FOR_ENV))
def test_the_crd_and_the_operator_refuse_spec_env_setting_a_field_naming_the_field(name):
    item = {"name": name, "value": "1"}
    assert env_item_errors(item) == [spec_mod.env_override_error(name)]
    assert FIELD_FOR_ENV[name] in env_item_errors(item)[0]
    with pytest.raises(spec_mod.SpecError, match=re.escape(spec_mod.env_override_error(name))):
        spec_mod.parse(ocrservice_spec({}) | {"env": [item]})


def test_spec_env_may_set_what_the_ocrservice_has_no_field_for(tmp_path):
    env = [{"name": "LOG_LEVEL", "value": "debug"}, {"name": "WARMUP", "value": "0"}]
    assert [env_item_errors(e) for e in env] == [[], []]
    cfg = server_startup_check(ocrservice_spec({}) | {"env": env}, tmp_path)
    assert (cfg.service.log_level, cfg.runtime.warmup) == ("debug", False)


def test_a_crop_as_large_as_the_global_view_is_rejected_by_the_crd_naming_the_field():
    """The model's token layout is 144-token 768 px crops + one 256-token 1024 px global view: a
    crop size equal to (or above) the global view is refused by the server, so the CRD refuses it."""
    for sizes in ({"inputSize": 768, "baseSize": 768}, {"inputSize": 1024, "baseSize": 1024},
                  {"inputSize": 1024, "baseSize": 768}):
        errors = crd_errors(ocrservice_spec(sizes))
        assert errors and "spec.inference.inputSize" in errors[0], (sizes, errors)
        with pytest.raises(spec_mod.SpecError, match="spec.inference.inputSize"):
            spec_mod.parse(ocrservice_spec(sizes))


@pytest.mark.parametrize("inference, field", [
    ({"inputSize": 512}, "inputSize"),
    ({"maxVisualTokens": 1121}, "maxVisualTokens"),
    ({"minVisualTokens": 255}, "minVisualTokens"),
    ({"batchSize": 65}, "batchSize"),
    ({"decodeSlots": 1025}, "decodeSlots"),
    ({"decodeSlots": -1}, "decodeSlots"),
    ({"maxNewTokens": 8193}, "maxNewTokens"),
    ({"timeoutSeconds": 0}, "timeoutSeconds"),
    ({"minVisualTokens": 689, "maxVisualTokens": 688}, "minVisualTokens"),  # 4 crops needed, 3 allowed
    ({"minVisualTokens": 545, "maxVisualTokens": 543}, "minVisualTokens"),
])
def test_the_python_crd_check_rejects_what_the_api_server_rejects(inference, field):
    """The evaluator is not vacuous: out-of-range values and impossible token budgets fail it."""
    errors = crd_errors(ocrservice_spec(inference))
    assert errors and field in errors[0], errors


def test_the_crd_defaults_are_the_server_defaults(tmp_path):
    server = load_config(env={})
    props = INFERENCE_SCHEMA["properties"]
    for field, (section, key) in FIELD_TO_SERVER.items():
        if field != "maxVisualTokens":  # it follows the engine: below
            assert props[field]["default"] == getattr(getattr(server, section), key), f"spec.inference.{field}"
    assert "default" not in props["maxVisualTokens"]
    assert SPEC_SCHEMA["properties"]["engine"]["default"] == "transformers" == server.runtime.engine
    # And what a pod of an OcrService without spec.inference really runs with, for each engine:
    for engine in ENGINES:
        own = load_config(env={"ENGINE": engine} if engine else {})
        rendered = server_startup_check(ocrservice_spec({}, engine), tmp_path)
        for section, key in FIELD_TO_SERVER.values():
            assert getattr(getattr(rendered, section), key) == getattr(getattr(own, section), key), (engine, section, key)
    assert server.model.max_visual_tokens == 1024


def test_a_rule_is_narrowed_to_the_field_paths_it_reads_only_when_it_reads_nothing_else():
    assert _paths_read("!has(self.a) || self.a < self.b") == ((("a",), ("b",)), ())
    assert _paths_read("self.env.all(e, e.name != 'X')") == ((("env",),), ())
    assert _paths_read("has(self.i) && has(self.i.x) ? self.i.x : self.j.k.l") == (
        (("i", "x"), ("j", "k", "l")), (("i",),))
    assert _paths_read("has(self.i.x) && self.i.x < self.i.y") == ((("i", "x"), ("i", "y")), ())
    assert _paths_read("self.all(k, k != 'x')") is None and _paths_read("isCIDR(self)") is None


def test_a_value_is_cut_down_to_the_paths_read_and_those_tested_stay_present():
    value = {"engine": "vllm", "inference": {"maxVisualTokens": 1120, "concurrency": 4}, "image": "x"}
    read = (("engine",), ("inference", "maxVisualTokens"), ("inference", "minVisualTokens"))
    assert _project(value, read) == {"engine": "vllm", "inference": {"maxVisualTokens": 1120}}
    # Only tested with has(): present, its fields not kept.
    assert _project(value, (), (("inference",),)) == {"inference": {}}
    assert _project(value, (), (("inference",), ("model",))) == {"inference": {}}
    # The narrowed value gives the rule's verdict on the whole one.
    rule = "!has(self.inference) || !has(self.inference.maxVisualTokens) || self.inference.maxVisualTokens <= 1024"
    for whole in (value, {"inference": {"concurrency": 4}}, {"image": "x"}):
        assert _holds(rule, json.dumps(_project(whole, *_paths_read(rule)))) == _holds(rule, json.dumps(whole))


LABEL_MAPS = (("podLabels",), ("monitoring", "serviceMonitor", "labels"), ("monitoring", "prometheusRule", "labels"))


def with_labels(path: tuple[str, ...], labels: dict[str, str]) -> dict[str, Any]:
    spec: dict[str, Any] = {"image": "registry.example/ocr-server:1.0"}
    node = spec
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = labels
    return spec


def label_rule_errors(path: tuple[str, ...], labels: dict[str, str]) -> list[str]:
    """What the API server says about one label map: the CEL rules on it."""
    schema = SPEC_SCHEMA
    for key in path:
        schema = schema["properties"][key]
    rules = schema.get("x-kubernetes-validations") or ()
    return [r["message"] for r in rules if not _holds(r["rule"], json.dumps(labels, sort_keys=True))]


@pytest.mark.parametrize("key", ["app.kubernetes.io/managed-by", "app.kubernetes.io/instance",
                                 "ocr.causalflow.dev/revision"])
@pytest.mark.parametrize("path", LABEL_MAPS, ids=lambda p: ".".join(p))
def test_the_crd_and_the_operator_refuse_a_reserved_label_naming_the_field(path, key):
    field = "spec." + ".".join(path)
    message = spec_mod.reserved_labels_error(field)
    assert label_rule_errors(path, {key: "x"}) == [message]
    assert field in message
    with pytest.raises(spec_mod.SpecError, match=re.escape(message)):
        spec_mod.parse(with_labels(path, {key: "x"}))


@pytest.mark.parametrize("path", LABEL_MAPS, ids=lambda p: ".".join(p))
def test_the_crd_and_the_operator_accept_labels_outside_the_reserved_prefixes(path):
    labels = {"release": "prometheus", "team": "ocr", "example.com/app.kubernetes.io": "ok"}
    assert label_rule_errors(path, labels) == []
    spec_mod.parse(with_labels(path, labels))


def test_every_setting_names_the_env_variable_and_config_key_the_server_reads():
    """ocr_limits holds each shared setting's two names, and the server's env table is built from
    them (an env name it does not know would never reach it)."""
    for s in SETTINGS + SERVER_SETTINGS:
        assert ENV_KEYS[s.env] == tuple(s.key.split(".")), s.env
    section, name = MODEL_REVISION.key.split(".")
    assert name in {f for f in getattr(ServerConfig(), section).__dataclass_fields__}


def test_the_config_file_of_an_ocrservice_is_the_one_it_had_before_the_typed_models():
    """config.yaml's content is the pod template's revision: the keys and values an OcrService got
    from the hand-written mapping (service.host, runtime.gpu_id fixed; unset path, revision and a 0
    decodeSlots left out) stay as they were, or every pod would roll on the operator's upgrade."""
    base = {"service": {"host": "0.0.0.0", "port": 8080},
            "model": {"name": "deepseek-ai/DeepSeek-OCR-2", "cache_dir": "/models", "input_size": 768, "base_size": 1024,
                      "min_visual_tokens": 256, "max_visual_tokens": 1024},
            "runtime": {"engine": "transformers", "gpu_id": 0, "concurrency": 4, "batch_size": 8, "timeout_sec": 30,
                        "max_new_tokens": 8192}}
    assert configmap.server_config(spec_mod.parse(ocrservice_spec({}))) == base
    assert configmap.server_config(spec_mod.parse(ocrservice_spec({"decodeSlots": 0}) | {"model": {"revision": ""}})) == base
    spec = ocrservice_spec({"decodeSlots": 16}, "vllm") | {"model": {"path": "/w", "revision": "abc"}}
    got = configmap.server_config(spec_mod.parse(spec))
    assert got["model"] == {**base["model"], "max_visual_tokens": 1120, "path": "/w", "revision": "abc"}
    assert got["runtime"] == {**base["runtime"], "engine": "vllm", "decode_slots": 16}
