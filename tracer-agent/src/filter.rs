//! Which processes `tracer daemon` traces: by user, cgroup and command. Every list empty (the
//! default) traces every CUDA process.

use glob::Pattern;

/// A process is traced when it passes every non-empty list: its real user id is in `users`,
/// its cgroup path matches one of `cgroups`, its command line matches one of `commands`.
#[derive(Clone, Debug, Default)]
pub struct ProcessFilter {
    pub users: Vec<u32>,
    /// Glob patterns over the cgroup v2 path (`/system.slice/train.service`).
    pub cgroups: Vec<Pattern>,
    /// Glob patterns over the command line, arguments joined by spaces (`*train.py*`).
    pub commands: Vec<Pattern>,
}

impl ProcessFilter {
    /// Parses glob patterns; the error names the one that does not parse.
    pub fn patterns(texts: &[String]) -> Result<Vec<Pattern>, String> {
        texts
            .iter()
            .map(|text| Pattern::new(text).map_err(|e| format!("pattern {text:?}: {e}")))
            .collect()
    }

    /// Whether process `pid` is traced. A process gone already is not.
    pub fn admits(&self, pid: u32) -> bool {
        let Some(process) = ProcessFacts::read(pid) else {
            return false;
        };
        self.admits_facts(&process)
    }

    fn admits_facts(&self, process: &ProcessFacts) -> bool {
        (self.users.is_empty() || process.uid.is_some_and(|uid| self.users.contains(&uid)))
            && (self.cgroups.is_empty() || self.cgroups.iter().any(|p| p.matches(&process.cgroup)))
            && (self.commands.is_empty()
                || self.commands.iter().any(|p| p.matches(&process.command)))
    }
}

/// What the filter looks at, from /proc.
struct ProcessFacts {
    uid: Option<u32>,
    cgroup: String,
    command: String,
}

impl ProcessFacts {
    fn read(pid: u32) -> Option<Self> {
        let command = crate::target::command_line(pid)?.join(" ");
        // cgroup v2: one line "0::/path"; on v1 the v2 line may be missing: "" then.
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .ok()
            .and_then(|text| {
                text.lines()
                    .find_map(|line| line.strip_prefix("0::").map(str::to_owned))
            })
            .unwrap_or_default();
        Some(Self {
            uid: crate::target::process_uid(pid),
            cgroup,
            command,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(uid: u32, cgroup: &str, command: &str) -> ProcessFacts {
        ProcessFacts {
            uid: Some(uid),
            cgroup: cgroup.into(),
            command: command.into(),
        }
    }

    #[test]
    fn empty_lists_admit_everything_and_each_list_must_match() {
        let train = facts(
            1000,
            "/user.slice/train.scope",
            "python3 train.py --epochs 3",
        );
        assert!(ProcessFilter::default().admits_facts(&train));
        let filter = ProcessFilter {
            users: vec![1000],
            cgroups: ProcessFilter::patterns(&["/user.slice/*".into()]).unwrap(),
            commands: ProcessFilter::patterns(&["*train.py*".into()]).unwrap(),
        };
        assert!(filter.admits_facts(&train));
        assert!(!filter.admits_facts(&facts(0, "/user.slice/x", "python3 train.py")));
        assert!(!filter.admits_facts(&facts(1000, "/system.slice/x", "python3 train.py")));
        assert!(!filter.admits_facts(&facts(1000, "/user.slice/x", "python3 eval.py")));
    }

    #[test]
    fn a_bad_pattern_is_named() {
        let error = ProcessFilter::patterns(&["[".into()]).unwrap_err();
        assert!(error.contains("\"[\""), "{error}");
    }

    #[test]
    fn this_process_passes_an_empty_filter_and_a_missing_one_does_not() {
        assert!(ProcessFilter::default().admits(std::process::id()));
        assert!(!ProcessFilter::default().admits(u32::MAX - 1));
    }
}
