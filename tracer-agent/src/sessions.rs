//! One history per traced program run, for `tracer daemon`: a process that opened a CUDA
//! library, with the children it forks from then on, is one [`Session`] with its own
//! [`MemHistory`]. A session ends when its last process has exited and its last events are
//! in; the daemon then writes it to the store.

use std::collections::{BTreeMap, HashMap};

use hotpin_history::history::{KernelCounters, MemHistory, Retention};
use hotpin_history::store::ProgramKey;

/// What is known of a session's first process when it is found.
#[derive(Clone, Debug)]
pub struct SessionInfo {
    /// The process that opened a CUDA library (or was running with one when the daemon
    /// started).
    pub root: u32,
    /// The program, as the store keys it (executable name and build id, plus the script for
    /// an interpreter); `None` if the process was gone before it could be read.
    pub program: Option<ProgramKey>,
    /// Its command line.
    pub command: Vec<String>,
    pub uid: Option<u32>,
    pub started_unix_s: u64,
}

impl SessionInfo {
    /// Reads process `pid` from /proc (while it is stopped at its library open, or running).
    pub fn of_process(pid: u32) -> Self {
        let command = crate::target::command_line(pid).unwrap_or_default();
        let program = match ProgramKey::of_process(pid) {
            Ok(key) => Some(key),
            Err(error) => {
                tracing::debug!(pid, %error, "cannot name the program");
                None
            }
        };
        Self {
            root: pid,
            program,
            command,
            uid: crate::target::process_uid(pid),
            started_unix_s: hotpin_history::dump::unix_now(),
        }
    }
}

/// A traced program run and its history.
#[derive(Debug)]
pub struct Session {
    pub info: SessionInfo,
    /// Its processes still running (every process it had is in the history's metadata).
    pub live: Vec<u32>,
    pub history: MemHistory,
    /// The tracer's kernel counters when the session began, so the history's are those of
    /// the time it ran.
    counters_at_start: KernelCounters,
    /// False for a session taken while its processes still ran (the daemon stopping).
    pub complete: bool,
}

impl Session {
    fn new(info: SessionInfo, counters: KernelCounters, retention: Retention) -> Self {
        let mut history = MemHistory::with_retention(retention);
        let meta = history.meta_mut();
        meta.tracer = crate::TRACER_NAME.to_owned();
        meta.started_unix_s = info.started_unix_s;
        meta.pids = vec![info.root];
        meta.command = info.command.clone();
        Self {
            live: vec![info.root],
            info,
            history,
            counters_at_start: counters,
            complete: false,
        }
    }

    /// The key its history is stored under: the program, or the pid's command name.
    pub fn program(&self) -> String {
        match &self.info.program {
            Some(key) => key.to_string(),
            None => format!("unknown-{}", self.info.root),
        }
    }

    fn end(&mut self, counters: &KernelCounters) {
        let start = &self.counters_at_start;
        let stats = self.history.stats_mut();
        stats.kernel = KernelCounters {
            ringbuf_full: counters.ringbuf_full.saturating_sub(start.ringbuf_full),
            pending_full: counters.pending_full.saturating_sub(start.pending_full),
            host_ringbuf_full: counters
                .host_ringbuf_full
                .saturating_sub(start.host_ringbuf_full),
            unread_copies: counters.unread_copies.saturating_sub(start.unread_copies),
        };
    }
}

/// The sessions running and those ended but not yet taken.
#[derive(Debug, Default)]
pub struct Sessions {
    running: BTreeMap<u32, Session>,
    /// Each traced process's session root.
    root_of: HashMap<u32, u32>,
    ended: Vec<Session>,
    /// The tracer's kernel counters as last read.
    pub counters: KernelCounters,
    /// What each new session's history keeps in memory.
    pub retention: Retention,
}

impl Sessions {
    /// A new session for `info.root` (replacing a finished one of a reused pid).
    pub fn start(&mut self, info: SessionInfo) -> &mut Session {
        let root = info.root;
        if let Some(old) = self.running.remove(&root) {
            tracing::warn!(
                pid = root,
                "a process number came back before its session ended"
            );
            self.finish(old);
        }
        self.root_of.insert(root, root);
        self.running
            .entry(root)
            .or_insert_with(|| Session::new(info, self.counters, self.retention))
    }

    /// Applies each running history's bound (between batches: it renumbers allocations).
    pub fn bound(&mut self) {
        for session in self.running.values_mut() {
            session.history.bound();
        }
    }

    /// Whether `pid` belongs to a running session.
    pub fn contains(&self, pid: u32) -> bool {
        self.root_of.contains_key(&pid)
    }

    /// Process `parent` made `child`: the child's events go to the parent's history.
    pub fn fork(&mut self, parent: u32, child: u32) {
        let Some(&root) = self.root_of.get(&parent) else {
            return;
        };
        self.root_of.insert(child, root);
        if let Some(session) = self.running.get_mut(&root) {
            session.live.push(child);
            session.history.meta_mut().pids.push(child);
        }
    }

    /// The history that `pid`'s events go to.
    pub fn history_of(&mut self, pid: u32) -> Option<&mut MemHistory> {
        let root = self.root_of.get(&pid)?;
        self.running.get_mut(root).map(|s| &mut s.history)
    }

    /// Process `pid` exited and its last events are in: its session ends with its last
    /// process.
    pub fn exited(&mut self, pid: u32) {
        let Some(root) = self.root_of.remove(&pid) else {
            return;
        };
        let Some(session) = self.running.get_mut(&root) else {
            return;
        };
        session.live.retain(|&p| p != pid);
        if session.live.is_empty()
            && let Some(mut session) = self.running.remove(&root)
        {
            session.complete = true;
            self.finish(session);
        }
    }

    fn finish(&mut self, mut session: Session) {
        for pid in &session.live {
            self.root_of.remove(pid);
        }
        session.end(&self.counters);
        self.ended.push(session);
    }

    /// The sessions that ended since the last call.
    pub fn take_ended(&mut self) -> Vec<Session> {
        std::mem::take(&mut self.ended)
    }

    /// Every session, those still running included (marked incomplete): the recording is
    /// over.
    pub fn take_all(&mut self) -> Vec<Session> {
        let running = std::mem::take(&mut self.running);
        for (_, session) in running {
            self.finish(session);
        }
        self.take_ended()
    }

    /// The sessions running now.
    pub fn running(&self) -> impl Iterator<Item = &Session> {
        self.running.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(root: u32) -> SessionInfo {
        SessionInfo {
            root,
            program: None,
            command: vec!["app".into()],
            uid: Some(0),
            started_unix_s: 1,
        }
    }

    #[test]
    fn a_session_ends_with_its_last_process_forks_included() {
        let mut sessions = Sessions::default();
        sessions.start(info(10));
        sessions.start(info(20));
        sessions.fork(10, 11);
        assert!(sessions.history_of(11).is_some());
        sessions.exited(10);
        assert!(sessions.take_ended().is_empty(), "child 11 still runs");
        sessions.counters.ringbuf_full = 3;
        sessions.exited(11);
        let ended = sessions.take_ended();
        assert_eq!(ended.len(), 1);
        assert_eq!((ended[0].info.root, ended[0].complete), (10, true));
        assert_eq!(ended[0].history.meta().pids, vec![10, 11]);
        assert_eq!(ended[0].history.stats().kernel.ringbuf_full, 3);
        assert!(sessions.history_of(11).is_none());
        let rest = sessions.take_all();
        assert_eq!((rest.len(), rest[0].complete), (1, false));
    }

    #[test]
    fn events_of_unknown_processes_have_no_history() {
        let mut sessions = Sessions::default();
        assert!(sessions.history_of(5).is_none());
        sessions.fork(5, 6);
        assert!(!sessions.contains(6));
        sessions.exited(5);
        assert!(sessions.take_ended().is_empty());
    }
}
