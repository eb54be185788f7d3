//! The daemon's settings: built-in defaults, then the TOML file, then the command line.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context as _, Result, bail};
use hotpin_history::store;
use hotpin_lease::arbiter::Limits;
use serde::Deserialize;
use tracer_agent::{daemon::otlp::Endpoint, filter::ProcessFilter};

use super::super::DaemonArgs;

/// Where the daemon looks for its file when `--config` is not given.
pub const DEFAULT_CONFIG: &str = "/etc/hotpin/tracer.toml";

/// The TOML file. Every key is optional; an unknown key is an error (a typo must not be
/// ignored).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    store: Option<PathBuf>,
    /// `host:port`, or "off".
    metrics: Option<String>,
    /// An OTLP/HTTP collector URL (`http://host:port[/path]`).
    otlp: Option<String>,
    otlp_every: Option<u64>,
    max_histories: Option<usize>,
    max_allocations: Option<usize>,
    /// A size such as "10G".
    max_store_bytes: Option<String>,
    verbose: Option<bool>,
    stop_on_load: Option<bool>,
    ring_mib: Option<u32>,
    users: Option<Vec<u32>>,
    cgroups: Option<Vec<String>>,
    commands: Option<Vec<String>>,
    /// A fleet's store of histories, s3://BUCKET/PREFIX.
    fleet: Option<String>,
    /// The name this node writes its histories under in the fleet's store.
    host_name: Option<String>,
    /// The lease socket's path, or "off".
    lease_socket: Option<String>,
    /// Bytes ("64G") or a share of MemTotal ("25%").
    node_budget: Option<String>,
    /// uid = size.
    user_caps: Option<std::collections::BTreeMap<String, String>>,
    /// cgroup path = size.
    cgroup_caps: Option<std::collections::BTreeMap<String, String>>,
}

/// The share of MemTotal the node's pinned-memory budget is by default.
pub const DEFAULT_NODE_SHARE: &str = "25%";

/// Where the daemon grants leases, and within what.
#[derive(Clone, Debug, PartialEq)]
pub struct LeaseSettings {
    pub socket: PathBuf,
    pub limits: Limits,
}

/// The settings in force.
#[derive(Clone, Debug)]
pub struct Settings {
    pub store: PathBuf,
    pub metrics: Option<SocketAddr>,
    /// Where OTLP metrics go, and how often.
    pub otlp: Option<(Endpoint, Duration)>,
    pub retention: store::Retention,
    pub verbose: bool,
    /// Allocation entries each history keeps before folding freed ones (0: no bound).
    pub max_allocations: usize,
    pub stop_on_load: bool,
    pub ring_mib: u32,
    pub filter: ProcessFilter,
    /// The file read, if any.
    pub file: Option<PathBuf>,
    /// A fleet's store each history written is also put in (s3://BUCKET/PREFIX), and the
    /// name this node writes under.
    pub fleet: Option<String>,
    pub host_name: String,
    /// The lease arbiter's socket and limits; None: off.
    pub leases: Option<LeaseSettings>,
}

impl Settings {
    /// Defaults, overridden by the file (`--config`, else [`DEFAULT_CONFIG`] if it exists),
    /// overridden by the command line.
    pub fn load(args: &DaemonArgs) -> Result<Self> {
        let path = match &args.config {
            Some(path) => Some(path.clone()),
            None => Some(PathBuf::from(DEFAULT_CONFIG)).filter(|p| p.exists()),
        };
        let file = match &path {
            Some(path) => read_file(path)?,
            None => File::default(),
        };
        let defaults = store::Retention::default();
        let max_store_bytes = match args.max_store_bytes {
            Some(bytes) => bytes,
            None => match &file.max_store_bytes {
                Some(text) => hotpin_history::units::parse_bytes(text)
                    .map_err(anyhow::Error::msg)
                    .context("max_store_bytes in the configuration file")?,
                None => defaults.max_bytes,
            },
        };
        let metrics = metrics_address(args.metrics.clone().or(file.metrics))?;
        let otlp = otlp_setting(
            args.otlp.clone().or(file.otlp),
            args.otlp_every.or(file.otlp_every),
        )?;
        let ring_mib = args.ring_mib.or(file.ring_mib).unwrap_or(16);
        if !ring_mib.is_power_of_two() {
            bail!("the ring size must be a power of two (MiB), not {ring_mib}");
        }
        let filter = process_filter(args, file.users, file.cgroups, file.commands)?;
        let fleet = args.fleet.clone().or(file.fleet);
        if let Some(url) = &fleet
            && !url.starts_with("s3://")
        {
            bail!("the fleet's store {url:?} is not s3://BUCKET/PREFIX");
        }
        let host_name = args
            .host_name
            .clone()
            .or(file.host_name)
            .unwrap_or_else(hotpin_fleet::host_name);
        let leases = lease_settings(
            args,
            file.lease_socket,
            file.node_budget,
            file.user_caps.unwrap_or_default(),
            file.cgroup_caps.unwrap_or_default(),
        )?;
        Ok(Self {
            fleet,
            host_name,
            leases,
            store: args
                .store
                .clone()
                .or(file.store)
                .unwrap_or_else(store::default_root),
            metrics,
            otlp,
            retention: store::Retention {
                max_histories: args
                    .max_histories
                    .or(file.max_histories)
                    .unwrap_or(defaults.max_histories),
                max_bytes: max_store_bytes,
            },
            verbose: args.verbose || file.verbose.unwrap_or(false),
            max_allocations: args
                .max_allocations
                .or(file.max_allocations)
                .unwrap_or(tracer_agent::DEFAULT_MAX_ALLOCATIONS),
            stop_on_load: !args.no_stop_on_load && file.stop_on_load.unwrap_or(true),
            ring_mib,
            filter,
            file: path,
        })
    }
}

impl Settings {
    /// What each run's history keeps in memory: timelines when verbose, and the bound.
    pub fn history_retention(&self) -> hotpin_history::history::Retention {
        hotpin_history::history::Retention {
            timelines: self.verbose,
            max_allocations: Some(self.max_allocations).filter(|&n| n > 0),
        }
    }
}

/// The metrics address: `host:port`, or "off" (default 127.0.0.1:9464).
fn metrics_address(text: Option<String>) -> Result<Option<SocketAddr>> {
    let text = text.unwrap_or_else(|| "127.0.0.1:9464".into());
    if text == "off" {
        return Ok(None);
    }
    text.parse()
        .map(Some)
        .with_context(|| format!("the metrics address {text:?} is not host:port (or \"off\")"))
}

/// Where OTLP metrics go and how often (default every 10 s), if anywhere.
fn otlp_setting(url: Option<String>, every: Option<u64>) -> Result<Option<(Endpoint, Duration)>> {
    let Some(url) = url else {
        return Ok(None);
    };
    let endpoint = url.parse::<Endpoint>()?;
    let every = every.unwrap_or(10);
    if every == 0 {
        bail!("OTLP exports need at least one second between them");
    }
    Ok(Some((endpoint, Duration::from_secs(every))))
}

/// The processes traced: the command line's filters, else the file's.
fn process_filter(
    args: &DaemonArgs,
    users: Option<Vec<u32>>,
    cgroups: Option<Vec<String>>,
    commands: Option<Vec<String>>,
) -> Result<ProcessFilter> {
    let pick = |cli: &[String], file: Option<Vec<String>>| {
        if cli.is_empty() {
            file.unwrap_or_default()
        } else {
            cli.to_vec()
        }
    };
    Ok(ProcessFilter {
        users: if args.users.is_empty() {
            users.unwrap_or_default()
        } else {
            args.users.clone()
        },
        cgroups: ProcessFilter::patterns(&pick(&args.cgroups, cgroups))
            .map_err(anyhow::Error::msg)
            .context("a cgroup filter")?,
        commands: ProcessFilter::patterns(&pick(&args.commands, commands))
            .map_err(anyhow::Error::msg)
            .context("a command filter")?,
    })
}

/// The lease settings from the command line, else the file, else the defaults.
fn lease_settings(
    args: &DaemonArgs,
    socket: Option<String>,
    budget: Option<String>,
    user_caps: std::collections::BTreeMap<String, String>,
    cgroup_caps: std::collections::BTreeMap<String, String>,
) -> Result<Option<LeaseSettings>> {
    let socket = args
        .lease_socket
        .clone()
        .or(socket)
        .unwrap_or_else(|| hotpin_lease::DEFAULT_SOCKET.into());
    if socket == "off" {
        return Ok(None);
    }
    let budget = args
        .node_budget
        .clone()
        .or(budget)
        .unwrap_or_else(|| DEFAULT_NODE_SHARE.into());
    let node = node_budget(&budget).with_context(|| format!("the node budget {budget:?}"))?;
    let pairs = |cli: &[String], file: std::collections::BTreeMap<String, String>| {
        if cli.is_empty() {
            file.into_iter().collect::<Vec<_>>()
        } else {
            cli.iter()
                .map(|pair| match pair.split_once('=') {
                    Some((key, value)) => (key.to_owned(), value.to_owned()),
                    None => (pair.clone(), String::new()),
                })
                .collect()
        }
    };
    let size = |what: &str, key: &str, value: &str| {
        hotpin_history::units::parse_bytes(value)
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("the {what} cap {key}={value:?} (a size such as 8G)"))
    };
    let mut limits = Limits {
        node,
        ..Limits::default()
    };
    for (key, value) in pairs(&args.user_caps, user_caps) {
        let uid = key
            .parse::<u32>()
            .with_context(|| format!("the user cap {key}={value:?}: {key:?} is not a uid"))?;
        limits.per_user.insert(uid, size("user", &key, &value)?);
    }
    for (key, value) in pairs(&args.cgroup_caps, cgroup_caps) {
        if !key.starts_with('/') {
            bail!(
                "the cgroup cap {key}={value:?}: a cgroup is a path from / (as in /proc/PID/cgroup)"
            );
        }
        let bytes = size("cgroup", &key, &value)?;
        limits.per_cgroup.push((key, bytes));
    }
    Ok(Some(LeaseSettings {
        socket: PathBuf::from(socket),
        limits,
    }))
}

/// A budget in bytes ("64G") or as a share of MemTotal ("25%").
fn node_budget(text: &str) -> Result<u64> {
    let Some(percent) = text.strip_suffix('%') else {
        return hotpin_history::units::parse_bytes(text).map_err(anyhow::Error::msg);
    };
    let percent: f64 = percent
        .trim()
        .parse()
        .ok()
        .filter(|p: &f64| (0.0..=100.0).contains(p))
        .context("a share is a number from 0 to 100 followed by %")?;
    let meminfo = std::fs::read_to_string("/proc/meminfo").context("cannot read /proc/meminfo")?;
    let kib: u64 = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .context("/proc/meminfo has no MemTotal")?;
    Ok((kib as f64 * 1024.0 * percent / 100.0) as u64)
}

fn read_file(path: &Path) -> Result<File> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the configuration file {}", path.display()))?;
    toml::from_str(&text)
        .with_context(|| format!("the configuration file {} is not valid", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> DaemonArgs {
        DaemonArgs::default()
    }

    fn write(name: &str, text: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!("hotpin-{name}-{}.toml", std::process::id()));
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn the_command_line_overrides_the_file_which_overrides_the_defaults() {
        let path = write(
            "config",
            "store = \"/tmp/s\"\nmetrics = \"127.0.0.1:9999\"\nmax_store_bytes = \"1M\"\n\
             commands = [\"*train*\"]\nusers = [1000]\n",
        );
        let mut args = args();
        args.config = Some(path.clone());
        args.metrics = Some("off".into());
        args.users = vec![7];
        let settings = Settings::load(&args).unwrap();
        assert_eq!(settings.store, PathBuf::from("/tmp/s"));
        assert_eq!(settings.metrics, None);
        assert_eq!(settings.retention.max_bytes, 1 << 20);
        assert_eq!(settings.filter.users, vec![7]);
        assert_eq!(settings.filter.commands.len(), 1);
        assert!(settings.stop_on_load);
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn the_example_file_in_the_repository_reads() {
        let mut args = args();
        args.config = Some(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("dist")
                .join("tracer.toml"),
        );
        let settings = Settings::load(&args).unwrap();
        assert_eq!(settings.retention.max_histories, 1000);
        assert_eq!(settings.metrics, Some("127.0.0.1:9464".parse().unwrap()));
    }

    #[test]
    fn a_typo_or_a_bad_value_is_an_error_that_names_the_file() {
        let path = write("typo", "stor = \"/tmp/s\"\n");
        let mut args = args();
        args.config = Some(path.clone());
        let error = format!("{:#}", Settings::load(&args).unwrap_err());
        assert!(error.contains(&path.display().to_string()), "{error}");
        assert!(error.contains("stor"), "{error}");
        std::fs::remove_file(path).unwrap();
        args.config = None;
        args.metrics = Some("localhost".into());
        assert!(Settings::load(&args).is_err());
        args.metrics = None;
        args.commands = vec!["[".into()];
        assert!(Settings::load(&args).is_err());
        args.commands = Vec::new();
        args.otlp = Some("https://collector:4318".into());
        let error = format!("{:#}", Settings::load(&args).unwrap_err());
        assert!(error.contains("no TLS"), "{error}");
        args.otlp = Some("http://collector:4318".into());
        args.otlp_every = Some(0);
        assert!(Settings::load(&args).is_err());
        args.otlp_every = Some(3);
        let (endpoint, every) = Settings::load(&args).unwrap().otlp.expect("OTLP on");
        assert_eq!(endpoint.to_string(), "http://collector:4318/v1/metrics");
        assert_eq!(every, Duration::from_secs(3));
    }

    #[test]
    fn the_lease_settings_read_sizes_shares_and_caps_and_refuse_nonsense() {
        let mut args = args();
        let settings = Settings::load(&args)
            .unwrap()
            .leases
            .expect("on by default");
        assert_eq!(settings.socket, PathBuf::from(hotpin_lease::DEFAULT_SOCKET));
        assert!(settings.limits.node > 0, "a quarter of MemTotal");
        args.node_budget = Some("3G".into());
        args.user_caps = vec!["1000=1G".into()];
        args.cgroup_caps = vec!["/kubepods/a=512M".into()];
        let limits = Settings::load(&args).unwrap().leases.unwrap().limits;
        assert_eq!(limits.node, 3 << 30);
        assert_eq!(limits.per_user.get(&1000), Some(&(1 << 30)));
        assert_eq!(
            limits.per_cgroup,
            vec![("/kubepods/a".to_owned(), 512 << 20)]
        );
        for (budget, user, cgroup) in [
            ("150%", "1000=1G", "/a=1G"),
            ("3G", "me=1G", "/a=1G"),
            ("3G", "1000", "/a=1G"),
            ("3G", "1000=1G", "kubepods=1G"),
        ] {
            args.node_budget = Some(budget.into());
            args.user_caps = vec![user.into()];
            args.cgroup_caps = vec![cgroup.into()];
            assert!(Settings::load(&args).is_err(), "{budget} {user} {cgroup}");
        }
        args.lease_socket = Some("off".into());
        args.node_budget = None;
        args.user_caps.clear();
        args.cgroup_caps.clear();
        assert_eq!(Settings::load(&args).unwrap().leases, None);
    }
}
