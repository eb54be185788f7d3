//! A target held (stopped by the kernel side) while its probes are attached, let go: the
//! process, and the parents its stop stopped. `runuser`, `su` and `sudo -u` wait for their
//! child with `WUNTRACED`, and when it stops they stop themselves, to pass job control on;
//! the agent's SIGCONT resumes only the child, so they stayed stopped for good (#41: 14 of 14
//! runs under `runuser`). So the agent continues every parent of the target found stopped
//! while the target runs on, at once and for [`RELAY_FOR`] after (a parent may stop a moment
//! after its child was continued); each such parent then continues its child itself, as it
//! would have after a terminal's `fg`.

use std::time::{Duration, Instant};

/// How long after a target was let go its parents are looked at.
pub const RELAY_FOR: Duration = Duration::from_secs(2);
/// Parents looked at, at most, up from the target.
pub(crate) const DEPTH: usize = 8;

/// Targets let go lately, with their parents (nearest first) as they were when it was held.
#[derive(Debug, Default)]
pub struct Held {
    let_go: Vec<(Instant, u32, Vec<u32>)>,
}

impl Held {
    /// Lets `pid` go on (SIGCONT), and every parent of it that its stop stopped: those
    /// first, so that one which continues its child itself once continued (as `runuser`
    /// does) has done so before the child can stop again at its next library.
    pub fn let_go(&mut self, pid: u32) {
        let parents = parents(pid);
        continue_stopped(&parents);
        // SAFETY: kill has no memory preconditions; `pid` is a process the kernel stopped.
        unsafe { libc::kill(pid as i32, libc::SIGCONT) };
        self.let_go.push((Instant::now(), pid, parents));
    }

    /// Continues the parents of targets let go lately that stopped since; forgets targets let
    /// go longer ago than [`RELAY_FOR`]. Not while the target is stopped again (held for its
    /// next library): a parent continued then would continue it before the agent attached.
    pub fn relay(&mut self) {
        self.let_go.retain(|(at, pid, parents)| {
            if state_and_parent(*pid).is_some_and(|(state, _)| state != b'T') {
                continue_stopped(parents);
            }
            at.elapsed() < RELAY_FOR
        });
    }
}

/// The parents of `pid`, nearest first, up to (not including) init and this process.
fn parents(pid: u32) -> Vec<u32> {
    let me = std::process::id();
    let mut found = Vec::new();
    let mut at = pid;
    while found.len() < DEPTH {
        let Some((_, parent)) = state_and_parent(at) else {
            break;
        };
        if parent <= 1 || parent == me {
            break;
        }
        found.push(parent);
        at = parent;
    }
    found
}

/// Continues each of `parents` that is stopped (state `T`: not one stopped by a debugger, `t`).
fn continue_stopped(parents: &[u32]) {
    for &parent in parents {
        if state_and_parent(parent).is_some_and(|(state, _)| state == b'T') {
            tracing::info!(
                pid = parent,
                "continuing a parent that stopped when its child was held for attach"
            );
            // SAFETY: kill has no memory preconditions.
            unsafe { libc::kill(parent as i32, libc::SIGCONT) };
        }
    }
}

/// The state letter of `pid` and its parent, from `/proc/PID/stat` (read after the command's
/// last `)`: it may hold spaces and parentheses), without allocating: the watchdog reads it
/// in a forked child.
pub(crate) fn state_and_parent(pid: u32) -> Option<(u8, u32)> {
    let mut path = *b"/proc/\0\0\0\0\0\0\0\0\0\0\0/stat\0\0\0\0\0";
    let mut at = 6;
    let mut digits = [0u8; 10];
    let mut n = 0;
    let mut rest = pid;
    loop {
        digits[n] = b'0' + (rest % 10) as u8;
        n += 1;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    for i in (0..n).rev() {
        path[at] = digits[i];
        at += 1;
    }
    path[at..at + 5].copy_from_slice(b"/stat");
    path[at + 5] = 0;
    let mut buffer = [0u8; 512];
    // SAFETY: `path` is NUL-terminated; `buffer` has room for what is read.
    let read = unsafe {
        let fd = libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let read = libc::read(fd, buffer.as_mut_ptr().cast(), buffer.len());
        libc::close(fd);
        read
    };
    let stat = buffer.get(..usize::try_from(read).ok()?)?;
    // After the command's closing parenthesis: " S PPID ...".
    let close = stat.iter().rposition(|&b| b == b')')?;
    let fields = stat.get(close + 2..)?;
    let state = *fields.first()?;
    let mut parent = 0u32;
    for &b in fields.get(2..)? {
        if !b.is_ascii_digit() {
            break;
        }
        parent = parent.checked_mul(10)?.checked_add(u32::from(b - b'0'))?;
    }
    Some((state, parent))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_parent_of_a_target_let_go_is_continued() {
        // sh (the parent) waits for sleep; stop sh as runuser stops itself.
        let mut shell = std::process::Command::new("sh")
            .args(["-c", "sleep 30; :"])
            .spawn()
            .expect("sh");
        let sh = shell.id();
        let child = (0..100)
            .find_map(|_| {
                std::thread::sleep(Duration::from_millis(10));
                std::fs::read_to_string(format!("/proc/{sh}/task/{sh}/children"))
                    .ok()
                    .and_then(|c| {
                        c.split_whitespace()
                            .next()
                            .and_then(|p| p.parse::<u32>().ok())
                    })
            })
            .expect("sleep started");
        // SAFETY: signals to processes this test made.
        unsafe {
            libc::kill(child as i32, libc::SIGSTOP);
            libc::kill(sh as i32, libc::SIGSTOP);
        }
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(state_and_parent(sh).map(|s| s.0), Some(b'T'));
        let mut held = Held::default();
        held.let_go(child);
        std::thread::sleep(Duration::from_millis(50));
        assert_ne!(
            state_and_parent(sh).map(|s| s.0),
            Some(b'T'),
            "the parent runs again"
        );
        assert_ne!(
            state_and_parent(child).map(|s| s.0),
            Some(b'T'),
            "the target runs again"
        );
        let (state, parent) = state_and_parent(std::process::id()).expect("this process");
        assert!(matches!(state, b'R' | b'S'), "{state}");
        assert_eq!(parent, std::os::unix::process::parent_id());
        assert_eq!(state_and_parent(u32::MAX), None);
        let _ = shell.kill();
        // SAFETY: as above.
        unsafe { libc::kill(child as i32, libc::SIGKILL) };
        let _ = shell.wait();
    }
}
