#!/usr/bin/env python3
"""Checks the files in deploy/ against the tracer's own source, offline.

    python3 deploy/check.py        (from any directory)

What it checks, one line each (PASS, FAIL or SKIP), exit 0 only when nothing FAILs:
  (a) every YAML document in deploy/*.yaml parses; the DaemonSet has what the daemon needs
      (hostPID, the capabilities tracer-agent/src/privileges.rs asks for, the tracefs mount at
      the path tracer-agent/src/probes/tracefs.rs reads, the store, the metrics port, the
      readiness probe, the scrape annotations), its flags exist in `tracer daemon --help`
      (tracer-agent/tests/snapshots/help__tracer-daemon.snap), and its ConfigMap's tracer.toml
      has only keys tracer-agent/src/cli/daemon/config.rs accepts;
  (b) the manifests against Kubernetes' schemas, strictly, with whichever validator is
      installed (kubernetes-validate from PyPI, which bundles its schemas; kubeconform or
      kubeval on PATH); skipped, and said so, when none is;
  (c) the Grafana dashboard parses, and every hotpin_* metric its PromQL names, and every
      label and label value it filters or groups by, is one the daemon exports
      (tracer-agent/src/daemon/metrics.rs);
  (d) the Dockerfile's ENTRYPOINT/CMD run `tracer daemon` with flags that exist.

Needs Python 3.11+ (tomllib) and PyYAML; nothing from the network.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

try:
    import yaml
except ImportError:
    print(
        "FAIL setup: PyYAML is not installed; install it with `pip install pyyaml` "
        "(or `apt-get install python3-yaml`) and run this again",
        file=sys.stderr,
    )
    sys.exit(1)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
AGENT = ROOT / "tracer-agent"
METRICS_RS = AGENT / "src" / "daemon" / "metrics.rs"
PRIVILEGES_RS = AGENT / "src" / "privileges.rs"
TRACEFS_RS = AGENT / "src" / "probes" / "tracefs.rs"
CONFIG_RS = AGENT / "src" / "cli" / "daemon" / "config.rs"
HELP_SNAP = AGENT / "tests" / "snapshots" / "help__tracer-daemon.snap"
DASHBOARD = HERE / "grafana-dashboard.json"
DOCKERFILE = HERE / "Dockerfile"

# The lowest Kubernetes version the DaemonSet is written for (securityContext.appArmorProfile
# is 1.30's); the schemas of this one and of the newest the validator has are checked.
MIN_KUBERNETES = "1.30.0"
NAMESPACE = "hotpin"
METRICS_PORT = 9464
# Labels Prometheus puts on every scraped series: the dashboard may filter by them.
TARGET_LABELS = {"instance", "job"}

results: list[tuple[str, str, str]] = []


def report(status: str, name: str, detail: str) -> None:
    results.append((status, name, detail))
    print(f"{status} {name}: {detail}", flush=True)


def rel(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


# --- What the source says ----------------------------------------------------------------------


def help_flags() -> set[str]:
    """The long flags `tracer daemon --help` lists."""
    text = HELP_SNAP.read_text()
    return set(re.findall(r"^\s+(?:-\w, )?(--[a-z0-9][a-z0-9-]*)", text, re.M))


def required_capabilities() -> set[str]:
    """The capabilities privileges.rs names as missing when they are (CAP_BPF, CAP_PERFMON),
    without the CAP_ prefix, as Kubernetes spells them."""
    text = PRIVILEGES_RS.read_text()
    caps = set(re.findall(r'\(CAP_(\w+),\s*"CAP_\w+"\)', text))
    if not caps:
        raise RuntimeError(f"no capability table found in {rel(PRIVILEGES_RS)}")
    return caps


def tracefs_paths() -> tuple[str, str | None]:
    """Where the tracer reads tracefs, and the debugfs it falls back to (if the code has one)."""
    text = TRACEFS_RS.read_text()
    tracefs = re.search(r'pub const TRACEFS: &str = "([^"]+)"', text)
    if not tracefs:
        raise RuntimeError(f"no TRACEFS constant in {rel(TRACEFS_RS)}")
    debugfs = re.search(r'const DEBUGFS_TRACING: &str = "([^"]+)"', text)
    return tracefs.group(1), (str(Path(debugfs.group(1)).parent) if debugfs else None)


def config_keys() -> set[str]:
    """The keys of the daemon's TOML file: the fields of `struct File` in config.rs."""
    text = CONFIG_RS.read_text()
    body = re.search(r"struct File \{(.*?)\n\}", text, re.S)
    if not body:
        raise RuntimeError(f"no `struct File` in {rel(CONFIG_RS)}")
    return set(re.findall(r"^\s*([a-z_][a-z0-9_]*):", body.group(1), re.M))


class Exported:
    """What the daemon exports, read from metrics.rs: every Sample's name, kind, the registry
    prefix, the label keys and the label values written as literals."""

    def __init__(self) -> None:
        text = METRICS_RS.read_text()
        prefix = re.search(r'Registry::with_prefix\("([a-z0-9_]+)"\)', text)
        if not prefix:
            raise RuntimeError(f"no Registry::with_prefix in {rel(METRICS_RS)}")
        self.prefix = prefix.group(1)
        body = text.split("#[cfg(test)]")[0]
        # Each metric is written as its name, its help text, then its kind: in `add(...)`
        # calls, in the table of the tracer's own numbers and in a running run's families. Help texts may continue
        # over lines with a backslash.
        string = r'"(?:[^"\\]|\\.)*"'
        found = re.findall(
            r'"([a-z][a-z0-9_]*)",\s*' + string + r",\s*(Counter|Gauge|Histogram)\b",
            body,
            re.S,
        )
        # A running run's families, written as `RunFamily { name: ..., help: ..., kind: ... }`.
        found += re.findall(
            r'name: "([a-z][a-z0-9_]*)",\s*help: ' + string + r",\s*kind: (Counter|Gauge)\b",
            body,
            re.S,
        )
        self.kinds: dict[str, str] = {}
        for name, kind in found:
            self.kinds[name] = kind
        self.has_histograms = "Histogram" in self.kinds.values() or re.search(
            r"metrics::histogram|Histogram::new", text
        ) is not None
        self.names: set[str] = set()
        for name, kind in self.kinds.items():
            full = f"{self.prefix}_{name}"
            # prometheus-client's encoder (OpenMetrics text) writes a counter's samples with
            # _total; a histogram's with _bucket, _sum and _count.
            if kind == "Counter":
                self.names.add(full + "_total")
            elif kind == "Histogram":
                self.names.update(full + s for s in ("_bucket", "_sum", "_count"))
            else:
                self.names.add(full)
        # Label keys: those added as `Some(("key", value))`, a running run's families'
        # `label: "key"`, and those in the `vec![("key", value), ...]` every labels closure
        # starts from.
        self.labels = set(re.findall(r'Some\(\("([a-z_]+)",', body))
        self.labels.update(re.findall(r'\blabel: "([a-z_]+)"', body))
        for block in re.findall(r"vec!\[(.*?)\]", body, re.S):
            self.labels.update(re.findall(r'\("([a-z_]+)",', block))
        self.literals = set(re.findall(r'"([a-z0-9_]+)"', body))
        # The test at the bottom names full series; they must be among ours.
        self.test_names = set(re.findall(r"\b(" + self.prefix + r"_[a-z0-9_]+)\{", text))


# --- (a) YAML ----------------------------------------------------------------------------------


def load_yaml() -> list[tuple[Path, dict]]:
    docs: list[tuple[Path, dict]] = []
    files = sorted(HERE.glob("*.yaml")) + sorted(HERE.glob("*.yml"))
    if not files:
        report("FAIL", "yaml", "no deploy/*.yaml files")
        return docs
    for path in files:
        try:
            loaded = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        except yaml.YAMLError as error:
            report("FAIL", "yaml", f"{rel(path)} does not parse: {error}")
            continue
        bad = [d for d in loaded if not isinstance(d, dict) or "kind" not in d]
        if bad:
            report("FAIL", "yaml", f"{rel(path)}: a document is not a Kubernetes object")
            continue
        docs.extend((path, d) for d in loaded)
        kinds = ", ".join(f"{d['kind']}/{d.get('metadata', {}).get('name')}" for d in loaded)
        report("PASS", "yaml", f"{rel(path)} parses: {len(loaded)} documents ({kinds})")
    return docs


def check_daemonset(docs: list[tuple[Path, dict]], flags: set[str]) -> None:
    problems: list[str] = []
    sets = [d for _, d in docs if d.get("kind") == "DaemonSet"]
    if len(sets) != 1:
        report("FAIL", "daemonset", f"expected one DaemonSet, found {len(sets)}")
        return
    ds = sets[0]
    if ds.get("apiVersion") != "apps/v1":
        problems.append(f"apiVersion is {ds.get('apiVersion')!r}, not apps/v1")
    if ds.get("metadata", {}).get("namespace") != NAMESPACE:
        problems.append(f"not in namespace {NAMESPACE}")
    pod = ds.get("spec", {}).get("template", {}).get("spec", {})
    if pod.get("hostPID") is not True:
        problems.append("hostPID is not true (the daemon must see every process's /proc)")
    if pod.get("hostNetwork"):
        problems.append("hostNetwork is set (not needed: only the metrics port is served)")
    containers = pod.get("containers", [])
    tracer = next((c for c in containers if "tracer" in c.get("name", "")), None)
    if tracer is None:
        report("FAIL", "daemonset", "no container named tracer")
        return

    # Privileges: what privileges.rs checks, plus what the daemon's work needs; no more.
    security = tracer.get("securityContext", {})
    if security.get("privileged") is not False:
        problems.append("securityContext.privileged is not explicitly false")
    caps = security.get("capabilities", {})
    added = {c.upper().removeprefix("CAP_") for c in caps.get("add", [])}
    needed = required_capabilities() | {"SYS_PTRACE"}
    missing = needed - added
    if missing:
        problems.append(f"capabilities missing: {', '.join(sorted(missing))}")
    if "SYS_ADMIN" in added:
        problems.append("CAP_SYS_ADMIN is added (CAP_BPF and CAP_PERFMON suffice)")
    if "ALL" not in {c.upper() for c in caps.get("drop", [])}:
        problems.append("capabilities.drop does not drop ALL")

    # Volumes: tracefs where the tracer reads it, debugfs where it falls back, the store.
    volumes = {v.get("name"): v for v in pod.get("volumes", [])}
    mounts = {m.get("mountPath"): m for m in tracer.get("volumeMounts", [])}

    def host_path_at(mount_path: str) -> str | None:
        mount = mounts.get(mount_path)
        if not mount:
            return None
        return volumes.get(mount.get("name"), {}).get("hostPath", {}).get("path")

    tracefs, debugfs = tracefs_paths()
    for path, what in [(tracefs, "tracefs"), (debugfs, "debugfs (the tracer's fallback)")]:
        if path is None:
            continue
        if host_path_at(path) != path:
            problems.append(f"no hostPath {path} mounted at {path} ({what})")
        elif not mounts[path].get("readOnly"):
            problems.append(f"{path} is mounted writable (the tracer only reads it)")

    args = list(tracer.get("args", []))
    command = list(tracer.get("command", []))
    used = [a.split("=", 1)[0] for a in command + args if a.startswith("--")]
    unknown = [f for f in used if f not in flags]
    if unknown:
        problems.append(f"flags not in `tracer daemon --help`: {', '.join(unknown)}")

    def value_of(flag: str) -> str | None:
        for i, arg in enumerate(args):
            if arg == flag and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
        return None

    store = value_of("--store") or "/var/lib/hotpin/histories"
    store_mount = next(
        (
            p
            for p in mounts
            if (store + "/").startswith(p.rstrip("/") + "/")
            and volumes.get(mounts[p].get("name"), {}).get("hostPath")
        ),
        None,
    )
    if store_mount is None:
        problems.append(f"the store {store} is not on a hostPath volume")
    elif mounts[store_mount].get("readOnly"):
        problems.append(f"the store's mount {store_mount} is read-only")

    metrics = value_of("--metrics")
    if metrics is None or not metrics.startswith("0.0.0.0:"):
        problems.append(f"--metrics is {metrics!r}; the default 127.0.0.1 is unreachable from Prometheus")
    elif metrics.rsplit(":", 1)[1] != str(METRICS_PORT):
        problems.append(f"--metrics {metrics} is not port {METRICS_PORT}")
    port = next((p for p in tracer.get("ports", []) if p.get("name") == "metrics"), None)
    if port is None or port.get("containerPort") != METRICS_PORT:
        problems.append(f"no containerPort {METRICS_PORT} named metrics")

    config = value_of("--config")
    if config is not None:
        config_mount = mounts.get(str(Path(config).parent))
        if not config_mount or "configMap" not in volumes.get(config_mount.get("name"), {}):
            problems.append(f"--config {config}: its folder is not a mounted ConfigMap")

    probe = tracer.get("readinessProbe", {}).get("httpGet", {})
    if probe.get("path") != "/metrics" or probe.get("port") not in ("metrics", METRICS_PORT):
        problems.append("no readinessProbe httpGet /metrics on the metrics port")
    resources = tracer.get("resources", {})
    if not resources.get("requests") or not resources.get("limits"):
        problems.append("resources.requests and resources.limits are not both set")
    annotations = ds["spec"]["template"].get("metadata", {}).get("annotations", {})
    if annotations.get("prometheus.io/scrape") != "true" or annotations.get(
        "prometheus.io/port"
    ) != str(METRICS_PORT):
        problems.append("no prometheus.io/scrape and prometheus.io/port annotations")

    account = pod.get("serviceAccountName")
    accounts = {
        d["metadata"]["name"]
        for _, d in docs
        if d.get("kind") == "ServiceAccount" and d["metadata"].get("namespace") == NAMESPACE
    }
    if account not in accounts:
        problems.append(f"serviceAccountName {account!r} is not a ServiceAccount in {NAMESPACE}")

    if problems:
        for problem in problems:
            report("FAIL", "daemonset", problem)
    else:
        report(
            "PASS",
            "daemonset",
            f"hostPID; privileged false; capabilities {', '.join(sorted(added))} "
            f"(privileges.rs asks for {', '.join(sorted(required_capabilities()))}); "
            f"tracefs {tracefs} and {debugfs} read-only; store {store} on hostPath; "
            f"port {METRICS_PORT} named metrics; readiness /metrics; flags "
            f"{', '.join(used)} exist",
        )


def check_configmap(docs: list[tuple[Path, dict]]) -> None:
    maps = [d for _, d in docs if d.get("kind") == "ConfigMap" and "tracer.toml" in d.get("data", {})]
    if not maps:
        report("SKIP", "config", "no ConfigMap with a tracer.toml")
        return
    keys = config_keys()
    for cm in maps:
        try:
            settings = tomllib.loads(cm["data"]["tracer.toml"])
        except tomllib.TOMLDecodeError as error:
            report("FAIL", "config", f"ConfigMap {cm['metadata']['name']}: tracer.toml: {error}")
            continue
        unknown = sorted(set(settings) - keys)
        if unknown:
            report(
                "FAIL",
                "config",
                f"tracer.toml keys the daemon rejects (config.rs denies unknown fields): "
                f"{', '.join(unknown)}",
            )
        else:
            report(
                "PASS",
                "config",
                f"ConfigMap {cm['metadata']['name']}: tracer.toml parses; its keys "
                f"({', '.join(sorted(settings))}) are all in config.rs's File",
            )


# --- (b) schemas -------------------------------------------------------------------------------


def check_schemas(docs: list[tuple[Path, dict]]) -> None:
    files = sorted({str(p) for p, _ in docs})
    ran = False
    try:
        import kubernetes_validate  # type: ignore[import-not-found]
        from kubernetes_validate import utils as kv_utils  # type: ignore[import-not-found]
    except ImportError:
        kubernetes_validate = None
    if kubernetes_validate is not None:
        ran = True
        available = kv_utils.all_versions()
        versions = [v for v in (MIN_KUBERNETES, kv_utils.latest_version()) if v in available]
        versions = list(dict.fromkeys(versions))
        errors = []
        for version in versions:
            for path, doc in docs:
                try:
                    kubernetes_validate.validate(doc, version, strict=True)
                except Exception as error:  # ValidationError, SchemaNotFoundError, ...
                    where = f"{rel(path)} {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
                    message = getattr(error, "message", None) or str(error)
                    path_in = "/".join(str(p) for p in getattr(error, "path", []) or [])
                    errors.append(f"[{version}] {where} {path_in}: {message}".replace("\n", " "))
        version_text = kubernetes_validate.version.__version__ if hasattr(
            kubernetes_validate, "version"
        ) else "?"
        if errors:
            for error in errors:
                report("FAIL", "schema", f"kubernetes-validate: {error}")
        else:
            report(
                "PASS",
                "schema",
                f"kubernetes-validate {version_text} (bundled schemas, strict): "
                f"{len(docs)} documents valid against Kubernetes {', '.join(versions)}",
            )
    for tool, argv in [
        ("kubeconform", ["kubeconform", "-strict", "-summary"]),
        ("kubeval", ["kubeval", "--strict"]),
    ]:
        if shutil.which(tool) is None:
            continue
        ran = True
        done = subprocess.run(argv + files, capture_output=True, text=True)
        output = " | ".join((done.stdout + done.stderr).strip().splitlines()[-5:])
        if done.returncode == 0:
            report("PASS", "schema", f"{tool} -strict: {output}")
        else:
            # kubeconform and kubeval fetch schemas from the network unless told where
            # local ones are; without it they fail here, and that is said, not hidden.
            report("FAIL", "schema", f"{tool} -strict exited {done.returncode}: {output}")
    if not ran:
        report(
            "SKIP",
            "schema",
            "schema validation skipped: no validator installed "
            "(pip install kubernetes-validate, or kubeconform/kubeval on PATH)",
        )


# --- (c) dashboard -----------------------------------------------------------------------------


def walk(node, found: list[tuple[str, str]], where: str = "") -> None:
    """Every PromQL string in the dashboard: targets' expr, variables' queries."""
    if isinstance(node, dict):
        title = node.get("title") or node.get("name") or where
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                found.append((title, value))
            elif key == "query" and isinstance(value, str) and node.get("type") == "query":
                found.append((title, value))
            elif key == "query" and isinstance(value, dict) and isinstance(value.get("query"), str):
                found.append((title, value["query"]))
            else:
                walk(value, found, title)
    elif isinstance(node, list):
        for item in node:
            walk(item, found, where)


def check_dashboard(exported: Exported) -> None:
    try:
        dashboard = json.loads(DASHBOARD.read_text())
    except (OSError, json.JSONDecodeError) as error:
        report("FAIL", "dashboard", f"{rel(DASHBOARD)} does not parse: {error}")
        return
    problems: list[str] = []
    variables = {v.get("name"): v for v in dashboard.get("templating", {}).get("list", [])}
    ds = variables.get("DS_PROMETHEUS")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        problems.append("no Prometheus datasource variable DS_PROMETHEUS")
    panels = []

    def collect(items):
        for panel in items:
            panels.append(panel)
            collect(panel.get("panels", []))

    collect(dashboard.get("panels", []))
    ids = [p.get("id") for p in panels]
    if len(ids) != len(set(ids)):
        problems.append("panel ids are not unique")
    for panel in panels:
        if panel.get("type") == "row":
            continue
        uid = panel.get("datasource", {}).get("uid")
        if uid != "${DS_PROMETHEUS}":
            problems.append(f"panel {panel.get('title')!r} uses datasource {uid!r}")
    if not isinstance(dashboard.get("schemaVersion"), int):
        problems.append("no schemaVersion")

    exprs: list[tuple[str, str]] = []
    walk(dashboard, exprs)
    used: dict[str, set[str]] = {}
    unknown_labels: dict[str, set[str]] = {}
    unknown_values: dict[str, set[str]] = {}
    labels_used: set[str] = set()
    known_labels = exported.labels | TARGET_LABELS | ({"le"} if exported.has_histograms else set())
    for title, expr in exprs:
        for name in re.findall(r"\b" + exported.prefix + r"_[a-z0-9_]+", expr):
            used.setdefault(name, set()).add(title)
        # Labels grouped by, and labels matched in selectors.
        labels = []
        for group in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
            labels += [l.strip() for l in group.split(",") if l.strip()]
        for selector in re.findall(r"\{([^{}]*)\}", expr):
            for label, _op, value in re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"', selector):
                labels.append(label)
                if label in ("direction", "memory"):
                    for alternative in value.split("|"):
                        if alternative not in exported.literals:
                            unknown_values.setdefault(f'{label}="{alternative}"', set()).add(title)
        labels_used.update(l for l in labels if l != "__name__")
        for label in labels:
            if label != "__name__" and label not in known_labels:
                unknown_labels.setdefault(label, set()).add(title)
    # Strip _bucket/_sum/_count only where the code has histograms (it has none today).
    def known(name: str) -> bool:
        if name in exported.names:
            return True
        if exported.has_histograms:
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            return any(n.startswith(base + "_") for n in exported.names)
        return False

    unknown = sorted(n for n in used if not known(n))
    for name in unknown:
        problems.append(
            f"unknown metric {name} (in {', '.join(sorted(used[name]))}): "
            f"not exported by {rel(METRICS_RS)}"
        )
    for label, titles in sorted(unknown_labels.items()):
        problems.append(f"unknown label {label} (in {', '.join(sorted(titles))})")
    for value, titles in sorted(unknown_values.items()):
        problems.append(f"unknown label value {value} (in {', '.join(sorted(titles))})")
    if problems:
        for problem in problems:
            report("FAIL", "dashboard", problem)
    else:
        unused = sorted(exported.names - set(used))
        report(
            "PASS",
            "dashboard",
            f"{rel(DASHBOARD)} parses (schemaVersion {dashboard['schemaVersion']}, "
            f"{len([p for p in panels if p.get('type') != 'row'])} panels, {len(exprs)} queries); "
            f"its {len(used)} metric names are all exported; labels used: "
            f"{', '.join(sorted(labels_used))}"
            + (f"; exported but not shown: {', '.join(unused)}" if unused else "; every exported metric is shown"),
        )


def check_exported(exported: Exported) -> None:
    missing = exported.test_names - exported.names
    if not exported.names or missing:
        report(
            "FAIL",
            "metrics",
            f"reading {rel(METRICS_RS)} found {len(exported.names)} names"
            + (f", not the test's {', '.join(sorted(missing))}" if missing else "")
            + ": the checker no longer understands the file",
        )
    else:
        counters = sum(1 for k in exported.kinds.values() if k == "Counter")
        report(
            "PASS",
            "metrics",
            f"{rel(METRICS_RS)} exports {len(exported.names)} metrics ({counters} counters as "
            f"{exported.prefix}_*_total, {len(exported.kinds) - counters} gauges, "
            f"{'histograms' if exported.has_histograms else 'no histograms'}); labels "
            f"{', '.join(sorted(exported.labels))}; its test's names "
            f"{', '.join(sorted(exported.test_names))} are among them",
        )


# --- (d) Dockerfile ----------------------------------------------------------------------------


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    current = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        word, _, rest = current.partition(" ")
        out.append((word.upper(), rest.strip()))
        current = ""
    return out


def check_dockerfile(flags: set[str]) -> None:
    try:
        instructions = dockerfile_instructions(DOCKERFILE.read_text())
    except OSError as error:
        report("FAIL", "dockerfile", str(error))
        return
    # The final stage: everything after the last FROM.
    last_from = max(i for i, (word, _) in enumerate(instructions) if word == "FROM")
    final = instructions[last_from:]
    problems: list[str] = []

    def exec_form(word: str) -> list[str] | None:
        found = [rest for w, rest in final if w == word]
        if not found:
            return None
        try:
            value = json.loads(found[-1])
        except json.JSONDecodeError:
            problems.append(f"{word} is not in exec form (JSON): signals would go to a shell")
            return None
        return value

    entrypoint = exec_form("ENTRYPOINT") or []
    cmd = exec_form("CMD") or []
    argv = entrypoint + cmd
    if len(argv) < 2 or Path(argv[0]).name != "tracer" or argv[1] != "daemon":
        problems.append(f"ENTRYPOINT/CMD is {argv}, not `tracer daemon ...`")
    used = [a.split("=", 1)[0] for a in argv[2:] if a.startswith("--")]
    unknown = [f for f in used if f not in flags]
    if unknown:
        problems.append(f"flags not in `tracer daemon --help`: {', '.join(unknown)}")
    copied = " ".join(rest for w, rest in final if w == "COPY")
    if argv and argv[0] not in copied:
        problems.append(f"{argv[0] if argv else '?'} is not what the final stage COPYs")
    builds = " ".join(rest for w, rest in instructions if w == "RUN")
    if "cargo build --release --package tracer-agent" not in builds or "cargo xtask setup" not in builds:
        problems.append("the source build does not run `cargo xtask setup` then "
                        "`cargo build --release --package tracer-agent`")
    if problems:
        for problem in problems:
            report("FAIL", "dockerfile", problem)
    else:
        report(
            "PASS",
            "dockerfile",
            f"runs {' '.join(argv)}; flags {', '.join(used)} exist "
            f"(help snapshot lists {len(flags)})",
        )


def main() -> int:
    try:
        flags = help_flags()
        exported = Exported()
    except (OSError, RuntimeError) as error:
        report("FAIL", "source", f"cannot read what the tracer says: {error}")
        return 1
    docs = load_yaml()
    check_daemonset(docs, flags)
    check_configmap(docs)
    check_schemas(docs)
    check_exported(exported)
    check_dashboard(exported)
    check_dockerfile(flags)
    failed = sum(1 for status, _, _ in results if status == "FAIL")
    skipped = sum(1 for status, _, _ in results if status == "SKIP")
    passed = sum(1 for status, _, _ in results if status == "PASS")
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
